"""`predict` for the one-pass drafter against its runs' steady state (docs/drafters.md): for each
PARD row of a sweep (scripts/drafters_2026_suite.sh), the speedup results/predict.py gives from
the row's acceptance per position and a roofline's t(n) of the PARD draft (its pass of 2K rows)
and of the target, beside the row's round model (tokens per round x its own AR token / its own
round: the steady state predict estimates), then their ratio pooled over the prompts by K and T.

    python scripts/pard_predict.py SWEEP.json ROOFLINE.json [ROOFLINE.json ...]
"""

from __future__ import annotations

import json
import lzma
import math
import sys
from collections import defaultdict
from pathlib import Path

from specbench.draft_cost import DraftCost
from specbench.results import predict as pr


def rows_of(path: str) -> list[dict]:
    data = lzma.open(path).read() if path.endswith(".xz") else Path(path).read_bytes()
    return json.loads(data)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main(sweep: str, roofs: list[str]) -> None:
    roof = [r for path in roofs for r in rows_of(path)]
    groups = defaultdict(list)
    for row in rows_of(sweep):
        if row.get("drafter") != "pard" or row.get("implementation", "specbench") != "specbench":
            continue
        per_draft = max(1, round(row["draft_pass_rows"] / row["K"]))
        draft = pr.curve_from_roofline(roof, row["draft"], row.get("kernels"))
        draft = pr.StepCurve(draft.name, draft.times, DraftCost.ONE_PASS, per_draft)
        target = pr.curve_from_roofline(roof, row["target"], row.get("kernels"))
        p = pr.predict(pr.acceptance_of(row), draft, target, row["K"])
        groups[(row["temperature"], row["K"])].append((p.speedup, row["round_model_speedup"], row["speedup"]))
    print("| T | K | rows | predicted | steady state (round model) | predicted ÷ steady | measured (wall) |")
    print("|---|---|---|---|---|---|---|")
    for (T, K), got in sorted(groups.items()):
        predicted, steady, wall = (geomean([g[i] for g in got]) for i in range(3))
        print(
            f"| {T:g} | {K} | {len(got)} | {predicted:.2f}× | {steady:.2f}× | {predicted / steady:.3f} | "
            f"{wall:.2f}× |"
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
