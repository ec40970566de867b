"""What `run` prints, and the formatting every command's output shares: rich tables and lines,
from rows and statistics. Nothing here measures or decides; the commands in main.py call one
function each (sweep's output: sweep_view.py; trace's: trace_view.py; the peers': peers_view.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specbench.cli.views import serving_view
from specbench.cli.views.words import plural
from specbench.measure import card
from specbench.results import repetition


def weights_text(row: dict) -> str:
    """The header's word for the weights: --dtype's, or each model's where they differ (the target's
    and the draft's formats, --target-dtype and --draft-dtype)."""
    formats = {row.get("target_weights"), row.get("draft_weights")} - {None}
    if len(formats) < 2:
        return row["dtype"]
    return f"target {row['target_weights']}, draft {row['draft_weights']}"


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def fmt_range(lo: float, hi: float) -> str:
    return f"{lo * 1e3:.1f} … {hi * 1e3:.1f} ms" if hi < 1 else f"{lo:.3f} … {hi:.3f} s"


def fmt_speedup(row: dict) -> str:
    """mean ± σ of the per-repeat ratios; one repeat has no spread, so none is printed."""
    return (
        f"{row['speedup']:.2f}" if row["repeats"] == 1 else f"{row['speedup']:.2f} ± {row['speedup_std']:.2f}"
    )


def fmt_overhead(row: dict) -> str:
    """The per-round overhead with its uncertainty (it is a difference of separately timed medians)."""
    ms = lambda s: f"{s * 1e3:.2f}"
    if row.get("repeats") == 1:  # one sample of each part: no spread to show
        return f"{ms(row['t_overhead_s'])} ms"
    return f"{ms(row['t_overhead_s'])} ± {ms(row.get('t_overhead_err_s') or 0.0)} ms"


def kernel_lines(models, choice: str = "auto", mesh: str | None = None) -> list[str]:
    """A line for each model whose decode steps run XLA's products on a CPU although --kernels did
    not ask for them: what runs instead of specbench's kernel, and why (on --mesh: by design)."""
    import jax

    from specbench.model.kernels import cpu
    from specbench.model.nets import families, layouts

    if choice == "xla" or jax.default_backend() != "cpu":
        return []
    if mesh is not None:
        return [f"--mesh {mesh}: the models run XLA's products, which split over the mesh's devices"]
    lines = []
    for m in models:
        if m is not None and not families.family_of(m.config).kernels:
            kind = families.family_of(m.config).display_name(m.config)
            lines.append(
                f"{m.name}: XLA's matrix products (specbench's kernels serve decoders, not a {kind})"
            )
        elif m is not None and layouts.kernels_used(m.params) == "xla":
            dtype = m.params["wte"].dtype
            why = cpu.unavailable() or f"the kernel multiplies float32 weights only; {m.name}'s are {dtype}"
            lines.append(
                f"[yellow]{m.name}: XLA's matrix products, not specbench's CPU kernel ({why}): a step of "
                f"several tokens costs 2-3x a 1-token step[/yellow]"
            )
    return lines


# ---------------------------------------------------------------------------------------------
# run


def run_header(job, d, t) -> str:
    """'draft NAME (LxE) · target NAME (LxE) · K=4 · T=0 ...', or what drafts instead of a draft model."""
    from specbench.model.nets import network

    c, spec = job.config, job.config.drafter
    target = f"target [bold]{t.name}[/bold] ({network.shape(t.config)})"
    words = spec.spec.words(spec, job.draft_name)  # drafters.KINDS: what its kind says of it
    if spec.spec.draft_model:
        pair = f"draft [bold]{d.name}[/bold] ({words}) · {target}"
    else:
        pair = f"drafter [bold]{spec.spec.title}[/bold] ({words}) · {target}"
    w, B = c.warp, len(job.ids)
    return (
        pair
        + f" · K={c.K}"
        + (" (dynamic)" if spec.confidence else "")
        + (f" · {spec.drafts} drafts per round" if spec.drafts > 1 else "")
        + (
            f" · a {'dynamic ' if spec.tree.dynamic else ''}tree of {spec.tree.size} nodes"
            if spec.tree is not None
            else ""
        )
        + (" · block verification" if spec.verify == "block" else "")
        + f" · T={w.temperature:g}"
        + (f" · top-k {w.top_k}" if w.top_k else "")
        + (f" · top-p {w.top_p:g}" if w.top_p else "")
        + (
            f" · batch {c.slots} refilled from a queue of {B}"
            if c.slots
            else f" · batch {B}"
            if B > 1
            else ""
        )
        + (" · random weights: timing only" if "random" in (t.source, d.source if d else "") else "")
    )


