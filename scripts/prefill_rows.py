"""The prefill (decoding.start: the prompt through the model, then the first token) with the kernel's
row limit (kernels.ROWS_MAX) at 16, where a prompt's bucket of 32 or more rows took XLA's GEMM and
the batched attention, against the limit of today, alternated in one process (a prompt over both
limits runs the same program twice: a control for the noise):

    python scripts/prefill_rows.py                                   # tiny-target, 19-500 tokens
    python scripts/prefill_rows.py -m random-124M                    # GPT-2 124M, random weights
    python scripts/prefill_rows.py -m random-124M --tokens 500 --limit 512   # a limit of 512 instead

Each limit gets its own jitted program, traced under it; the programs alternate, the order swapped
every sample, 7 samples each, and the median is printed with the first token of each (they must agree).
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import numpy as np

from specbench import prompts
from specbench.model import decoding, kernels, weights
from specbench.model.sampling import Warp
from specbench.model.tokenizer import encode

BEFORE = 16


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", default="tiny-target")
    parser.add_argument("--tokens", default="19,100,250,500", help="prompt lengths, comma-separated")
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--limit", type=int, default=kernels.ROWS_MAX, help="the limit compared with 16")
    args = parser.parse_args()
    if kernels.unavailable():
        raise SystemExit(f"the CPU kernel cannot run here: {kernels.unavailable()}")
    model, after = weights.load_model(args.model, kernels_choice="cpu"), args.limit
    today = kernels.ROWS_MAX
    text = encode(prompts.DEFAULT_PROMPT)
    lengths = [int(n) for n in args.tokens.split(",")]
    max_len = min(model.config.n_ctx, decoding.bucket(max(lengths)))
    print(f"{model.name}: the prefill of the default prompt repeated, kernels.ROWS_MAX {BEFORE} and {after}")
    for n in lengths:
        ids = (text * (n // len(text) + 1))[:n]
        buf, n_prompt = decoding.prompt_buffer(ids, max_len)
        programs = {}
        for limit in (BEFORE, after):
            kernels.ROWS_MAX = limit
            start = functools.partial(decoding.start, config=model.config, warp=Warp(0.0), max_len=max_len)
            run = jax.jit(lambda *a, start=start: start(*a))  # a new function: traced under this limit
            call = functools.partial(run, model.params, buf, n_prompt, jax.random.PRNGKey(0))
            programs[limit] = (call, int(jax.block_until_ready(call()).tokens[n_prompt]))
        kernels.ROWS_MAX = today
        samples = {limit: [] for limit in programs}
        for i in range(args.samples):  # the order swapped every sample
            for limit, (call, _) in list(programs.items())[:: 1 if i % 2 == 0 else -1]:
                t0 = time.perf_counter()
                jax.block_until_ready(call())
                samples[limit].append(time.perf_counter() - t0)
        t = {limit: float(np.median(s)) for limit, s in samples.items()}
        firsts = {first for _, first in programs.values()}
        print(
            f"  {n:4d} tokens ({buf.shape[0]} rows): {BEFORE} {t[BEFORE] * 1e3:8.2f} ms   {after} "
            f"{t[after] * 1e3:8.2f} ms   ({t[BEFORE] / t[after]:.2f}x)  first token "
            + ("the same" if len(firsts) == 1 else f"DIFFERS {firsts}")
            + ("  (one program: over both limits)" if buf.shape[0] > after else "")
        )


if __name__ == "__main__":
    main()
