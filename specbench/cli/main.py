"""specbench's command line: run, sweep, trace, theory, models, prompts, plot, roofline.

Each command gathers a checked plan (plan.py, imported where needed: it brings JAX, which
theory, plot, models and prompts do without), measures (bench.py, roofline.py), prints
(render.py) and writes (export.py). Bad input ends in one line naming the flag, exit code 2
(console.py); Ctrl-C ends with exit code 130 and keeps what was written.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.console import Console

from specbench.cli.asked import devices, file_options, helptext, step_options
from specbench.cli.asked import options as opt
from specbench.cli.asked.console import (
    BadInput,
    SpecbenchGroup,
    bad_input,
    given,
    interrupt_note,
    make_console,
)
from specbench.cli.commands import distributed
from specbench.cli.views import peers_view, predict_view, render, sweep_view, tables, trace_view
from specbench.cli.views.progress import progress as progress_bar
from specbench.cli.views.words import plural
from specbench.errors import SpecbenchError
from specbench.results import arrivals, export, theory

K_SEARCH = 64  # theory --alpha looks for the optimal K in 1..K_SEARCH


@click.group(cls=SpecbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specbench")
def cli():
    """Measure what speculative decoding buys: GPT-2, T5 and the Llama family in JAX,
    autoregressive (AR) against speculative decoding (SD), timed honestly and set beside the theory."""


@cli.command(epilog=helptext.METRICS_HELP)
@opt.apply(
    opt.model
    + opt.one_prompt
    + opt.prompts_file
    + opt.single
    + opt.decode
    + opt.run
    + opt.refill
    + opt.placed
    + opt.drafter
    + opt.peer
    + opt.exports
    + devices.processes_options
)
@opt.dry_run
def run(**flags):
    """One configuration: autoregressive against speculative decoding, side by side."""
    from specbench.cli.asked.settings import Settings, processes_of
    from specbench.cli.commands import plan
    from specbench.measure import bench

    s = Settings.of_run(flags, given())  # every setting checked, once
    leader, s = distributed.join(s, processes_of(flags))  # before JAX starts
    if s.dry_run and not leader:
        make_console().print(distributed.follower_dry_run(processes_of(flags)))
        return
    p = plan.run_plan(s)
    quiet = None if leader else open(os.devnull, "w")  # noqa: SIM115 -- the process's life long
    console = make_console(*p.exports.values()) if leader else Console(file=quiet)
    console.print(render.run_header(p.job, p.job.config.draft, p.job.config.target))
    for line in render.kernel_lines(p.job.config.models, s.models.kernels, s.models.mesh):
        console.print(line)
    if s.dry_run:
        tables.dry_run(
            console, [p.job], plan.program_sets([p.job]), plan.estimate_seconds([p.job]), p.save_path
        )
        return
    with progress_bar("compiling (warm-up)", p.job.config.total_steps, stream=quiet) as bar:
        res = bench.run_benchmark(
            p.job.config, p.job.encoded, lambda done, total, what: bar.update(done, what=what)
        )
    rows = p.job.rows(res, p.dtype)  # specbench's, then each peer's
    # files first: a reader that stops reading (`| head -1`) must not cost the results
    files = [(fmt, path) for fmt, path in p.exports.items() if path and path != "-"]
    files += [("json", str(p.save_path))] if p.save_path else []
    failed = None
    for fmt, path in files:
        try:
            export.write(rows, path, fmt)
        except export.WriteError as e:  # the result is still printed below, and the error said last
            failed = failed or e
    render.run_report(rows[0], res, console)
    if len(rows) > 1:
        peers_view.peers_report(rows, console)
    export.write_all(rows, {fmt: path for fmt, path in p.exports.items() if path == "-"})
    if failed:
        written = [path for _, path in files if Path(path).is_file() and path != failed.path]
        raise SpecbenchError(
            f"{failed}; the result is printed above"
            + (f", and {', '.join(written)} written" if written else ", and no file holds it")
        )
    if p.save_path:
        console.print(f"[dim]saved {p.save_path}[/dim]")


@cli.command(epilog=helptext.METRICS_HELP)
@opt.apply(
    opt.model + opt.sweep + opt.prompts_file + opt.refill + opt.placed + opt.drafter + opt.peer + opt.exports
)
@opt.dry_run
def sweep(**flags):
    """A grid over drafters, K, temperature, top-p and prompts (or batch sizes); every finished row
    is saved at once."""
    from specbench.cli.asked.settings import Settings
    from specbench.cli.commands import plan, sweep_plan
    from specbench.cli.commands.jobs import measure_into
    from specbench.results.schema import sweep_key

    p = sweep_plan.sweep_plan(Settings.of_sweep(flags, given()))
    console = make_console(*p.exports.values())
    rows = list(p.rows)
    if flags["dry_run"]:
        tables.dry_run(console, p.todo, plan.program_sets(p.todo), plan.estimate_seconds(p.todo), p.output)
        return
    # files are rewritten after every row; standard output gets the exports once, at the end
    files = {fmt: path for fmt, path in p.exports.items() if path and path != "-"}
    kept = lambda: (
        f"{plural(len(rows), 'row')} kept in {p.output}; run again with --resume --output {p.output}"
        if rows
        else "no row had finished, so nothing was written"
    )
    note = interrupt_note()
    note.message = "interrupted: " + kept()
    console.print(
        f"sweep: {plural(p.grid_size, 'configuration')}, {p.grid_size - len(p.todo)} already in "
        f"{p.output}, {len(p.todo)} to run · drafters {', '.join(p.draft_names)} · target {p.target_name}"
    )
    try:
        with progress_bar("sweep", len(p.todo), unit="configuration") as bar:
            for i, (job, label) in enumerate(zip(p.todo, p.labels)):
                bar.update(i, what=label)
                try:
                    measure_into(job, rows, {"json": p.output, **files}, flags["dtype"], key=sweep_key)
                except export.WriteError as e:
                    raise SpecbenchError(f"{e}; {note.message.removeprefix('interrupted: ')}") from None
                note.message = "interrupted: " + kept()
                bar.update(i + 1)
    except KeyboardInterrupt:  # in-process callers (tests); the console script exits from __main__'s watcher
        click.echo("interrupted: " + kept(), err=True)
        sys.exit(130)
    export.write_all(rows, {fmt: path for fmt, path in p.exports.items() if path == "-"})
    sweep_view.sweep_table(rows, p.output, p.repeats, console)
    for line in render.budget_warnings(rows):
        console.print(line)
    if any(r.get("implementation", "specbench") != "specbench" for r in rows):
        peers_view.peers_report(rows, console)
    for line in sweep_view.best_K_lines(rows):
        console.print(line)
    if p.batches and len(p.batches) > 1:
        for line in sweep_view.crossover_lines(rows):
            console.print(line)
    for line in arrivals.stop_lines(rows):  # a sweep over request rates
        console.print(line)


@cli.command(epilog=helptext.METRICS_HELP)
@opt.apply(opt.model + opt.one_prompt + opt.prompts_file + opt.single + opt.decode + opt.trace + opt.drafter)
@opt.dry_run
def trace(**flags):
    """One generation shown round by round: accepted drafts, the rejected draft (struck
    through), and the resampled or bonus token."""
    from specbench.cli.asked.settings import Settings
    from specbench.cli.commands import plan
    from specbench.model import generate
    from specbench.model.checkpoints import tokenizer

    p = plan.trace_plan(Settings.of_run(flags, given()))
    if flags["dry_run"]:
        click.echo(
            f"dry run: one generation of {p.n_tokens} tokens, K={p.K}, drafted by {p.draft_name}; nothing run"
        )
        return
    tokens, st = generate.speculative(
        p.draft, p.target, p.prompt_ids, p.n_tokens, p.K, p.warp, p.seed, record=True, drafter=p.drafter
    )
    trace_view.trace_text(p, tokens, st, tokenizer.for_model(p.target).decode, make_console())


@cli.command("theory")
@opt.apply(step_options.theory_cmd)
def theory_cmd(**flags):
    """The speedup that theory predicts. With --r: Chen et al.'s formula; with --alpha:
    Leviathan et al.'s, and the optimal K. A round's drafting is its drafter's cost shape
    (--draft-cost): K t_draft for a chain, one t_draft for a one-pass drafter, nothing for lookup.

    \b
      speedup = r (K+1) t_target / (drafting + t_target)
      E[tokens/round] = (1 - alpha^(K+1)) / (1 - alpha),  speedup = E / (drafting/t_target + 1)
    """
    o = step_options.Theory.of_flags(flags)
    try:
        rows = theory.calculator_rows(o)
    except ValueError as e:
        raise BadInput("--r", str(e)) from None
    tables.theory_report(rows, o, K_SEARCH, make_console())


@cli.command("predict")
@opt.apply(file_options.predict)
def predict(**flags):
    """Speedup and time per token at each K on a device not at hand: a run's acceptance per draft
    position, with the step times t(n) of draft and target from a roofline export of that device
    (or its bandwidth, FLOP rate and fixed cost per step). Steady state: the prefill is left out.

    \b
      speedup(K) = E(K) t_T(1) / (K t_D(1) + t_T(K+1) + comm),  E(K) = 1 + sum_i prod_{j<=i} a_j
    """
    from specbench.cli.commands import predict as predicting

    o = file_options.Predict.of_flags(flags)
    predict_view.show(*predicting.predict(o), o.comm_s * 1e6)


@cli.group(invoke_without_command=True)
@click.pass_context
def models(ctx):
    """List models (registry, bundled, downloaded) or download one."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(models_list)


