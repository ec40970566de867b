// specbench's autoregressive driver over libllama, for `--peer llamacpp` (measure/llamacpp.py):
// greedy decoding of N tokens from a prompt given as token ids, one llama_process call a token, on
// THREADS threads with an f32 KV cache (as specbench's). Prints the new ids on one line, then
// "prompt_us" and "decode_us": the prompt's step and the N - 1 one-token steps, timed here around
// the library's calls only (no process start, no model load). Built by scripts/build_llamacpp.sh.
//
//   specbench-ar MODEL.gguf THREADS N ID ID ...
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ggml.h"
#include "llama.h"

static void set_tokens(llama_batch_ext* batch, const llama_token* tokens, int n, llama_pos pos0) {
  llama_batch_ext_clear(batch);
  for (int i = 0; i < n; ++i) {
    const int idx = llama_batch_ext_add_token(batch, 0, tokens[i]);
    const llama_pos pos = pos0 + i;
    llama_batch_ext_set_pos(batch, idx, &pos);
  }
  llama_batch_ext_set_output_logits(batch, n - 1, true);
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s MODEL.gguf THREADS N ID [ID ...]\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[2]), n_new = atoi(argv[3]);
  std::vector<llama_token> prompt;
  for (int i = 4; i < argc; ++i) prompt.push_back(atoi(argv[i]));
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    fprintf(stderr, "error: unable to load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = prompt.size() + n_new + 8;
  cp.n_batch = prompt.size();
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    fprintf(stderr, "error: could not make a context\n");
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_batch_ext* batch = llama_batch_ext_init(ctx);
  std::vector<llama_token> out;
  auto argmax = [&]() {
    const float* logits = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int v = 1; v < n_vocab; ++v)
      if (logits[v] > logits[best]) best = v;
    return best;
  };
  const int64_t t0 = ggml_time_us();
  set_tokens(batch, prompt.data(), prompt.size(), 0);
  if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch)) return 1;
  out.push_back(argmax());
  const int64_t t1 = ggml_time_us();
  for (int i = 1; i < n_new; ++i) {
    set_tokens(batch, &out.back(), 1, prompt.size() + i - 1);
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch)) return 1;
    out.push_back(argmax());
  }
  const int64_t t2 = ggml_time_us();
  for (auto id : out) printf("%d ", id);
  printf("\nprompt_us %lld\ndecode_us %lld\n", (long long)(t1 - t0), (long long)(t2 - t1));
  llama_batch_ext_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
