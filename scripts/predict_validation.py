"""predict's validation table (docs/predict.md): for recorded runs, the speedup predicted from their
acceptance per position and a roofline's t(n) (results/predict.py), against what they measured.

    python scripts/predict_validation.py

Each case names the rows and the roofline. "wall" is the run's measured speedup (its wall times,
prefill included); "steady" its round model (tokens per round x its own AR token / its own round,
from its loop timers): what predict estimates, with the prefill left out. Where a roofline of
another device feeds the prediction, the case says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.results import predict as pr

RECORDED = Path(__file__).resolve().parent.parent / "results" / "recorded"
FREE_DRAFTERS = ("lookup", "dial")


def load(path: Path) -> list[dict]:
    rows = json.loads(path.read_text())
    return [
        r
        for r in (rows if isinstance(rows, list) else [rows])
        if r.get("implementation", "specbench") == "specbench"
    ]


def report_roofline(folder: Path) -> list[dict]:
    return json.loads((folder / "report.json").read_text())["sections"]["roofline"]["rows"]


def one(row: dict, roof: list[dict], kernels: str | None = None) -> dict | None:
    """The prediction of one row from `roof`, or None where the row is not a chain at batch 1."""
    if row.get("batch", 1) != 1 or row.get("tree_nodes") or row.get("drafts", 1) != 1 or row.get("queue"):
        return None
    if row.get("verify", "token") != "token" or row.get("dynamic_K"):
        return None
    kernels = kernels or row.get("kernels")
    if not any(r.get("kernels") == kernels for r in roof):
        kernels = None
    drafter = row.get("drafter")
    free = drafter in FREE_DRAFTERS
    if drafter not in ("model", *FREE_DRAFTERS):  # layer-skip and EAGLE draft with no model of the roofline
        return None
    draft = pr.FREE if free else pr.curve_from_roofline(roof, row["draft"], kernels)
    target = pr.curve_from_roofline(roof, row["target"], kernels)
    p = pr.predict(pr.acceptance_of(row), draft, target, row["K"])
    with_overhead = pr.predict(pr.acceptance_of(row), draft, target, row["K"], overhead_s=row["t_overhead_s"])
    return {
        "with_overhead": with_overhead.speedup,
        "K": row["K"],
        "drafter": drafter + (f" a={row['acceptance']:g}" if row.get("acceptance") is not None else ""),
        "T": row["temperature"],
        "predicted": p.speedup,
        "wall": row["speedup"],
        "steady": row.get("round_model_speedup"),
        "extrapolated": p.extrapolated,
    }


def cases():
    h100 = RECORDED / "gpu-h100"
    for name, folder in (
        ("H100, random 1558M / 124M, bf16 (quick report)", h100 / "report-random-1558M-124M-bf16-quick"),
        ("H100, bundled pair, float32 (quick report)", h100 / "report-bundled-quick"),
        ("this CPU, bundled pair (quick report)", RECORDED / "report-bundled-cpu-quick-suite"),
    ):
        yield name, load(folder / "rows.json"), report_roofline(folder), None
    roof = json.loads((RECORDED / "cpu-roofline-bundled-kernels.json").read_text())
    for kernels in ("cpu", "xla"):
        rows = load(RECORDED / f"cpu-run-bundled-T0-{kernels}-1.json")
        yield f"this CPU, bundled pair, the {kernels} kernels' run and roofline", rows, roof, None
    # a device not at hand: the CPU kernel run's acceptance, the XLA products' t(n), against the XLA run
    accept_from = load(RECORDED / "cpu-run-bundled-T0-cpu-1.json")[0]
    xla_run = load(RECORDED / "cpu-run-bundled-T0-xla-1.json")[0]
    crossed = dict(xla_run, per_position_acceptance=accept_from["per_position_acceptance"])
    yield "this CPU: the kernel run's acceptance, XLA's t(n), against the XLA run", [crossed], roof, "xla"
    # a split target: each run on 4 host devices from the roofline of its own split (results/recorded/mesh)
    mesh = RECORDED / "mesh"
    for split, name in (("one-device", "one device"), ("tp2", "tp=2"), ("tp4", "tp=4")):
        rows = load(mesh / f"cpu-dial-124M-a0.8-{split}.json")
        roof = json.loads((mesh / f"cpu-roofline-124M-{split}.json").read_text())
        roof = [dict(r, model=rows[0]["target"]) for r in roof]  # `roofline -m gpt2` names it 124M
        yield f"this CPU, 4 host devices: random 124M on {name}", rows, roof, "xla"


def main() -> None:
    head = "| case | drafter | K | T | predicted | wall | predicted ÷ wall | steady | predicted ÷ steady |"
    print(head + " with the run's round overhead ÷ steady |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rows, roof, kernels in cases():
        seen = set()
        for row in rows:
            p = one(row, roof, kernels)
            if p is None or (p["drafter"], p["K"], p["T"]) in seen:
                continue
            seen.add((p["drafter"], p["K"], p["T"]))
            steady = p["steady"]
            cells = [
                name,
                p["drafter"],
                str(p["K"]) + (" (extrapolated)" if p["extrapolated"] else ""),
                f"{p['T']:g}",
                f"{p['predicted']:.2f}",
                f"{p['wall']:.2f}",
                f"{p['predicted'] / p['wall']:.2f}",
                f"{steady:.2f}" if steady else "",
                f"{p['predicted'] / steady:.2f}" if steady else "",
                f"{p['with_overhead'] / steady:.2f}" if steady else "",
            ]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
