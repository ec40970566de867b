"""What `run` and `sweep` print of the peers run beside specbench (`--peer`): each one's times and
speedup against specbench's own, and whether their tokens equal specbench's at T = 0."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from specbench.cli.views.render import fmt_speedup, fmt_time


def peers_report(rows: list[dict], console: Console) -> None:
    """Peers beside specbench (run: one table; sweep: the identity lines only, the sweep table
    has the times): per method, time, tokens/s and the time over specbench's own; then, at T = 0,
    whether every implementation gave specbench's tokens, and where one did not."""
    if len(rows) == len({r.get("implementation") for r in rows}):  # one cell: `run`
        table = Table(
            title="implementations, alternated in one run · time over specbench's on the same method"
        )
        for col in (
            "implementation",
            "AR time",
            "AR tok/s",
            "AR ×",
            "SD time",
            "SD tok/s",
            "SD ×",
            "speedup",
        ):
            table.add_column(col, justify="left" if col == "implementation" else "right")
        for r in rows:
            ratio = lambda m: (
                "1.00" if r["implementation"] == "specbench" else f"{r[m + '_over_specbench']:.2f}"
            )
            table.add_row(
                f"{r['implementation']} {r.get('implementation_version') or ''}",
                fmt_time(r["ar_mean_s"]),
                f"{r['ar_tokens_per_s']:.1f}",
                ratio("ar"),
                fmt_time(r["sd_mean_s"]),
                f"{r['sd_tokens_per_s']:.1f}",
                ratio("sd"),
                fmt_speedup(r),
            )
        console.print(table)
    for line in identity_lines(rows):
        console.print(line)


def identity_lines(rows: list[dict]) -> list[str]:
    """T = 0: per peer, in how many of its rows AR and SD gave specbench's tokens, and each
    first difference (with the target's logits of the two candidates: a near tie or a bug)."""
    lines = []
    peers = [r for r in rows if r.get("implementation", "specbench") != "specbench" and r["temperature"] == 0]
    for name in dict.fromkeys(r["implementation"] for r in peers):
        mine = [r for r in peers if r["implementation"] == name]
        same = sum(bool(r["same_as_specbench"]) for r in mine)
        verdict_ = "[green]the same tokens[/green]" if same == len(mine) else "[red]DIFFERENT tokens[/red]"
        where = "" if len(mine) == 1 else f" in {same} of {len(mine)} rows"
        lines.append(f"T=0: {name} AR and SD gave {verdict_} as specbench{where}")
        lines += [f"  {r['first_difference']}" for r in mine if r.get("first_difference")]
    return lines
