"""`specbench predict`'s work: the speedup and time per token at each K on a device not at hand,
from a saved run's acceptance (or one alpha) and that device's step times t(n) (results/predict.py).
No JAX: it reads files only. What it prints: views/predict_view.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.file_options import Predict
from specbench.draft_cost import DraftCost
from specbench.results import predict as pr

OLD_FREE = ("lookup", "dial")  # rows written before they recorded draft_cost: these drafted free


def read_json(path: str, flag: str):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(flag, f"cannot read {path} as JSON ({e.__class__.__name__}: {str(e)[:120]})") from None


def chosen_row(path: str, index: int) -> dict:
    """The specbench row `index` of a saved run or sweep (a list of rows, or one row)."""
    data = read_json(path, "--run")
    rows = [
        r
        for r in (data if isinstance(data, list) else [data])
        if isinstance(r, dict) and r.get("implementation", "specbench") == "specbench"
    ]
    if not rows:
        raise BadInput("--run", f"{path} holds no specbench row")
    if not 0 <= index < len(rows):
        raise BadInput("--row", f"{path} holds {len(rows)} specbench rows: use 0..{len(rows) - 1}")
    return rows[index]


def roofline_rows(path: str) -> list[dict]:
    """A roofline export's rows, or a report's (its report.json, or the folder that holds it)."""
    p = Path(path)
    p = p / "report.json" if p.is_dir() else p
    data = read_json(str(p), "--roofline")
    if isinstance(data, dict):  # a report's state: its roofline section, on the device of its rows
        data = data.get("sections", {}).get("roofline", {}).get("rows")
        beside = p.parent / "rows.json"
        device = (read_json(str(beside), "--roofline") or [{}])[0].get("device") if beside.is_file() else None
        data = [{"device": device, **r} for r in data] if isinstance(data, list) and device else data
    if not isinstance(data, list) or not data or not all(isinstance(r, dict) for r in data):
        raise BadInput(
            "--roofline", f"{path} holds no roofline rows (a roofline export or a report's report.json)"
        )
    return data


def cost_of(row: dict | None, o: Predict) -> DraftCost:
    """The drafter's cost shape (draft_cost.py): --draft-cost, else the run's row's, else (a row
    written before rows recorded it) free for lookup and the dial and sequential for the rest."""
    if o.draft_cost is not None:
        return o.draft_cost
    if row and row.get("draft_cost"):
        return DraftCost(row["draft_cost"])
    return DraftCost.FREE if (row or {}).get("drafter") in OLD_FREE else DraftCost.SEQUENTIAL


def rows_per_draft(row: dict | None) -> int:
    """Rows a one-pass drafter's step reads a draft (its row's draft_pass_rows over K; 1 without)."""
    if not row or not row.get("draft_pass_rows"):
        return 1
    return max(1, round(row["draft_pass_rows"] / row["K"]))


def curves(rows: list[dict], row: dict | None, o: Predict) -> tuple[pr.StepCurve, pr.StepCurve]:
    """(draft, target) t(n): from the roofline's times, or with --device from its bytes and FLOPs;
    the draft's carries the drafter's cost shape (a free drafter's is pr.FREE)."""
    target = o.target_model or (row or {}).get("target")
    cost = cost_of(row, o)
    draft = None if cost is DraftCost.FREE else o.draft_model or (row or {}).get("draft")
    if target is None:
        raise BadInput(
            "--target-model", "name the target's roofline model (--alpha gives no run to read it from)"
        )
    recorded = sorted({str(r.get("kernels")) for r in rows if r.get("kernels")})
    if o.kernels and o.kernels not in recorded:
        raise BadInput("--kernels", f"{o.kernels!r} is not in the roofline: use one of {', '.join(recorded)}")
    kernels = o.kernels or (row or {}).get("kernels")
    if kernels not in recorded:
        kernels = None  # the run's kernels are not in this export: any of its rows
    try:
        if o.device:
            gbps, gflops, fixed_us = o.device
            make = lambda m: pr.curve_from_device(rows, m, gbps, gflops, fixed_us * 1e-6)
        else:
            make = lambda m: pr.curve_from_roofline(rows, m, kernels)
        per_draft = rows_per_draft(row)
        return (
            dataclasses.replace(make(draft), cost=cost, rows_per_draft=per_draft) if draft else pr.FREE
        ), make(target)
    except ValueError as e:
        raise BadInput("--roofline", str(e)) from None


def predict(o: Predict):
    """(predictions, acceptance per position, draft curve, target curve, the run's row or None,
    the roofline's rows): what views/predict_view.show prints."""
    row = chosen_row(o.run_file, o.row_index) if o.run_file else None
    try:
        acceptance = pr.acceptance_of(row) if row else [o.alpha] * max(o.Ks)
    except ValueError as e:
        raise BadInput("--run", str(e)) from None
    rows = roofline_rows(o.roofline_file)
    draft, target = curves(rows, row, o)
    preds = pr.predictions(acceptance, draft, target, o.Ks, o.comm_s, o.overhead_s)
    return preds, acceptance, draft, target, row, rows
