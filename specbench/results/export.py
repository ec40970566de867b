"""CSV / JSON / Markdown from one list of result rows (dicts), hyperfine-style; the columns come
from the schema in results.py.

Files are rewritten whole after every finished row, atomically (temp file + rename), so an
interrupted sweep keeps every row it finished and never leaves a half-written file. "-" means
standard output. CSV and Markdown hold the scalar columns; JSON holds everything, including the
raw per-run times, the accepted-per-round histogram and the generated token ids.
"""

from __future__ import annotations

import csv
import io
import json
import lzma
import math
import os
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

from specbench import files
from specbench.errors import ExportError
from specbench.results.schema import CSV_COLUMNS, MARKDOWN_COLUMNS

# Which file names each format may be written to: the extension must agree with the format.
EXTENSIONS = {"csv": (".csv",), "json": (".json",), "markdown": (".md", ".markdown")}


def check_extension(path: str, fmt: str) -> None:
    """Refuse `out.csv` for JSON and the like: a file's name says what is in it. '-' is stdout."""
    if path != "-" and Path(path).suffix.lower() not in EXTENSIONS[fmt]:
        raise ExportError(
            f"{path}: {fmt} goes to a file named *{' or *'.join(EXTENSIONS[fmt])} (or - for stdout)"
        )


def check_writable(path: str) -> None:
    """Fail before any work if `path` cannot be written (its folder missing or read-only)."""
    if path == "-":
        return
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise ExportError(f"{path} is a directory")
    if not folder.is_dir():
        raise ExportError(f"folder {folder} does not exist")
    try:  # the real test, which holds for root and read-only mounts alike
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError:
        raise ExportError(f"{path} is not writable") from None
    if p.exists() and not os.access(p, os.W_OK):
        raise ExportError(f"{path} is not writable")


class WriteError(ExportError):
    """A file that could not be written (a full disk, a folder gone): `path` names it. What it
    held before is untouched, since every write is a rename of a complete temporary file."""

    def __init__(self, message: str, path: str):
        super().__init__(message)
        self.path = path


def write_text(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(
            dir=p.parent if str(p.parent) else ".", prefix=f".{p.name}.", suffix=".tmp"
        )
    except OSError as e:
        raise WriteError(f"{path} could not be written ({e.strerror or e})", path) from None
    try:
        files.share(tmp)  # mkstemp's 0600 would hide the file from others
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, p)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise WriteError(f"{path} could not be written ({e.strerror or e})", path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def strict(value):
    """`value` with every NaN or infinite float, at any depth, made None: a value that does not
    exist is JSON's null (RFC 8259 has no NaN; JavaScript's JSON.parse refuses it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def dumps(value, indent: int | None = 1) -> str:
    """Strict JSON text of `value` (NaN and infinities as null; json refuses any left)."""
    return json.dumps(strict(value), indent=indent, allow_nan=False)


def to_csv(rows: list[dict], columns: list[str] | None = None) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns or CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(strict(rows))
    return buf.getvalue()


def to_json(rows: list[dict]) -> str:
    return dumps(rows) + "\n"


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else value


def to_markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    columns = columns or MARKDOWN_COLUMNS
    return (
        tabulate([[_fmt(r.get(c)) for c in columns] for r in rows], headers=columns, tablefmt="github") + "\n"
    )


WRITERS = {"csv": to_csv, "json": to_json, "markdown": to_markdown}


def write(rows: list[dict], path: str, fmt: str) -> None:
    write_text(path, WRITERS[fmt](rows))


def write_all(rows: list[dict], paths: dict[str, str | None], columns: list[str] | None = None) -> None:
    """Write the rows once to each {format: path} given (None: not asked for). With `columns`, CSV
    and Markdown hold those columns (rows of another kind than result rows, such as roofline's).
    Every file is tried; the first that could not be written is then raised (WriteError)."""
    failed = []
    for fmt, path in paths.items():
        if path:
            text = WRITERS[fmt](rows) if columns is None or fmt == "json" else WRITERS[fmt](rows, columns)
            try:
                write_text(path, text)
            except WriteError as e:
                failed.append(e)
    if failed:
        raise failed[0]


def read_json(path: str) -> list[dict]:
    """Rows from a JSON results file, or from one compressed with xz (FILE.json.xz: how the
    recorded sweeps are kept small); ExportError if it is not one."""
    try:
        raw = Path(path).read_bytes()
        if str(path).endswith(".xz"):
            raw = lzma.decompress(raw)
        rows = json.loads(raw.decode())
    except (OSError, lzma.LZMAError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(f"{path} is not a specbench JSON results file ({str(e).splitlines()[0]})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "K" in r for r in rows):
        raise ExportError(f"{path} is not a specbench JSON results file (expected a list of result rows)")
    return rows