@models.command("list")
def models_list():
    """Every model specbench knows, whether it is here, and its size."""
    from specbench.model.checkpoints import weights

    tables.models_table(weights.list_models(), weights.weights_dir(), make_console())


@models.command("download")
@click.argument("name")
def models_download(name):
    """Download an HF GPT-2 checkpoint into gpt2_weights/NAME (honours HF_ENDPOINT)."""
    from specbench.errors import WeightsError
    from specbench.model.checkpoints import hub

    try:
        path = hub.download(name)
    except WeightsError as e:
        raise bad_input(e, "NAME") from None
    click.echo(f"{path.name}: ready in {path}")


@cli.command("prompts")
@opt.apply(opt.prompts_file + [opt.seed])
def prompts_cmd(**flags):
    """The built-in prompt suite, by category; with --prompts-file, that file's prompts, checked."""
    from specbench.cli.asked.settings import PromptChoice
    from specbench.cli.asked.suites import suite_of

    choice = PromptChoice(
        file=flags["prompts_file"], **{k: flags[k] for k in ("per_category", "sample", "limit")}
    )
    tables.prompts_table(make_console(), suite_of(choice, flags["seed"]))


@cli.command()
@opt.apply(file_options.plot)
def plot(**flags):
    """Speedup and tokens/round against K from a JSON results file, with the theory curve; speedup
    and throughput against batch size when the file varies it (sweep --batch)."""
    from specbench.cli.commands import plot as plotting

    click.echo(f"wrote {plotting.plot(file_options.Plot.of_flags(flags))}")


