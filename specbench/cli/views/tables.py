"""The small outputs: theory, models, prompts and roofline tables, and a dry run's plan."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from specbench import prompts
from specbench.cli.views.words import plural
from specbench.draft_cost import DraftCost, flat
from specbench.results import theory


def optimal_K(o, cost: DraftCost, K_search: int) -> tuple[int, float]:
    """(the K in 1..K_search with the most tokens per unit of time, its speedup) at o.alpha, a
    round's drafting by `cost` and its verify by o.verify_of (theory.best_K)."""
    drafting = lambda k: cost.seconds(k, flat(o.t_draft))
    best = theory.best_K(o.alpha, drafting, o.verify_of, K_search)
    return best, theory.expected_tokens(o.alpha, best) * o.t_target / (drafting(best) + o.verify_of(best))


def optimal_K_lines(o, K_search: int) -> list[str]:
    """The optimal K at alpha for the drafter's cost shape, and a chain's beside a one-pass or free
    drafter's: what drafting K tokens in one pass changes."""
    c, verify = o.t_draft / o.t_target, "t_verify linear in K" if o.t_verify else "t_verify = t_target"
    lines = []
    for cost in dict.fromkeys((o.cost, DraftCost.SEQUENTIAL)):
        best, gain = optimal_K(o, cost, K_search)
        what = f"alpha={o.alpha:g}, c={c:.4f}" + (
            "" if cost is DraftCost.SEQUENTIAL else f", {cost.value} drafting"
        )
        if best == K_search:  # still rising at the end of the search: no finite optimum to report
            why = (
                ""
                if o.t_verify or cost is DraftCost.SEQUENTIAL
                else " (give --t-verify: a verify cost that grows with K bounds it)"
            )
            lines.append(
                f"no optimal K for {what}: the speedup still grows at K={K_search} ({gain:.2f}), the end of "
                f"the search{why}"
                + (
                    " and, at alpha = 1, for ever, toward 1/c"
                    if o.alpha == 1 and cost is DraftCost.SEQUENTIAL
                    else ""
                )
            )
        else:
            lines.append(f"optimal K for {what} ({verify}): {best} (speedup {gain:.2f})")
    return lines


def theory_report(rows: list[tuple], o, K_search: int, console: Console) -> None:
    """rows of (K, tokens/round, r, alpha, speedup, refined) for the theory command's options o
    (step_options.Theory): one K as lines, with the optimal K at alpha; several as a table."""
    c, alpha = o.t_draft / o.t_target, o.alpha
    shape = "" if o.cost is DraftCost.SEQUENTIAL else f"  drafting={o.cost.value}"
    if len(rows) == 1:
        k, tpr, rr, a, s, refined = rows[0]
        console.print(f"K={k}  c={c:.4f}  tokens/round={tpr:.3f}  r={rr:.3f}  alpha={a:.3f}{shape}")
        console.print(
            f"speedup = [bold]{s:.2f}[/bold]"
            + (f"  (refined with t_verify: {refined:.2f})" if refined else "")
        )
        if alpha is not None:
            for line in optimal_K_lines(o, K_search):
                console.print(line)
        return
    best = max(rows, key=lambda row: row[4])[0]
    rising = best == max(row[0] for row in rows)
    table = Table(
        title=f"c = t_draft/t_target = {c:.4f}"
        + (f", r = {o.r:g}" if o.r is not None else f", alpha = {alpha:g}")
        + (f", drafting {o.cost.value}" if shape else "")
    )
    for col in ("K", "tokens/round", "r", "alpha", "speedup") + (("refined",) if o.t_verify else ()) + ("",):
        table.add_column(col, justify="right")
    for k, tpr, rr, a, s, refined in rows:
        cells = [str(k), f"{tpr:.3f}", f"{rr:.3f}", f"{a:.3f}", f"{s:.2f}"] + (
            [f"{refined:.2f}"] if o.t_verify else []
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


def served(c, n_requests: int) -> str:
    """How a job's requests are served: a batch of them, or a queue refilled on slots, at a rate."""
    if not c.slots:
        return f"batch {n_requests}"
    from specbench.cli.asked.checks import arrivals_span, fmt_seconds

    span = c.request_rate and arrivals_span(c.request_rate, n_requests)
    rate = f" arriving at {c.request_rate:g}/s (over about {fmt_seconds(span)})" if c.request_rate else ""
    return f"batch {c.slots} refilled from a queue of {n_requests}{rate}"


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
            f"{served(c, len(job.ids))} N={c.n_tokens} repeats {c.repeats}"
        )
    if len(jobs) > 20:
        console.print(f"  ... and {len(jobs) - 20} more")
    console.print(f"nothing was compiled or written; the command writes {writes or 'no results file'}")
