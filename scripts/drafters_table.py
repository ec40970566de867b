"""The drafters table of docs/drafters.md from sweep files (scripts/drafters_suite.sh): for each
drafter, shape and temperature, the means over the prompts of tokens per round, α and speedup,
with the verify rows and the median draft and verify step times.

    python scripts/drafters_table.py results/recorded/drafters/cpu-sweep-drafters-*.json.xz
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

from specbench.results import export


def shape(row: dict) -> str:
    """'chain K=4', 'tree 2,2,1,1' or 'tree dynamic:4,3,14', from the row's draft name."""
    return "tree " + row["draft"].split(" tree ", 1)[1] if row.get("tree_nodes") else f"chain K={row['K']}"


def main(paths: list[str]) -> None:
    groups = defaultdict(list)
    for path in paths:
        for row in export.read_json(path):
            if row.get("implementation", "specbench") == "specbench":
                groups[(row["drafter"], shape(row), row["temperature"])].append(row)
    columns = ["drafter", "shape", "T", "prompts", "verify rows", "tokens/round", "α", "speedup (range)"]
    print("| " + " | ".join(columns + ["t_draft", "t_verify"]) + " |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (drafter, form, T), rows in sorted(groups.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        mean = lambda k: float(np.mean([r[k] for r in rows]))
        median_ms = lambda k: float(np.median([r[k] for r in rows])) * 1e3
        speedups = [r["speedup"] for r in rows]
        verify_rows = rows[0].get("tree_nodes") or rows[0]["K"] + 1
        print(
            f"| {drafter} | {form} | {T:g} | {len(rows)} | {verify_rows} | {mean('tokens_per_round'):.2f} | "
            f"{mean('alpha'):.3f} | {np.mean(speedups):.2f} ({min(speedups):.2f}–{max(speedups):.2f}) | "
            f"{median_ms('t_draft_s'):.2f} ms | {median_ms('t_verify_s'):.2f} ms |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