def timing_table(row: dict, console: Console) -> None:
    """AR against SD, then the step times and the theory from the same run."""
    one, batch = row["repeats"] == 1, row.get("batch", 1)
    table = Table(
        title=f"{row['n_tokens']} new tokens"
        + (
            f" x {row['queue']} requests on {batch} slots"
            if row.get("queue")
            else f" x {batch} sequences"
            if batch > 1
            else ""
        )
        + f" · {plural(row['repeats'], 'repeat')}"
        + (" (no spread from one repeat)" if one else "")
        + f" · {row['device']} · {weights_text(row)}"
    )
    for col in (
        "method",
        "time" if one else "time (mean ± σ)",
        "range (min … max)",
        "tokens/s",
        "speedup",
        "tokens/round",
        "r",
        "α",
    ):
        table.add_column(col, justify="left" if col == "method" else "right")
    spread = (lambda m, sd: fmt_time(m)) if one else (lambda m, sd: f"{fmt_time(m)} ± {fmt_time(sd)}")
    table.add_row(
        "autoregressive",
        spread(row["ar_mean_s"], row["ar_std_s"]),
        fmt_range(row["ar_min_s"], row["ar_max_s"]),
        f"{row['ar_tokens_per_s']:.1f}",
        "1.00",
        "1.00",
        "",
        "",
    )
    table.add_row(
        f"speculative K={row['K']}",
        spread(row["sd_mean_s"], row["sd_std_s"]),
        fmt_range(row["sd_min_s"], row["sd_max_s"]),
        f"{row['sd_tokens_per_s']:.1f}",
        f"[bold]{fmt_speedup(row)}[/bold]",
        f"{row['tokens_per_round']:.2f}",
        f"{row['r']:.3f}",
        f"{row['alpha']:.3f}",
    )
    console.print(table)
    console.print(steps_table(row))
    if row["t_overhead_s"] < 0:
        console.print(
            "[dim]overhead < 0: t_round, t_draft and t_verify are separately timed medians, and their "
            "difference is within the timing noise shown (± σ)[/dim]"
        )


def steps_table(row: dict) -> Table:
    """The step times (median, device loop) and the theory from the same run."""
    batch = row.get("batch", 1)
    steps = Table(
        title="step times (median, device loop"
        + (f", all {batch} sequences at once" if batch > 1 else "")
        + ") and theory from the same run"
    )
    for col in (
        "t_draft",
        "t_target",
        f"t_verify({row.get('tree_nodes') or row['K'] + 1})",
        "c",
        "t_round",
        "overhead" if row["repeats"] == 1 else "overhead (± σ)",
        "theory",
        "refined",
        "measured/refined",
        "round model",
    ):
        steps.add_column(col, justify="right")
    steps.add_row(
        fmt_time(row["t_draft_s"]),
        fmt_time(row["t_target_s"]),
        fmt_time(row["t_verify_s"]),
        f"{row['t_draft_s'] / row['t_target_s']:.3f}",
        fmt_time(row["t_round_s"]),
        fmt_overhead(row),
        f"{row['theory_speedup']:.2f}",
        f"{row['refined_speedup']:.2f}",
        f"{row['measured_over_refined']:.2f}",
        f"{row['round_model_speedup']:.2f}",
    )
    return steps


def budget_lines(row: dict) -> list[str]:
    """Where the time goes: each median wall time as its measured parts plus the residual, then
    what the parts predict (the accounted speedup, tokens per round, the best K)."""
    ms = lambda s: f"{s * 1e3:.2f}"
    share = lambda part, whole: f"{part / whole:+.0%}" if whole else ""
    starts = lambda n: f"{n:g} × " if n and n != 1 else ""  # a refilled queue's starts, in batched starts
    N, K, rounds = row["n_tokens"], row["K"], row["batch_rounds"]
    ar, sd = row["ar_median_s"], row["sd_median_s"]
    lines = [
        f"AR {ms(ar)} ms = {starts(row.get('ar_starts'))}start {ms(row['t_ar_start_s'])} + "
        f"{row.get('ar_steps') or N - 1} × {ms(row['t_ar_token_s'])} token"
        f" + residual {ms(row['ar_residual_s'])} ({share(row['ar_residual_s'], ar)})",
        f"SD {ms(sd)} ms = {starts(row.get('sd_starts'))}start {ms(row['t_sd_start_s'])} + "
        f"{rounds} rounds × {ms(row['t_round_s'])} "
        f"({K} × {ms(row['t_draft_s'])} draft + {ms(row['t_verify_s'])} verify + "
        f"{ms(row['t_overhead_s'])} other) + residual {ms(row['sd_residual_s'])} "
        f"({share(row['sd_residual_s'], sd)})",
    ]
    iid, err = row["tokens_per_round_iid"], row.get("measured_over_accounted_err")
    lines.append(
        f"predicted from the parts: speedup {row['accounted_speedup']:.2f} (medians measured / accounted "
        f"{row['measured_over_accounted']:.2f}" + (f" ± {err:.2f}" if err is not None else "") + ") · "
        f"tokens/round {row['tokens_per_round']:.2f} measured, "
        f"{row['tokens_per_round_positional']:.2f} from per-position acceptance"
        + (f", {iid:.2f} from α alone" if iid is not None else "")
        + (f" · best K {row['best_K_predicted']}" if row["best_K_predicted"] is not None else "")
    )
    if row.get("t_comm_verify_s") is not None:  # on a mesh: the collectives' part of each step
        comm = lambda c, t: f"{ms(row[c])} of the {ms(row[t])} ms {t[2:-2]} step ({row[c] / row[t]:.0%})"
        lines.append(
            f"collectives on {row['mesh']}, timed alone: {comm('t_comm_target_s', 't_target_s')}, "
            f"{comm('t_comm_verify_s', 't_verify_s')}"
        )
    return lines


