"""`specbench predict`: the speedup and time per token at each K on a device not at hand, from a
saved run's acceptance and that device's step times t(n) (results/predict.py). No JAX: it reads
files only."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from specbench.cli.asked.console import BadInput, make_console
from specbench.cli.asked.params import K_MAX, Finite, ListParam
from specbench.results import predict as pr

FREE_DRAFTERS = ("lookup", "dial")  # they draft without a network: no draft step to time


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


def curves(
    rows: list[dict], row: dict, names: tuple, chosen_kernels: str | None, device_numbers: list | None
) -> tuple[pr.StepCurve, pr.StepCurve]:
    """(draft, target) t(n): from the roofline's times, or with --device (device_numbers) from its
    bytes and FLOPs. `names`: --target-model and --draft-model; chosen_kernels: --kernels."""
    target = names[0] or (row or {}).get("target")
    drafter = (row or {}).get("drafter")
    draft = names[1] or (None if drafter in FREE_DRAFTERS else (row or {}).get("draft"))
    if target is None:
        raise BadInput(
            "--target-model", "name the target's roofline model (--alpha gives no run to read it from)"
        )
    recorded = sorted({str(r.get("kernels")) for r in rows if r.get("kernels")})
    if chosen_kernels and chosen_kernels not in recorded:
        raise BadInput(
            "--kernels", f"{chosen_kernels!r} is not in the roofline: use one of {', '.join(recorded)}"
        )
    kernels = chosen_kernels or (row or {}).get("kernels")
    if kernels not in recorded:
        kernels = None  # the run's kernels are not in this export: any of its rows
    try:
        if device_numbers:
            gbps, gflops, fixed_us = device_numbers
            make = lambda m: pr.curve_from_device(rows, m, gbps, gflops, fixed_us * 1e-6)
        else:
            make = lambda m: pr.curve_from_roofline(rows, m, kernels)
        return (make(draft) if draft else pr.FREE), make(target)
    except ValueError as e:
        raise BadInput("--roofline", str(e)) from None


@click.command("predict")
@click.option(
    "--run", "run_file", default=None, help="A saved run or sweep (JSON): its acceptance per position."
)
@click.option(
    "--row", "row_index", type=click.IntRange(min=0), default=0, show_default=True, help="Which of its rows."
)
@click.option(
    "--alpha", type=Finite(0, 1), default=None, help="One acceptance at every position, instead of --run."
)
@click.option(
    "--roofline",
    "roofline_file",
    required=True,
    help="A roofline export, or a report (folder or report.json): t(n).",
)
@click.option("--target-model", default=None, help="The target's name in the roofline [default: the run's].")
@click.option("--draft-model", default=None, help="The draft's name in the roofline [default: the run's].")
@click.option(
    "--kernels", default=None, help="Which kernels' rows of the roofline [default: the run's, else any]."
)
@click.option(
    "--device",
    type=ListParam(float, item=Finite(min=0), distinct=False),
    default=None,
    help="GB/s,GFLOP/s,fixed µs: t(n) of a device modelled from the roofline's bytes and FLOPs.",
)
@click.option(
    "--comm-us", type=Finite(min=0), default=0.0, show_default=True, help="Communication per target step."
)
@click.option(
    "--overhead-us",
    type=Finite(min=0),
    default=0.0,
    show_default=True,
    help="Other work per round (accept/reject).",
)
@click.option(
    "--K", "-k", "Ks", type=ListParam(int, most=K_MAX), default="1-8", show_default=True, help="K to predict."
)
def predict(**f):
    """Speedup and time per token at each K on a device not at hand: a run's acceptance per draft
    position, with the step times t(n) of draft and target from a roofline export of that device
    (or its bandwidth, FLOP rate and fixed cost per step). Steady state: the prefill is left out.

    \b
      speedup(K) = E(K) t_T(1) / (K t_D(1) + t_T(K+1) + comm),  E(K) = 1 + sum_i prod_{j<=i} a_j
    """
    if (f["run_file"] is None) == (f["alpha"] is None):
        raise BadInput("--run/--alpha", "give exactly one of --run or --alpha")
    if f["device"] is not None and len(f["device"]) != 3:
        raise BadInput("--device", "give three numbers: GB/s,GFLOP/s,fixed µs (e.g. 3350,989000,20)")
    if f["device"] is not None and not (f["device"][0] > 0 and f["device"][1] > 0):
        raise BadInput("--device", "GB/s and GFLOP/s must be above 0 (e.g. 3350,989000,20)")
    row = chosen_row(f["run_file"], f["row_index"]) if f["run_file"] else None
    try:
        acceptance = pr.acceptance_of(row) if row else [f["alpha"]] * max(f["Ks"])
    except ValueError as e:
        raise BadInput("--run", str(e)) from None
    rows = roofline_rows(f["roofline_file"])
    names = (f["target_model"], f["draft_model"])
    draft, target = curves(rows, row, names, f["kernels"], f["device"])
    preds = pr.predictions(acceptance, draft, target, f["Ks"], f["comm_us"] * 1e-6, f["overhead_us"] * 1e-6)
    show(preds, acceptance, draft, target, row, rows, f["comm_us"])


def show(preds, acceptance, draft, target, row, rows, comm_us: float) -> None:
    """The predictions' table, its inputs above it, and the run's own figure beside it."""
    console = make_console()
    where = sorted({r.get("device", "?") for r in rows})
    source = (
        f"{len(acceptance)} positions of the run" if row else f"alpha {acceptance[0]:g} at every position"
    )
    listed = f" ({', '.join(f'{a:.3f}' for a in acceptance)})" if row else ""
    console.print(
        f"acceptance: {source}{listed} · t(n) from {', '.join(where)} · target {target.name}"
        f" t(1) {target.at(1) * 1e3:.3f} ms · draft "
        + ("free" if draft is pr.FREE else f"{draft.name} t(1) {draft.at(1) * 1e3:.3f} ms")
        + (f" · communication {comm_us:g} µs a target step" if comm_us else "")
    )
    table = Table(title="predicted, steady state (no prefill)")
    for col in ("K", "tokens/round", "t_round", "per token", "speedup", ""):
        table.add_column(col, justify="right")
    top = pr.best(preds)
    for p in preds:
        mark = ("◀ best" if p is top else "") + (" (extrapolated)" if p.extrapolated else "")
        cells = (
            str(p.K),
            f"{p.tokens_per_round:.2f}",
            f"{p.t_round_s * 1e3:.3f} ms",
            f"{p.t_per_token_s * 1e3:.3f} ms",
        )
        table.add_row(*cells, f"{p.speedup:.2f}", mark, style="bold" if p is top else None)
    console.print(table)
    if row and row.get("speedup") is not None:
        same = [p for p in preds if p.K == row["K"]]
        line = f"the run measured {row['speedup']:.2f}× at K = {row['K']} on {row.get('device', '?')}"
        if same and row.get("device") in where:
            line += f"; predicted ÷ measured {same[0].speedup / row['speedup']:.2f}"
        console.print(line)
