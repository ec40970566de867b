"""The prefill (decoding.start) with an earlier gpt2.py's cached_attention against today's,
alternated in one process, so that the host's drift hits both alike.

Up to commit d292ec3 a prefill at position 0 read the whole cache, empty as it is: scores against
every entry, all masked, and over 256 rows a mask that XLA constant-folds while it compiles. Write
the earlier module out and pass its path:

    git show d292ec3:specbench/model/gpt2.py > /tmp/gpt2_before.py
    python scripts/attention_ab.py /tmp/gpt2_before.py tiny-target --tokens 19,100,250 --max-len 512
    python scripts/attention_ab.py /tmp/gpt2_before.py random-124M --tokens 19,250,500 --max-len 1024

Each attention gets its own jitted program, traced with it in place of gpt2.cached_attention; the
two alternate, the order swapped every sample, 7 samples each. Prints the medians, the first call
(compile and run) and the first token of each (they must agree).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import time

import jax
import numpy as np

from specbench import prompts
from specbench.model import decoding, gpt2, weights
from specbench.model.sampling import Warp
from specbench.model.tokenizer import encode


def earlier_attention(path: str):
    """cached_attention of the gpt2.py at path, loaded as a module of its own."""
    spec = importlib.util.spec_from_file_location("gpt2_earlier", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.cached_attention


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("earlier", help="an earlier gpt2.py (see the module docstring)")
    parser.add_argument("model", nargs="?", default="tiny-target")
    parser.add_argument("--tokens", default="19,100,250", help="prompt lengths, comma-separated")
    parser.add_argument("--max-len", type=int, default=512, help="the cache's length")
    args = parser.parse_args()
    model = weights.load_model(args.model)
    attentions = {"earlier": earlier_attention(args.earlier), "today": gpt2.cached_attention}
    text = encode(prompts.DEFAULT_PROMPT)
    print(f"{model.name}: the prefill of the default prompt repeated, cache of {args.max_len}")
    for n in (int(n) for n in args.tokens.split(",")):
        ids = (text * (n // len(text) + 1))[:n]
        buf, n_prompt = decoding.prompt_buffer(ids, args.max_len)
        programs = {}
        for name, attention in attentions.items():
            gpt2.cached_attention = attention
            start = functools.partial(
                decoding.start, config=model.config, warp=Warp(0.0), max_len=args.max_len
            )
            run = jax.jit(lambda *a, start=start: start(*a))  # a new function: traced with this attention
            call = functools.partial(run, model.params, buf, n_prompt, jax.random.PRNGKey(0))
            t0 = time.perf_counter()
            first = int(jax.block_until_ready(call()).tokens[n_prompt])
            programs[name] = (call, first, time.perf_counter() - t0)
        gpt2.cached_attention = attentions["today"]
        samples = {name: [] for name in programs}
        for i in range(7):  # the order swapped every sample
            for name, (call, _, _) in list(programs.items())[:: 1 if i % 2 == 0 else -1]:
                t0 = time.perf_counter()
                jax.block_until_ready(call())
                samples[name].append(time.perf_counter() - t0)
        t = {name: float(np.median(s)) for name, s in samples.items()}
        same = len({first for _, first, _ in programs.values()}) == 1
        print(
            f"  {n:4d} tokens ({buf.shape[0]} rows): "
            + "   ".join(
                f"{name} {t[name] * 1e3:8.2f} ms (first call {programs[name][2]:.1f} s)" for name in t
            )
            + f"   ({t['earlier'] / t['today']:.2f}x)  first token "
            + ("the same" if same else "DIFFERS")
        )


if __name__ == "__main__":
    main()
