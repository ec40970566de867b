"""The peers themselves, run in a process of their own (peers.PeerProcess starts it): the papers'
algorithm in NumPy, Hugging Face transformers, and the seed's T5 system (Warfield's). No JAX here:
the worker imports only what its peer needs.

`serve` builds one peer, answers "ready" with its version, then runs each call it is sent and
answers with the tokens, the drafts accepted per round (where the peer tells) and the seconds the
call took, timed here around the call alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import warnings

import numpy as np

from specbench.model.nets import reference

PEERS_EXTRA = "pip install torch==2.13.0 && pip install -e '.[peers]'"  # the CPU build of torch first


class NumpyPeer:
    """reference.py's no-cache AR and SD, on float32 copies of the weights."""

    name = "numpy"

    def __init__(self, draft, target):
        """draft, target: (params as NumPy arrays, GPT2Config)."""
        self.version = np.__version__
        self.draft, self.target = draft, target

    def autoregressive(self, prompt, n_tokens, warp, seed):
        rng = np.random.default_rng(seed)
        return reference.autoregressive(self.target, prompt, n_tokens, rng, *warp), None

    def speculative(self, prompt, n_tokens, K, warp, seed):
        rng = np.random.default_rng(seed)
        return reference.speculative(self.draft, self.target, prompt, n_tokens, K, rng, *warp)


class TransformersPeer:
    """Hugging Face transformers on the same weights: `generate`, and assisted generation with a
    constant K and no confidence threshold (with dynamic K: transformers' own heuristic schedule)."""

    name = "transformers"

    def __init__(
        self, draft_dir: str, target_dir: str, dtype: str, dynamic_K: bool, on_gpu: bool, t5: bool = False
    ):
        """t5: the pair is T5s (T5ForConditionalGeneration): the prompt is the encoder's source."""
        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        self.device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
        self.version = f"{transformers.__version__} (torch {torch.__version__}, {self.device})"
        torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        self.t5 = t5
        kind = transformers.T5ForConditionalGeneration if t5 else transformers.AutoModelForCausalLM
        load = lambda d: kind.from_pretrained(d, dtype=torch_dtype).to(self.device)
        self.target, self.draft = load(target_dir).eval(), load(draft_dir).eval()
        g = self.draft.generation_config  # the assistant's schedule is read from its own config
        g.num_assistant_tokens_schedule = "heuristic" if dynamic_K else "constant"
        if not dynamic_K:
            g.assistant_confidence_threshold = 0.0  # else transformers stops drafting below 0.4

    def generate(self, prompt, n_tokens, warp, seed, **assist):
        torch = self.torch
        torch.manual_seed(seed)
        x = torch.tensor([prompt], device=self.device)
        temperature, top_k, top_p = warp
        sampled = temperature > 0
        options = dict(
            do_sample=sampled,
            temperature=temperature if sampled else None,
            top_k=(top_k or 0) if sampled else None,  # 0: off (transformers' default is 50)
            top_p=(top_p or 1.0) if sampled else None,
        )
        if self.t5:  # the decoder's start token, as specbench reads it (T5's pad where none is named)
            assist["decoder_start_token_id"] = (
                getattr(self.target.config, "decoder_start_token_id", None) or 0
            )
            # transformers sizes a T5's decoder cache by its encoder's block count, so a decoder
            # with more blocks (the bundled tiny-t5-target: 2+3) overruns it; caches that grow a
            # layer at a time fit any decoder
            from transformers.cache_utils import DynamicCache, EncoderDecoderCache

            assist["past_key_values"] = EncoderDecoderCache(DynamicCache(), DynamicCache())
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # 5.24 would name the cache `cache`
            out = self.target.generate(
                x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=n_tokens,
                eos_token_id=None,  # specbench never stops early: N tokens, always
                pad_token_id=0,
                **options,
                **assist,
            )
        return out[0, 1 if self.t5 else len(prompt) :].tolist()  # a T5's output starts at its start token

    def autoregressive(self, prompt, n_tokens, warp, seed):
        return self.generate(prompt, n_tokens, warp, seed), None

    def speculative(self, prompt, n_tokens, K, warp, seed):
        self.draft.generation_config.num_assistant_tokens = K
        return self.generate(prompt, n_tokens, warp, seed, assistant_model=self.draft), None


