"""`specbench report` from its flags to its page: the extras checked, the plan (report.py) or its
dry run, the battery measured under a progress bar with the note Ctrl-C prints kept current,
then the page (page.py). A full disk or a plot that cannot be saved is one line saying what was
kept."""

from __future__ import annotations

import sys

import click

from specbench.cli.asked.console import BadInput, interrupt_note, make_console
from specbench.cli.views import render, tables
from specbench.cli.views.progress import progress as progress_bar
from specbench.cli.views.words import plural
from specbench.errors import SpecbenchError
from specbench.results import export


def report_extra(dry_run: bool) -> tuple[list[str], str]:
    """(the page's missing packages, what to install): refused unless a dry run, which draws
    nothing and says so. Found, not imported: matplotlib's import makes its config folder, and a
    refusal writes nothing."""
    import importlib.util

    missing = [m for m in ("jinja2", "matplotlib") if importlib.util.find_spec(m) is None]
    extra = f"needs the report extra ({', '.join(missing)} missing): pip install -e '.[report]'"
    if missing and not dry_run:
        raise BadInput("report", extra)
    return missing, extra


def already_complete(p, console) -> bool:
    """--resume of a report with nothing left to measure: complete (left as it is), or measured
    without its page (made again)."""
    from specbench.cli.commands import report as battery

    if not (p.resume and battery.left_to_measure(p) == 0):
        return False
    if (p.directory / "index.html").is_file():
        console.print(
            f"the report in {p.directory} is complete: nothing is left to measure, so it is left as it is"
        )
        return True
    console.print(f"the report in {p.directory} is measured but has no index.html: the page is made again")
    return False


def make_report(s, quick: bool) -> None:
    """The report command's work, from its options (settings.Settings.of_report) and whether the
    battery is the quick one (main.report)."""
    missing, extra = report_extra(s.dry_run)
    from specbench.cli.commands import plan as plans
    from specbench.cli.commands import report as battery

    p = battery.report_plan(s, quick)
    console = make_console()
    battery_size = "quick" if p.battery.quick else "full"
    console.print(
        f"report: {len(p.jobs)} measurements + roofline + self-test ({battery_size}), "
        f"{plural(len(p.done), 'row')} already in {p.directory}"
    )
    todo = [job for name, job in p.jobs.items() if name not in {r.get("report_job") for r in p.done}]
    if s.dry_run:
        seconds = plans.estimate_seconds(todo) + battery.FIXED_SECONDS * (
            battery.left_to_measure(p) - len(todo)
        )
        tables.dry_run(console, todo, plans.program_sets(todo), seconds, p.directory)
        if missing:
            console.print(f"note: the report itself {extra}")
        return
    if already_complete(p, console):
        return
    from specbench.results import page

    kept = lambda rows: f"interrupted: {plural(len(rows), 'row')} kept in {p.directory}; " + again
    again = f"run again with --resume -o {p.directory}"
    note = interrupt_note()
    note.message = kept(p.done) if p.done else f"interrupted: nothing measured yet; {again}"
    try:
        with progress_bar("report", battery.total_steps(p), unit="measurement") as bar:

            def step(done, what, rows=()):
                bar.update(done, what=what)
                if rows:
                    note.message = kept(rows)

            rows, sections = battery.measure(p, step)
            bar.update(battery.total_steps(p), what="done")
        info = battery.page_info(p, sections)
        index = page.render(p.directory, rows, sections, p.shows, info)
    except KeyboardInterrupt:  # in-process callers (tests); the console script exits from __main__'s watcher
        click.echo(note.message, err=True)
        sys.exit(130)
    except (OSError, export.WriteError) as e:  # a full disk: export's WriteError, or a plot not saved
        what = e if isinstance(e, export.WriteError) else f"{e.filename} could not be written ({e.strerror})"
        raise SpecbenchError(f"{what}; {note.message.removeprefix('interrupted: ')}") from None
    for line in [f"wrote {index} ({plural(len(rows), 'row')} in rows.json, rows.csv) · open it in a browser"]:
        console.print(line)
    for line in render.budget_warnings(rows):
        console.print(line)
