"""The prefill (decoding.start: the prompt through the model, then the first token) two ways,
alternated in one process, so that the host's drift hits both alike.

The kernel's row limit (cpu.ROWS_MAX) at 16, where a prompt's bucket of 32 rows or more took
XLA's products and the batched attention, against today's (or --limit); a prompt over both limits
runs the same program twice, a control for the noise:

    python scripts/prefill_ab.py                                    # tiny-target, 19-500 tokens
    python scripts/prefill_ab.py -m random-124M                     # GPT-2 124M, random weights
    python scripts/prefill_ab.py -m random-124M --tokens 500 --limit 512

An earlier gpt2.py's cached_attention against today's (up to commit d292ec3 a prefill at position
0 scored every entry of its empty cache, and over 256 rows XLA constant-folded their mask):

    git show d292ec3:specbench/model/gpt2.py > /tmp/gpt2_before.py
    python scripts/prefill_ab.py --attention /tmp/gpt2_before.py --tokens 19,100,250 --max-len 512

Each way gets its own jitted program, traced with its setting in place; the programs alternate, the
order swapped every sample, 7 samples each. Prints the medians, the first call (compile and run)
and the first token of each (they must agree).
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
from specbench.model.checkpoints import weights
from specbench.model.checkpoints.tokenizer import encode
from specbench.model.decode import decoding, sizing
from specbench.model.decode.sampling import Warp
from specbench.model.kernels import cpu
from specbench.model.nets import attention


def earlier_attention(path: str):
    """cached_attention of the gpt2.py (before the attention had a module of its own) or
    attention.py at path, loaded as a module of its own."""
    spec = importlib.util.spec_from_file_location("attention_earlier", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.cached_attention


def ways(args) -> dict[str, tuple[object, str, object]]:
    """{label: (module, attribute, value)}: the setting each program is traced with."""
    if args.attention:
        earlier = earlier_attention(args.attention)
        return {
            "earlier": (attention, "cached_attention", earlier),
            "today": (attention, "cached_attention", None),
        }
    return {"16": (cpu, "ROWS_MAX", 16), str(args.limit): (cpu, "ROWS_MAX", args.limit)}


def traced(model, buf, n_prompt, max_len: int, setting):
    """decoding.start jitted and run once with `setting` in place: (call, first token, seconds)."""
    module, name, value = setting
    today = getattr(module, name)
    setattr(module, name, today if value is None else value)
    try:
        start = functools.partial(decoding.start, config=model.config, warp=Warp(0.0), max_len=max_len)
        run = jax.jit(lambda *a: start(*a))  # a new function: traced with this setting
        call = functools.partial(run, model.params, buf, n_prompt, jax.random.PRNGKey(0))
        t0 = time.perf_counter()
        first = int(jax.block_until_ready(call()).tokens[n_prompt])
        return call, first, time.perf_counter() - t0
    finally:
        setattr(module, name, today)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", default="tiny-target")
    parser.add_argument("--tokens", default="19,100,250,500", help="prompt lengths, comma-separated")
    parser.add_argument(
        "--max-len", type=int, help="the cache's length (default: the longest prompt's bucket)"
    )
    parser.add_argument("--limit", type=int, default=cpu.ROWS_MAX, help="the row limit compared with 16")
    parser.add_argument(
        "--attention", help="an earlier gpt2.py or attention.py, whose cached_attention is compared instead"
    )
    args = parser.parse_args()
    if cpu.unavailable():
        raise SystemExit(f"the CPU kernel cannot run here: {cpu.unavailable()}")
    model = weights.load_model(args.model, kernels_choice="cpu")
    settings, text = ways(args), encode(prompts.DEFAULT_PROMPT)
    lengths = [int(n) for n in args.tokens.split(",")]
    max_len = args.max_len or min(model.config.n_ctx, sizing.bucket(max(lengths)))
    ways_text = " against ".join(settings)
    print(f"{model.name}: the prefill of the default prompt repeated, cache of {max_len}: {ways_text}")
    for n in lengths:
        ids = (text * (n // len(text) + 1))[:n]
        buf, n_prompt = sizing.prompt_buffer(ids, max_len)
        programs = {label: traced(model, buf, n_prompt, max_len, s) for label, s in settings.items()}
        samples = {label: [] for label in programs}
        for i in range(7):  # the order swapped every sample
            for label, (call, _, _) in list(programs.items())[:: 1 if i % 2 == 0 else -1]:
                t0 = time.perf_counter()
                jax.block_until_ready(call())
                samples[label].append(time.perf_counter() - t0)
        t = {label: float(np.median(s)) for label, s in samples.items()}
        (a, b), same = list(t), len({first for _, first, _ in programs.values()}) == 1
        over_both = not args.attention and buf.shape[0] > max(16, args.limit)
        print(
            f"  {n:4d} tokens ({buf.shape[0]} rows): "
            + "   ".join(
                f"{label} {t[label] * 1e3:8.2f} ms (first call {programs[label][2]:.1f} s)" for label in t
            )
            + f"   ({t[a] / t[b]:.2f}x)  first token "
            + ("the same" if same else "DIFFERS")
            + ("  (one program: over both limits)" if over_both else "")
        )


if __name__ == "__main__":
    main()
