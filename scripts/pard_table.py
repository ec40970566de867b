"""Drafters side by side, from sweeps (scripts/pard_suite.sh, scripts/drafters_2026_suite.sh): per
drafter, T and K, over the prompts, the acceptance per draft position (pooled over rounds),
tokens per round, the drafting a round costs (K t_draft: a chain's or a head's K steps, a PARD
draft's one pass) and the round, and the speedup measured (whole runs, geometric mean) and as the
round model predicts it from the parts (AR's token over a round's share of a token: the steady
state).

    python scripts/pard_table.py results/recorded/drafters/cpu-sweep-pard-*.json
"""

from __future__ import annotations

import json
import lzma
import math
import sys
from collections import defaultdict
from pathlib import Path


def rows_of(path: str) -> list[dict]:
    data = lzma.open(path).read() if path.endswith(".xz") else Path(path).read_bytes()
    return json.loads(data)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main(paths: list[str]) -> None:
    groups = defaultdict(list)
    for path in paths:
        for r in rows_of(path):
            groups[(r["drafter"], r["temperature"], r["K"])].append(r)
    print(
        "| drafter | T | K | acceptance by position | tokens/round | drafting/round | round | "
        "speedup | round model |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (drafter, T, K), rows in sorted(groups.items()):
        mean = lambda key: sum(r[key] for r in rows) / len(rows)
        accepted = [0.0] * K
        for i in range(K):
            tested = [
                r["per_position_acceptance"][i] for r in rows if r["per_position_acceptance"][i] is not None
            ]
            accepted[i] = sum(tested) / len(tested) if tested else float("nan")
        print(
            f"| {drafter} | {T:g} | {K} | {', '.join(f'{a:.2f}' for a in accepted)} | "
            f"{mean('tokens_per_round'):.2f} | {1e3 * K * mean('t_draft_s'):.2f} ms | "
            f"{1e3 * mean('t_round_s'):.2f} ms | {geomean([r['speedup'] for r in rows]):.2f}× | "
            f"{geomean([r['round_model_speedup'] for r in rows]):.2f}× |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
