"""What `sweep` prints: its rows as one table, and the readings under it (the best K, the batch
crossover)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from specbench.cli.views.words import plural
from specbench.results import schema as results
from specbench.results import theory


def sweep_table(rows: list[dict], output: str, repeats: int, console: Console) -> None:
    """The sweep's rows; like llama-bench, settings that do not vary are left out (they are in the file)."""
    settings = [f.name for f in results.FIELDS if f.table and f.key]
    shown = [c for c in results.TABLE_COLUMNS if c not in settings or len({str(r.get(c)) for r in rows}) > 1]
    if not any(r.get("batch", 1) > 1 for r in rows):  # the batch columns say nothing at batch 1
        shown = [
            c
            for c in shown
            if c not in ("tokens_per_batch_round", "idle_fraction", "t_target_s", "t_verify_s")
        ]
    if repeats == 1:
        shown.remove("speedup_std")
    table = Table(
        title=f"{plural(len(rows), 'row')} · {output}" + (" · one repeat: no spread" if repeats == 1 else "")
    )
    for c in shown:
        table.add_column(
            results.BY_NAME[c].header,
            justify="left" if c in ("prompt_id", "draft", "implementation") else "right",
        )
    for r in rows:
        table.add_row(*[results.cell(c, r.get(c)) for c in shown])
    console.print(table)


def best_K_lines(rows: list[dict]) -> list[str]:
    """For each group of rows that differ only in K: the K that measured fastest, and the K each
    row's parts predict best (theory.best_K), one line per group (per batch size with --batch)."""
    series = results.varying(rows, exclude=("K",))
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(n) for n in series), []).append(r)
    lines = []
    for values, group in groups.items():
        if len({r["K"] for r in group}) < 2:
            continue
        measured = max(group, key=lambda r: r["speedup"])
        predicted = sorted({r.get("best_K_predicted") for r in group if r.get("best_K_predicted")})
        label = " · ".join(f"{n} {v}" for n, v in zip(series, values))
        lines.append(
            f"{label + ': ' if label else ''}best K measured {measured['K']} "
            f"(speedup {measured['speedup']:.2f}); predicted from each row's parts: "
            f"{', '.join(map(str, predicted)) or '—'}"
        )
    return lines


def crossover_lines(rows: list[dict]) -> list[str]:
    """Where speedup against batch size crosses 1, measured and by the refined theory, per curve."""
    lines = []
    for (draft, k, temp, top_p, mix), curve in theory.batch_curves(rows).items():
        Bs = curve["batch"]
        if len(Bs) < 2:
            continue
        label = f"{draft} K={k} T={temp:g}" + (f" top-p={top_p:g}" if top_p else "") + theory.MIX_LABEL[mix]

        def where(values):
            b = theory.crossover(Bs, values)
            if b is not None:
                return f"crosses 1 at B ≈ {b:.1f}"
            return f"stays above 1 up to B={Bs[-1]}" if values[-1] >= 1 else f"is below 1 from B={Bs[0]} on"

        lines.append(
            f"{label}: the measured speedup {where(curve['speedup'])}; the refined theory from the step "
            f"times at each batch size {where(curve['refined_speedup'])}"
        )
    return lines
