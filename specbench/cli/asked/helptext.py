"""The --help texts longer than a line: the metrics' definitions (`run --help`, `sweep --help`)
and the flags that need a paragraph."""

METRICS_HELP = """\b
Metrics (one generation of N new tokens; the first comes from the prefill in both AR and SD):
  tokens/round  tokens emitted per speculative round, resampled/bonus token included (AR: 1)
  r             tokens/round / (K+1), the r of the DeepMind paper
  alpha         accepted / (accepted + rejections): MLE of the per-token acceptance rate;
                drafts after a rejection were never tested and do not count. Not vLLM's or
                llama.cpp's "acceptance rate" = accepted / drafted (accept_rate_drafted)
  t_draft       median time of one draft decode step (1 token), device loop, no dispatch
  t_target      median time of one target decode step (1 token)
  t_verify      median time of one target step over K+1 tokens
  speedup       AR wall time / SD wall time, same prompt, N, seed and models; mean ± σ of repeats
  theory        r (K+1) t_target / (K t_draft + t_target)          (Chen et al. 2023)
  refined       tokens/round t_target / (K t_draft + t_verify)     (with the measured verify step)
  t_round       median time of one whole round in the device loop; overhead = t_round - K t_draft
                - t_verify (warping, accept/reject, the draft's 2-token first step, bookkeeping)
  round model   tokens/round t_ar_token / t_round, t_ar_token one AR token with its sampling: the
                speedup the per-round costs explain; it differs from measured by the prefill
  batch B       B sequences decoded together (AR too); tokens/s count all B x N tokens, and every
                step time is one step of the whole batch. A batch runs until its slowest sequence
                is done: refined and round model use tokens per sequence per round the batch ran
                (tok/batch-round), not each sequence's own tokens/round; idle = the share of
                (sequence, round) slots in which a finished sequence waited
"""

KERNELS_HELP = (
    "Matrix products of the decode steps: cpu = specbench's CPU kernel (reads each weight once for all "
    "the rows of a step), pallas = specbench's fused Pallas kernels for a GPU (five a layer), xla = "
    "XLA's own, auto = the CPU kernel where it can run (float32 on a CPU, built at install), else the "
    "Pallas kernels where they can (a Hopper GPU that passes their self-check), else XLA."
)
VERIFY_HELP = (
    "How the target judges the drafts: token (token by token, Leviathan et al. 2023; SpecInfer's "
    "recursion over k drafts or a tree), block (one joint decision over the K drafts, Sun et al. ICLR "
    "2025), traversal (a tree from its leaves, Weng et al. NeurIPS 2025) or gbv (k drafts: the greedy "
    "path as a block, Thomas and Pal 2026). All exact."
)
DRAFTS_HELP = (
    "Draft sequences per round (a model, layerskip or eagle drafter, one sequence decoded): verified "
    "together in one target step, judged by SpecInfer's recursive rejection. At T = 0 they are all the same."
)
ACCEPTANCE_HELP = (
    "The dial's acceptance a in [0, 1] (--drafter dial, T = 0): an instrument, not a drafter to "
    "deploy. It proposes the target's own greedy tokens, each kept with probability a, else "
    "replaced by a wrong one: alpha = a, the tokens are AR's, drafting costs nothing."
)
DRAFT_VOCAB_HELP = (
    "model, layerskip, pard: the tokens the draft's head covers: the N most frequent of the bundled pair's "
    "training text (FR-Spec), or full; auto: what the draft declares (the bundled draft: 8192), else full."
)