def budget_warning(row: dict) -> str | None:
    """One line where the row's time account does not close (budget.budget_gap), naming the
    method, the size of the gap and what usually causes it; None where it closes."""
    from specbench.results.budget import budget_gap

    gap = budget_gap(row)
    if gap is None:
        return None
    load = row.get("other_load")
    load_text = f"other processes used {load:.2f} cores" if load is not None else "other load"
    err = row.get("measured_over_accounted_err")
    spread = f" (± {err:.2f} at {row['repeats']} repeats)" if err is not None else ""
    return (
        f"[yellow]the time account does not close: {gap}{spread}. The measured speedup"
        + (f" ({row['speedup']:.2f}×)" if row.get("speedup") is not None else "")
        + f" is not explained by its parts; likely causes: {load_text}, a part "
        "disturbed while it was timed, or too few repeats (a budget within 5% on a noisy host needs "
        "about 40)[/yellow]"
    )


def budget_warnings(rows: list[dict]) -> list[str]:
    """budget_warning for each of specbench's rows whose account does not close, naming the row."""
    out = []
    for r in rows:
        warning = budget_warning(r) if r.get("implementation", "specbench") == "specbench" else None
        if warning:
            label = f"{r['drafter']} K={r['K']} T={r['temperature']:g} {r['prompt_id']}" + (
                f" batch {r['batch']}" if r.get("batch", 1) > 1 else ""
            )
            out.append(warning.replace("[yellow]", f"[yellow]{label}: ", 1))
    return out


def verdict(row: dict) -> str:
    """'1.60 ± 0.08 times faster', or for a speedup s < 1 '1/s ± σ/s² times slower' (the σ carried
    through the inversion to first order)."""
    s, sd = row["speedup"], row["speedup_std"]
    faster, factor, sd = ("faster", s, sd) if s >= 1 else ("slower", 1 / s, sd / s**2)
    return f"{factor:.2f}" + ("" if row["repeats"] == 1 else f" ± {sd:.2f}") + f" times {faster}"


def run_report(row: dict, res, console: Console) -> None:
    """Everything `run` prints after measuring: the tables, the verdict, the texts."""
    timing_table(row, console)
    K, B = row["K"], row.get("queue") or row["batch"]  # the sequences decoded: a queue's requests
    if res.config.drafter.spec.fewer or row["dynamic_K"]:
        console.print(
            f"drafts per round: mean {row['mean_drafted']:.2f} of {K} · rounds with 0..{K} drafts: "
            f"{row['drafted_hist']}"
        )
    if B > 1:
        console.print(serving_view.batch_line(row))
    for line in budget_lines(row):
        console.print(line)
    console.print(serving_view.request_line(row))
    if row.get("request_rate"):
        console.print(serving_view.load_line(row))
    for warning in (budget_warning(row), card.warning(row)):  # an account that does not close; a GPU slowed
        if warning:
            console.print(warning if warning.startswith("[") else f"[yellow]{warning}[/yellow]")
    console.print(
        f"[bold]speculative[/bold] ran [bold]{verdict(row)}[/bold] than autoregressive · "
        f"compile (excluded): {res.compile_s:.1f} s, {res.n_compiles} programs"
        + (f", {res.n_cached} of them from the compile cache" if res.n_cached else "")
    )
    if repetition.warning(row):
        console.print(f"[yellow]{repetition.warning(row)}[/yellow]")
    first = (lambda x: x[0]) if B > 1 else (lambda x: x)
    which = f" (sequence 1 of {B}: {row['batch_prompt_ids'][0]})" if B > 1 else ""
    console.print(Text.assemble(("prompt" + which + " ", "dim"), first(row["prompt"])))
    console.print(Text.assemble(("AR ", "bold"), first(row["ar_text"])))
    console.print(Text.assemble(("SD ", "bold"), first(row["sd_text"])))
    if row["temperature"] == 0:
        both = "the two generations are" if B == 1 else f"all {B} pairs of generations are"
        console.print(
            f"T=0: {both} " + ("[green]identical[/green]" if row["identical"] else "[red]DIFFERENT[/red]")
        )
