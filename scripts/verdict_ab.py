"""A speculative round at T = 1 with each verdict kind (verify.KINDS: `lazy`, the rows read up to
the first rejection and the CDF; `all-rows`, one fixed-shape computation with an exponential
race), and at T = 0 for scale, alternated in one process so that the host's drift hits all three
alike:

    python scripts/verdict_ab.py                 # the bundled pair, K = 4, the default prompt
    python scripts/verdict_ab.py --repeats 12

The kind is set through SPECBENCH_VERDICT while each variant is traced; everything else (the
drafter, the step, the timers) is the same, so the difference between the T = 1 rows is the
verdict alone. Prints the median round (timing.round_seconds: device loops of 5 rounds, 5
samples a repeat) and AR token of each: which kind verify.kind_for should give this device.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

from specbench import prompts
from specbench.cli.commands.loading import load_pair
from specbench.measure import timing
from specbench.measure.prepared import Prepared, RunConfig
from specbench.model.checkpoints import draft_vocab, tokenizer
from specbench.model.decode import drafters
from specbench.model.decode.sampling import Warp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()
    draft, target = load_pair(None, None, "float32")
    prompt = tokenizer.encode(prompts.all_prompts()[prompts.DEFAULT_PROMPT_ID])
    vocab = draft_vocab.declared(draft.source)  # the bundled draft's 8,192 tokens, as --draft-vocab auto
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), vocab=vocab)
    variants = {"T = 0": (0.0, "lazy"), "T = 1, lazy": (1.0, "lazy"), "T = 1, all-rows": (1.0, "all-rows")}
    prepared = {}
    for i, (name, (temperature, kind)) in enumerate(variants.items()):
        os.environ["SPECBENCH_VERDICT"] = kind  # read while the variant's programs are traced
        # a distinct (unused) ngram keeps each variant's programs apart in jit's cache
        own = dataclasses.replace(drafter, ngram=3 + i)
        config = RunConfig(draft, target, own, 4, Warp(temperature), n_tokens=40)
        prepared[name] = Prepared.make(config, [prompt])
        timing.round_seconds(prepared[name], repeats=1)
        timing.ar_token_seconds(prepared[name], repeats=1)
        print(f"{name}: tokens/round {prepared[name].generate('sd')[1].tokens_per_round:.2f}", flush=True)
    os.environ.pop("SPECBENCH_VERDICT")
    rounds = {name: [] for name in variants}
    tokens = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, prep in prepared.items():
            rounds[name].append(np.median(timing.round_seconds(prep, repeats=5, warm=False)))
            tokens[name].append(np.median(timing.ar_token_seconds(prep, repeats=3, warm=False)))
    for name in variants:
        r, a = np.median(rounds[name]) * 1e3, np.median(tokens[name]) * 1e3
        print(f"{name}: round {r:.3f} ms, AR token {a:.3f} ms, round / AR token {r / a:.3f}")


if __name__ == "__main__":
    sys.exit(main())
