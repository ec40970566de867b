"""Tokens per round of token trees against chains, at T = 1, over the built-in prompts, with the
bundled pair, its draft drafting over its 8,192-token head (as `specbench run` does by default)
and over its full head:

    python scripts/tree_rounds.py                  # 3 seeds a prompt, N = 40

Each configuration decodes every prompt with the same seeds; no timing (tokens per round and α
only: what a tree buys per verify step, before what its larger steps cost).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from specbench import prompts
from specbench.cli.commands.loading import load_pair
from specbench.model import generate
from specbench.model.checkpoints import draft_vocab, tokenizer
from specbench.model.decode import drafters
from specbench.model.decode.sampling import Warp
from specbench.model.decode.tree import Tree

SHAPES = {"chain K=3": Tree.chain(3), "chain K=4": Tree.chain(4)}
SHAPES |= {
    f"tree {','.join(map(str, w))}": Tree.branching(w)
    for w in [(2, 1, 1), (2, 2, 1), (3, 2, 1), (2, 1, 1, 1), (3, 1, 1, 1)]
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("-t", type=float, default=1.0)
    args = ap.parse_args()
    draft, target = load_pair(None, None, "float32")
    encoded = [tokenizer.encode(text) for text in prompts.all_prompts().values()]
    for vocab in (draft_vocab.declared(draft.source), None):
        base = dataclasses.replace(drafters.model_drafter(draft.config), vocab=vocab)
        head = f"the draft's {vocab:,}-token head" if vocab else "the draft's full head"
        print(f"T = {args.t:g}, {len(encoded)} prompts x {args.seeds} seeds, N = {args.n}, {head}")
        measure(draft, target, base, encoded, args)


def measure(draft, target, base, encoded, args):
    """One line per shape in SHAPES: its verify rows, mean tokens per round (± its standard
    error) and α per depth over every prompt and seed."""
    for name, tree in SHAPES.items():
        K = tree.depth
        drafter = base if name.startswith("chain") else dataclasses.replace(base, tree=tree)
        per_round, alphas = [], []
        for ids in encoded:
            for seed in range(args.seeds):
                _, st = generate.speculative(
                    draft, target, ids, args.n, K, Warp(args.t), seed, drafter=drafter
                )
                per_round.append(st.tokens_per_round)
                alphas.append(st.alpha)
        rows = tree.size  # the verify step's rows: K + 1 for a chain
        print(
            f"{name:16s} verify rows {rows:2d}  tokens/round {np.mean(per_round):.3f} ± "
            f"{np.std(per_round) / np.sqrt(len(per_round)):.3f}  α (per depth) {np.mean(alphas):.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