class WarfieldPeer:
    """The seed's own system (Warfield, "Speculative Sampling – Intuitively and Exhaustively
    Explained"): greedy draft-and-verify with two T5s through transformers, with no cache. Each
    token the draft proposes is one call of the draft over the source and the whole decoder
    sequence; the target then scores the sequence with the K drafts in one call, and the longest
    prefix on which its argmax agrees is kept, with the target's own token after it."""

    name = "warfield"

    def __init__(self, draft_dir: str, target_dir: str, dtype: str):
        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()  # tqdm's lock would outlive the worker
        self.torch = torch
        self.version = f"transformers {transformers.__version__} (torch {torch.__version__}, cpu, no cache)"
        torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        load = lambda d: transformers.T5ForConditionalGeneration.from_pretrained(d, dtype=torch_dtype).eval()
        self.target, self.draft = load(target_dir), load(draft_dir)
        self.start = getattr(self.target.config, "decoder_start_token_id", None) or 0  # T5's pad

    def argmaxes(self, model, source, decoder):
        """The model's argmax after every decoder position, the encoder and decoder recomputed."""
        with self.torch.inference_mode():
            logits = model(input_ids=source, decoder_input_ids=decoder, use_cache=False).logits
        return logits[0].argmax(-1).tolist()

    def greedy(self, prompt, n_tokens, K):
        torch = self.torch
        source, out, accepted = torch.tensor([prompt]), [self.start], []
        while len(out) - 1 < n_tokens:
            if K == 0:  # autoregressive: the target alone
                out.append(self.argmaxes(self.target, source, torch.tensor([out]))[-1])
                continue
            drafts = []
            for _ in range(K):
                drafts.append(self.argmaxes(self.draft, source, torch.tensor([out + drafts]))[-1])
            verified = self.argmaxes(self.target, source, torch.tensor([out + drafts]))[len(out) - 1 :]
            a = next((i for i, (d, v) in enumerate(zip(drafts, verified)) if d != v), K)
            out += drafts[:a] + [verified[a]]
            accepted.append(a)
        return out[1 : n_tokens + 1], accepted

    def autoregressive(self, prompt, n_tokens, warp, seed):
        return self.greedy(prompt, n_tokens, 0)[0], None

    def speculative(self, prompt, n_tokens, K, warp, seed):
        return self.greedy(prompt, n_tokens, K)


def make(name: str, spec: dict):
    """The peer `name` from what the parent sent (peers.PeerProcess)."""
    if name == "numpy":
        return NumpyPeer(spec["draft"], spec["target"])
    if name == "warfield":
        return WarfieldPeer(spec["draft_dir"], spec["target_dir"], spec["dtype"])
    keys = ("draft_dir", "target_dir", "dtype", "dynamic_K", "on_gpu", "t5")
    return TransformersPeer(*(spec[k] for k in keys))


def serve(conn, name: str, spec: dict) -> None:
    """The worker: build the peer, then answer calls until the parent closes the pipe. Ctrl-C and
    SIGTERM are the parent's to handle: when the parent has gone the worker ends quietly at its
    next use of the pipe, and removes what it wrote in the temporary folder: the weights saved
    for it (spec["scratch"], once read) and torch's compile caches."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    caches = spec.get("caches") or tempfile.mkdtemp(prefix="specbench-peer-caches-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = caches  # else torchinductor_<user>/ stays in $TMPDIR
    try:
        answer(conn, name, spec)
    except (EOFError, OSError):  # a broken pipe: the parent has gone
        pass
    finally:
        for folder in (caches, spec.get("scratch")):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)


def answer(conn, name: str, spec: dict) -> None:
    """serve's loop: "ready" or the error that stopped the peer, then a reply to each call."""
    try:
        peer = make(name, spec)
    except Exception as e:  # noqa: BLE001 -- the parent reports it as one line
        conn.send(("error", f"{type(e).__name__}: {e}".splitlines()[0]))
        return
    finally:
        if spec.get("scratch"):  # the peer has read its weights, or failed to
            shutil.rmtree(spec["scratch"], ignore_errors=True)
    conn.send(("ready", peer.version))
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError, TypeError):  # the parent closed the pipe, or sent None: done
            return
        try:
            t0 = time.perf_counter()
            tokens, accepted = getattr(peer, method)(*args)
            seconds = time.perf_counter() - t0
            accepted = None if accepted is None else list(map(int, accepted))
            conn.send(("ok", list(map(int, tokens)), accepted, seconds))
        except Exception as e:  # noqa: BLE001
            conn.send(("error", f"{type(e).__name__}: {e}".splitlines()[0]))
