"""Where results go and what is already there: the results folder, export paths, save paths,
and the resume files whose settings must match. Each failure is BadInput, one line naming the
flag or variable; nothing is created where the user did not ask."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import click

from specbench.cli.asked.console import BadInput
from specbench.errors import ExportError
from specbench.results import export


def stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def results_dir(create: bool = True) -> Path:
    """Where run and sweep save by default: $SPECBENCH_RESULTS_DIR (made if missing, since the
    user named it, unless create=False: a dry run), else the results/ folder of the checkout this
    package runs from, else the working directory. No folder the user did not name is created."""
    named = os.environ.get("SPECBENCH_RESULTS_DIR")
    if named and Path(named).exists() and not Path(named).is_dir():
        raise BadInput("SPECBENCH_RESULTS_DIR", f"{named} is a file: name a folder for the results")
    if named and not create:
        return Path(named)
    if named:
        try:
            Path(named).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput("SPECBENCH_RESULTS_DIR", f"cannot create {named} ({e.strerror})") from None
        return Path(named)
    checkout = (
        Path(__file__).resolve().parents[3]
    )  # specbench/cli/asked/paths.py: the checkout holds specbench/
    if (checkout / "pyproject.toml").is_file() and (checkout / "results").is_dir():
        return checkout / "results"
    return Path.cwd()


def check_exports(exports: dict[str, str | None], output: str | None = None) -> dict[str, str | None]:
    """Every --export-* path ({format: path}) and sweep's --output: the right extension, and
    writable, before any work. Returns them for export.write_all."""
    named = [(f"--export-{fmt}", fmt, path) for fmt, path in exports.items()] + [("--output", "json", output)]
    for flag, fmt, path in named:
        if path:
            try:
                export.check_writable(path)
                export.check_extension(path, fmt)
            except ExportError as e:
                raise BadInput(flag, str(e)) from None
    return dict(exports)


def check_save_path(path: Path, flag: str = "--save") -> None:
    """The default results file must be writable, or say how to avoid it (a folder a dry run did
    not make: its nearest existing parent must be writable). `flag` is run's --save or sweep's
    --output, and the advice is that command's own."""
    avoid = "pass --no-save" if flag == "--save" else "name a writable file with --output"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder != path.parent:
        if not os.access(folder, os.W_OK):
            raise BadInput(flag, f"{path.parent} cannot be made in {folder}; {avoid}")
        return
    try:
        export.check_writable(str(path))
    except ExportError as e:
        raise BadInput(flag, f"{e}; {avoid}, or set SPECBENCH_RESULTS_DIR to a writable folder") from None


def check_resume_settings(rows: list[dict], fixed: dict, output: str) -> None:
    """--resume adds rows only to a file of the same settings: refuse, naming each that differs (a
    setting that rows of an older version lack reads as its `old` value)."""
    from specbench.results.schema import BY_NAME

    differing = []
    for name, value in fixed.items():
        old = BY_NAME[name].old if name in BY_NAME else None
        before = {r.get(name, old) for r in rows}
        if before and before != {value}:
            shown = ", ".join(str(v) for v in sorted(before, key=str))
            differing.append(f"{name} {shown} there, {value} now")
    if differing:
        raise BadInput(
            "--resume",
            f"{output} holds rows of other settings ({'; '.join(differing)}); "
            "pass the same settings, or write to another --output",
        )


def check_grid_resume(rows: list[dict], keys: list[dict], output: str) -> None:
    """--resume completes the same sweep: every row already in the file must be one of this
    grid's (same draft, target, drafter settings, dtype, N, seed, warps, loop, prompts, batch)."""
    from specbench.results import schema as results

    grid = {results.sweep_key(k) for k in keys}
    foreign = [r for r in rows if results.sweep_key(r) not in grid]
    if not foreign:
        return
    differing = []
    for i, name in enumerate(results.SWEEP_KEY):
        there = {results.sweep_key(r)[i] for r in foreign}
        now = {results.sweep_key(k)[i] for k in keys}
        if there - now:
            shown = lambda values: ", ".join(str(v) for v in sorted(values, key=str))
            differing.append(f"{name} {shown(there - now)} there, {shown(now)} now")
    what = "; ".join(differing)
    raise BadInput(
        "--resume",
        f"{output} holds {len(foreign)} rows of another sweep ({what}); "
        "pass the same settings, or write to another --output",
    )


def check_new_file(output: str, suffix: str, force: bool) -> None:
    """--output names a new file of this suffix that can be written; an existing one only with --force."""
    if Path(output).suffix.lower() != suffix:
        raise BadInput(
            "--output", f"{output}: the plot is a {suffix[1:].upper()}, so name the file *{suffix}"
        )
    if Path(output).exists() and not force:
        raise BadInput("--output", f"{output} exists: --force replaces it")
    try:
        export.check_writable(output)
    except ExportError as e:
        raise BadInput("--output", str(e)) from None


export_options = [  # --export-csv, --export-json, --export-markdown: check_exports reads them
    click.option("--export-csv", type=str, default=None, metavar="PATH", help="Write CSV ('-' = stdout)."),
    click.option("--export-json", type=str, default=None, metavar="PATH", help="Write JSON ('-' = stdout)."),
    click.option(
        "--export-markdown", type=str, default=None, metavar="PATH", help="Write Markdown ('-' = stdout)."
    ),
]
