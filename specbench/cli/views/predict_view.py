"""What `specbench predict` prints (its work: commands/predict.py): the predictions' table, its
inputs above it, and the run's own figure beside it."""

from __future__ import annotations

from rich.table import Table

from specbench.cli.asked.console import make_console
from specbench.results import predict as pr


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