@cli.command("roofline")
@opt.apply(step_options.roofline + opt.exports)
@opt.dry_run
def roofline_cmd(**flags):
    """Decode-step time against its two roofs, for steps of 1 to K+1 tokens.

    A step must read every weight once whatever the number of tokens, and does 2 FLOPs per weight
    per token: its limit is max(bytes / read bandwidth, FLOPs / matrix-product rate), both measured
    here. While the memory roof is the higher, t(K+1)/t(1) can stay near 1: that is why verifying K
    drafts can be nearly free. Steps are timed as device-side loops; "plain step" is the same
    1-token step dispatched from Python one call per token, the usual way, and plain/loop what the
    device loop saves. --kernels cpu,xla measures each model with specbench's CPU kernel and with
    XLA's products, side by side.
    """
    from specbench.cli.commands import plan
    from specbench.measure import roofline
    from specbench.model.nets.layouts import kernels_used
    from specbench.results.schema import ROOFLINE_COLUMNS

    kernels_name = lambda model: kernels_used(model.params)
    from specbench.cli.asked.settings import Roofline

    runs, exports = plan.roofline_plan(Roofline.of_flags(flags))
    console = make_console(*exports.values())
    # a line for a network no variant runs on the kernel (with --kernels cpu,xla, XLA is asked for)
    on_kernel = {model.name for model, _ in runs if kernels_name(model) == "cpu"}
    for line in render.kernel_lines(
        [model for model, _ in runs if model.name not in on_kernel],
        "xla" if flags["kernels"] == ["xla"] else "auto",
    ):
        console.print(line)
    K, context = flags["K"], flags["context"]
    if flags["dry_run"]:
        for model, dtype in runs:
            console.print(f"  {model.name} {dtype} ({kernels_name(model)}): steps of 1 to {K + 1} tokens")
        console.print(f"dry run: {plural(len(runs), 'model')} to time; nothing was timed or written")
        return
    # each network's rows are saved to the files as they come (a run cut off keeps them);
    # standard output takes one document, at the end
    files = {fmt: path for fmt, path in exports.items() if path != "-"}
    save = lambda rows: export.write_all(rows, files, columns=ROOFLINE_COLUMNS)
    with progress_bar("roofline", 2 + len(runs) * (K + 2), unit="timing") as bar:
        rows = roofline.measure_runs(runs, K, context, flags["iters"], bar.update, on_network=save)
    export.write_all(rows, exports, columns=ROOFLINE_COLUMNS)
    tables.roofline_table(rows, context, console)


@cli.command()
@opt.apply(opt.model + opt.report + opt.prompts_file + opt.peer)
@opt.dry_run
def report(**flags):
    """The whole picture on this machine: a standard battery (roofline, prompt categories, K,
    temperature, drafters, batch size, exactness) measured with one pair, as a web page with its
    rows. Every row is saved as it finishes; Ctrl-C keeps them, and --resume completes the report."""
    from specbench.cli.asked.settings import Settings
    from specbench.cli.commands.report_command import make_report

    make_report(Settings.of_report(flags, given()), flags["quick"])


def main(note=None):
    """Run the command line. The console script enters through specbench.__main__, which first
    makes Ctrl-C safe at any moment and passes the note it prints then (console.interrupt_note)."""
    cli(obj=note)
