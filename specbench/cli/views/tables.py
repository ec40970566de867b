"""The small outputs: theory, models, prompts and roofline tables, and a dry run's plan."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from specbench import prompts
from specbench.cli.views.render import plural
from specbench.results import theory


def theory_report(rows: list[tuple], c: float, r, alpha, t_verify, K_search: int, console: Console) -> None:
    """rows of (K, tokens/round, r, alpha, speedup, refined): one K as lines, several as a table."""
    if len(rows) == 1:
        k, tpr, rr, a, s, refined = rows[0]
        console.print(f"K={k}  c={c:.4f}  tokens/round={tpr:.3f}  r={rr:.3f}  alpha={a:.3f}")
        console.print(
            f"speedup = [bold]{s:.2f}[/bold]"
            + (f"  (refined with t_verify: {refined:.2f})" if refined else "")
        )
        if alpha is not None:
            best = theory.optimal_K(alpha, c, K_search)
            gain = theory.speedup_from_alpha(alpha, best, c)
            if best == K_search:  # still rising at the end of the search: no finite optimum to report
                console.print(
                    f"no optimal K for alpha={alpha:g}, c={c:.4f}: the speedup still grows at K={K_search} "
                    f"({gain:.2f}), the end of the search"
                    + (" and, at alpha = 1, for ever, toward 1/c" if alpha == 1 else "")
                )
            else:
                console.print(f"optimal K for alpha={alpha:g}, c={c:.4f}: {best} (speedup {gain:.2f})")
        return
    best = max(rows, key=lambda row: row[4])[0]
    rising = best == max(row[0] for row in rows)
    table = Table(
        title=f"c = t_draft/t_target = {c:.4f}"
        + (f", r = {r:g}" if r is not None else f", alpha = {alpha:g}")
    )
    for col in ("K", "tokens/round", "r", "alpha", "speedup") + (("refined",) if t_verify else ()) + ("",):
        table.add_column(col, justify="right")
    for k, tpr, rr, a, s, refined in rows:
        cells = [str(k), f"{tpr:.3f}", f"{rr:.3f}", f"{a:.3f}", f"{s:.2f}"] + (
            [f"{refined:.2f}"] if t_verify else []
        )
        mark = ("◀ best so far" if rising else "◀ best") if k == best else ""
        table.add_row(*cells, mark, style="bold" if k == best else None)
    console.print(table)
    if rising:
        console.print(f"the speedup still grows at K={best}, the largest K asked for: try larger K")


def models_table(rows: list[dict], weights_dir, console: Console) -> None:
    table = Table(title=f"models · weights in {weights_dir}")
    for col in ("name", "aliases", "architecture", "layers x width", "parameters", "kind", "here"):
        table.add_column(col)
    for row in rows:
        table.add_row(
            row["name"],
            row["aliases"],
            row["architecture"],
            row["layers_x_width"],
            f"{row['n_params'] / 1e6:.1f}M" if row["n_params"] is not None else "",
            row["kind"],
            "[green]yes[/green]" if row["present"] else "no",
        )
    console.print(table)
    for row in rows:
        if row.get("problem"):
            console.print(f"[yellow]{row['name']} cannot be used: {row['problem']}[/yellow]")


SHOWN_CHARS = 600  # a prompt's characters shown by `specbench prompts`; a longer one is cut, its length said


def prompts_table(console: Console, suite: prompts.Suite = prompts.BUILTIN) -> None:
    """A suite's prompts: id, category and text (and a file's line numbers)."""
    table = Table(title=None if suite is prompts.BUILTIN else f"{suite.source}: {len(suite.prompts)} prompts")
    lines = suite is not prompts.BUILTIN
    for col in ("line",) * lines + ("id", "category", "prompt"):
        table.add_column(col)
    for p in suite.prompts:
        text = (
            p.text if len(p.text) <= SHOWN_CHARS else f"{p.text[:SHOWN_CHARS]}… ({len(p.text):,} characters)"
        )
        table.add_row(*(str(p.line),) * lines, p.id, p.category, text)
    console.print(table)


def roofline_table(rows: list[dict], context: int, console: Console) -> None:
    """The roofline rows, one per model, kernels and step size: time against both roofs."""
    from specbench.results.schema import PARTS_TABLE, ROOFLINE_BY_NAME, ROOFLINE_TABLE, cell, filled

    random_note = (
        " · random weights: timing only" if any(r["weights"].startswith("random") for r in rows) else ""
    )
    first = rows[0]
    peak = f"datasheet peak {first['peak_gbps']:.0f} GB/s · " if first["peak_gbps"] else ""
    memory = f"memory roof at {first['bound_gbps']:.1f} GB/s ({first['bound_source']})"
    kernel = first.get("read_gbps_kernel")
    readers = f"XLA's sum {first.get('read_gbps_xla', first['measured_gbps']):.1f}" + (
        f", the CPU kernel's reader {kernel:.1f}" if kernel else ""
    )
    measured = f"measured read {first['measured_gbps']:.1f} GB/s (the faster over 512 MB: {readers})"
    compute = f"compute roof at {first['matmul_gflops']:.0f} GFLOP/s (XLA product of two 2048² matrices)"
    table = Table(
        title=f"decode-step roofline · {first['device']} · cache {context} · {peak}{measured} · "
        f"{memory} · {compute}{random_note}",
        caption="limit = max(memory roof, compute roof); +MB: what the kernels' weight layout "
        "costs beyond the weights (xla: a copy of every block matrix; cpu: a packed copy of every block "
        "matrix and of the output head); comm, on a mesh: the step's collectives timed alone, of t_step",
    )
    steps = [r for r in rows if r.get("part", "step") == "step"]
    columns = filled(ROOFLINE_TABLE, steps)
    for f in columns:
        table.add_column(f.header, justify="left" if f.kind is str else "right")
    for r in steps:
        table.add_row(*[cell(f.name, r.get(f.name), ROOFLINE_BY_NAME) for f in columns])
    console.print(table)
    if parts := [r for r in rows if r.get("part", "step") != "step"]:
        table = Table(
            title="the fused Pallas kernels of the first layer, each alone (a step padded to 16 rows)",
            caption="bytes: the kernel's weights, rows in and out, and for attention the cache before pos",
        )
        for f in PARTS_TABLE:
            table.add_column(f.header or f.name, justify="left" if f.kind is str else "right")
        for r in parts:
            table.add_row(*[cell(f.name, r.get(f.name), ROOFLINE_BY_NAME) for f in PARTS_TABLE])
        console.print(table)


def dry_run(console: Console, jobs: list, n_programs: int, seconds: float, writes) -> None:
    """What a command would do: its configurations, programs to compile, a rough time, its file."""
    from specbench.cli.views.progress import fmt_duration

    sets = plural(n_programs, "program set")
    console.print(
        f"dry run: {plural(len(jobs), 'configuration')} to measure; {sets} to compile (AR, SD and the "
        f"step timers); roughly {fmt_duration(seconds)} (compile and memory-bound steps, a guess)"
    )
    for job in jobs[:20]:
        c, w = job.config, job.config.warp
        sampling = (f" top-k={w.top_k}" if w.top_k else "") + (f" top-p={w.top_p:g}" if w.top_p else "")
        verify = "" if c.drafter.verify == "token" else f" verify={c.drafter.verify}"
        console.print(
            f"  {job.draft_name}{verify} K={c.K} T={w.temperature:g}{sampling} {job.prompt_id} "
            f"batch {len(job.ids)} N={c.n_tokens} repeats {c.repeats}"
        )
    if len(jobs) > 20:
        console.print(f"  ... and {len(jobs) - 20} more")
    console.print(f"nothing was compiled or written; the command writes {writes or 'no results file'}")
