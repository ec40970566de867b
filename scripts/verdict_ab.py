"""A speculative round at T = 1 with the token verdict of commit 2967239 (the target's K+1 rows
all warped, the residual normalised and sampled through a padded copy) against today's
(sampling.TargetRows: only the rows tested), and at T = 0 for scale, alternated in one process
so that the host's drift hits all three alike:

    python scripts/verdict_ab.py                 # the bundled pair, K = 4, the default prompt
    python scripts/verdict_ab.py --repeats 12

The old verdict is read from git (`git show 2967239:specbench/model/sampling.py`), so this needs
the repository's history, or that file saved beforehand and named with --before (a GPU machine
gets the working tree without .git: scripts/gpu_session.sh's verdict stage). Everything else (the
drafter, the step, the timers) is today's in all three, so the difference between the first two
is the verdict alone. Prints the median round (timing.round_seconds: device loops of 5 rounds, 5
samples a repeat) and AR token of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from specbench import prompts
from specbench.cli.checks import load_pair
from specbench.measure import timing
from specbench.measure.prepared import Prepared, RunConfig
from specbench.model import decoding, draft_vocab, drafters, sampling, tokenizer
from specbench.model.sampling import Warp

BEFORE = "2967239"


def old_sampling(saved: str | None = None):
    """sampling.py as it was at BEFORE (from git, or the copy at `saved`), imported as a module of
    its own."""
    show = ["git", "show", f"{BEFORE}:specbench/model/sampling.py"]
    if saved:
        source = Path(saved).read_text()
    else:
        source = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "sampling_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sampling_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--before", help=f"sampling.py of {BEFORE}, saved (default: read from git)")
    args = ap.parse_args()
    before = old_sampling(args.before)
    draft, target = load_pair(None, None, "float32")
    prompt = tokenizer.encode(prompts.all_prompts()[prompts.DEFAULT_PROMPT_ID])
    vocab = draft_vocab.declared(draft.source)  # the bundled draft's 8,192 tokens, as --draft-vocab auto
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), vocab=vocab)
    rows, token_rule = decoding.TargetRows, decoding.VERDICTS["token"]
    variants = {"T = 0": 0.0, "T = 1, before": 1.0, "T = 1, now": 1.0}
    prepared = {}
    for i, (name, temperature) in enumerate(variants.items()):
        if name.endswith("before"):  # traced once with the old verdict on every row's probabilities
            decoding.TargetRows = lambda logits, warp: sampling.probs(logits, warp)
            decoding.VERDICTS["token"] = before.accept_reject
        # a distinct (unused) ngram keeps each variant's program apart in jit's cache
        own = dataclasses.replace(drafter, ngram=3 + i)
        config = RunConfig(draft, target, own, 4, Warp(temperature), n_tokens=40)
        prepared[name] = Prepared.make(config, [prompt])
        timing.round_seconds(prepared[name], repeats=1)
        timing.ar_token_seconds(prepared[name], repeats=1)
        decoding.TargetRows, decoding.VERDICTS["token"] = rows, token_rule
        print(f"{name}: tokens/round {prepared[name].generate('sd')[1].tokens_per_round:.2f}", flush=True)
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
