"""Throughput of AR and SD against the batch size, three ways, for docs/batches.md:

    refilled   the queue served on B slots, a finished slot taking the next prompt (refill.py)
    fixed      the queue in fixed batches of B, each run until its slowest sequence is done
    repeated   batches of B copies of one prompt: no straggler, the upper bound

Every way decodes the same Q requests of N new tokens (the built-in prompts cycled), AR and SD
alternated repeat by repeat on one machine; throughput is Q N over the wall time, speedup is AR's
wall time over SD's (medians), and the crossover is the B where the speedup falls to 1
(interpolated between the measured sizes).

    python scripts/refill_curves.py                      # bundled pair, K = 4, T = 0, Q = 16
    python scripts/refill_curves.py --batches 1,2,4,8,16 --out results/recorded/cpu-refill-curves.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from specbench import prompts
from specbench.cli.commands import loading
from specbench.model import generate
from specbench.model.checkpoints import tokenizer
from specbench.model.decode import drafters
from specbench.model.decode.sampling import Warp


def runners(draft, target, queue, B, N, K, warp, drafter):
    """(AR, SD) of each way: calls that decode the whole queue."""
    chunks = [queue[i : i + B] for i in range(0, len(queue), B)]
    one = [queue[0]] * B
    fixed = lambda gen: lambda: [gen(c if len(c) > 1 else c[0]) for c in chunks]
    ar = lambda p: generate.autoregressive(target, p, N, warp, 0)
    sd = lambda p: generate.speculative(draft, target, p, N, K, warp, 0, drafter=drafter)
    return {
        "refilled": (
            lambda: generate.serve_autoregressive(target, queue, N, warp, 0, slots=B),
            lambda: generate.serve(draft, target, queue, N, K, warp, 0, slots=B, drafter=drafter),
        ),
        "fixed": (fixed(ar), fixed(sd)),
        "repeated": (
            lambda: [ar(one if B > 1 else one[0]) for _ in chunks],
            lambda: [sd(one if B > 1 else one[0]) for _ in chunks],
        ),
    }


def timed(call) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def crossover(Bs: list[int], speedups: list[float]) -> float | None:
    """The B where the speedup falls to 1, linear between measured sizes (the first size where it
    is below 1 there already); None if it never does."""
    if speedups and speedups[0] < 1:
        return float(Bs[0])
    for (b0, s0), (b1, s1) in zip(zip(Bs, speedups), zip(Bs[1:], speedups[1:])):
        if s0 >= 1 > s1:
            return b0 + (s0 - 1) / (s0 - s1) * (b1 - b0)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--queue", type=int, default=16)
    parser.add_argument("-n", "--n-tokens", type=int, default=40)
    parser.add_argument("-k", "--K", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    draft, target = loading.load_pair(None, None, "float32")
    enc = tokenizer.for_model(target)
    ids = prompts.BUILTIN.batch_ids(prompts.BUILTIN.texts(), args.queue)
    queue = [enc.encode(prompts.BUILTIN.texts()[i]) for i in ids]
    drafter = drafters.Drafter("model", draft.config)
    warp, Bs = Warp(), [int(b) for b in args.batches.split(",")]
    rows = []
    for B in Bs:
        for way, (ar, sd) in runners(draft, target, queue, B, args.n_tokens, args.K, warp, drafter).items():
            ar(), sd()  # compiles, untimed
            walls = {"ar": [], "sd": []}
            for r in range(args.repeats):
                for m, call in (("ar", ar), ("sd", sd)) if r % 2 == 0 else (("sd", sd), ("ar", ar)):
                    walls[m].append(timed(call))
            ar_s, sd_s = float(np.median(walls["ar"])), float(np.median(walls["sd"]))
            tokens = args.queue * args.n_tokens
            row = {"way": way, "batch": B, "queue": args.queue, "n_tokens": args.n_tokens, "K": args.K}
            row |= {
                "ar_s": ar_s,
                "sd_s": sd_s,
                "ar_tokens_per_s": tokens / ar_s,
                "sd_tokens_per_s": tokens / sd_s,
            }
            row |= {"speedup": ar_s / sd_s, "ar_times_s": walls["ar"], "sd_times_s": walls["sd"]}
            rows.append(row)
            print(
                f"B={B:<3} {way:<9} AR {tokens / ar_s:8.1f} tok/s · SD {tokens / sd_s:8.1f} tok/s"
                f" · {ar_s / sd_s:.2f}x",
                flush=True,
            )
    summary = {}
    for way in ("refilled", "fixed", "repeated"):
        mine = [r for r in rows if r["way"] == way]
        summary[way] = crossover([r["batch"] for r in mine], [r["speedup"] for r in mine])
        print(
            f"{way}: SD stops paying at B = {summary[way]:.1f}"
            if summary[way]
            else f"{way}: SD pays at every B"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "crossover": summary, "pair": [draft.name, target.name]}, f, indent=1)


if __name__ == "__main__":
    main()
