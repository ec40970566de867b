"""A report's folder: what marks it as a report (its state file with the settings and the
sections' load), the checks before --resume extends it or --force starts it over, and the state
saved after each section."""

from __future__ import annotations

import json
from pathlib import Path

from specbench.cli.asked.console import BadInput
from specbench.errors import ExportError
from specbench.results import export
from specbench.results.sections import BY_ID

SETTINGS_BEFORE = {"kernels": "xla", "draft_vocab": "full"}


STATE_FILE = "report.json"  # the settings and the sections' load; marks a directory as a report


def check_directory(directory: Path, settings: dict, resume: bool, force: bool) -> list[dict]:
    """-o DIR: new, or a previous report (--resume completes it, --force starts it over); never a
    folder of something else unless --force. Returns the rows --resume keeps."""
    state = directory / STATE_FILE
    if resume and force:
        raise BadInput("--force", "starts the report over, --resume completes it: give one of them")
    if directory.exists() and not directory.is_dir():
        raise BadInput("--output", f"{directory} is a file, not a folder")
    is_report = state.is_file()
    if resume:
        if not is_report:
            raise BadInput("--resume", f"{directory} holds no report to complete (no {STATE_FILE})")
        try:
            saved = json.loads(state.read_text())
            rows = (
                export.read_json(str(directory / "rows.json")) if (directory / "rows.json").exists() else []
            )
        except (OSError, ValueError, ExportError) as e:
            raise BadInput("--resume", f"{state} cannot be read ({e})") from None
        shape = isinstance(saved, dict) and isinstance(saved.get("settings"), dict)
        if not shape or not isinstance(saved.get("sections", {}), dict):
            raise BadInput("--resume", f"{state} is not a specbench report (no settings and sections in it)")
        damage = damaged_sections(saved["sections"]) or damaged_rows(rows)
        if damage:
            raise BadInput("--resume", f"{directory} is damaged: {damage}; --force starts it over")
        before = {**SETTINGS_BEFORE, **saved["settings"]}
        if before != settings:
            differ = ", ".join(
                f"{k} {before.get(k)!r} there, {v!r} now" for k, v in settings.items() if before.get(k) != v
            )
            raise BadInput("--resume", f"{directory} is a report with other settings ({differ})")
        return rows
    if directory.exists() and any(directory.iterdir()) and not force:
        what = "a previous report: --resume completes it" if is_report else "not a report"
        raise BadInput("--output", f"{directory} exists and is {what}; --force writes into it")
    parent = directory.parent if directory.parent != Path("") else Path(".")
    if not directory.exists() and not parent.is_dir():
        raise BadInput("--output", f"{parent} does not exist: make it, or name a folder in one that does")
    probe = directory if directory.exists() else parent
    try:
        export.check_writable(str(probe / ".specbench-probe"))
    except ExportError as e:
        raise BadInput("--output", str(e).replace("/.specbench-probe", "")) from None
    return []


ROW_NEEDS = ("report_job", "K", "temperature", "prompt_id", "speedup", "alpha", "ar_mean_s", "sd_mean_s")


def damaged_rows(rows: list[dict]) -> str | None:
    """What is wrong with a report's saved rows, or None: every row names its job and carries the
    numbers the page draws (ROW_NEEDS), so that --resume neither re-measures nor crashes on it."""
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            return f"row {i + 1} of rows.json is not an object"
        gone = [f for f in ROW_NEEDS if f not in r]
        if gone:
            return f"row {i + 1} of rows.json has no {', '.join(gone)}"
        bad = [
            f for f in ROW_NEEDS[1:] if f != "prompt_id" and not isinstance(r[f], (int, float, type(None)))
        ]
        if bad or not isinstance(r["report_job"], str):
            return f"row {i + 1} of rows.json has a {(bad or ['report_job'])[0]} of the wrong type"
    return None


def damaged_sections(sections: dict) -> str | None:
    """What is wrong with report.json's sections, or None: each an object, the roofline's rows a
    list of objects, the self-test an object."""
    for name, entry in sections.items():
        if name not in BY_ID or not isinstance(entry, dict):
            return f"report.json's section {name!r} is not one of a report's"
    rows = sections.get("roofline", {}).get("rows", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "model" in r for r in rows):
        return "report.json's roofline rows are not rows"
    if not isinstance(sections.get("exactness", {}).get("selftest", {}), dict):
        return "report.json's self-test is not an object"
    return None


def save_state(plan, sections: dict) -> None:
    export.write_text(
        str(plan.directory / STATE_FILE),
        export.dumps({"settings": plan.settings, "sections": sections}),
    )
