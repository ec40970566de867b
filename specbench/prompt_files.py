"""A user's own prompts, from a file: `--prompts-file FILE` on run, sweep, trace and report.

Three formats, told apart by the file's first non-blank line:

    JSON Lines        {"prompt": "...", "id": "q1", "category": "chat"} a line ("text" for
                      "prompt"; id and category optional)
    Spec-Bench and    {"question_id": 81, "category": "writing", "turns": ["...", "..."]} a line,
    MT-Bench          as their question files hold them: the first turn is the prompt
    plain text        one prompt a line (blank lines skipped)

The file is read whole, as UTF-8 (a byte-order mark is dropped before the format is told), up to
MAX_BYTES; a folder, a device, a FIFO or a binary file (one holding NUL bytes) is refused. Every
line is checked before anything is measured; a bad one is refused with the file, its line
number and the field (PromptFileError). A long file is cut down by `choose`: --per-category N,
--sample N (with --seed) and --limit N, in that order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from specbench.prompts import Prompt, Suite

FILE_CATEGORY = "file"  # the category of a prompt whose file names none
MAX_BYTES = 16 * 2**20  # a prompt file's size at most: Spec-Bench's 480 questions are 0.2 MB


class PromptFileError(ValueError):
    """A prompt file that cannot be read: FILE:LINE: FIELD: what is wrong."""

    def __init__(self, path: str | Path, line: int, field: str, problem: str):
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {field}: {problem}")
        self.line, self.field = line, field


def read(path: str | Path) -> Suite:
    """The prompts of a file in any of the three formats, checked line by line."""
    text = _text_of(path)
    path = Path(path)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise PromptFileError(path, 0, "file", "holds no prompt")
    first = lines[0][1].lstrip()
    if first.startswith("["):
        array = "is an array: write one JSON object a line (JSON Lines)"
        raise PromptFileError(path, lines[0][0], "JSON", array)
    read_line = _json_line if first.startswith("{") else _text_line
    prompts, seen = [], {}
    for n, line in lines:
        p = read_line(path, n, line)
        if p.id in seen:
            raise PromptFileError(path, n, "id", f"{p.id!r} is the id of line {seen[p.id]} too")
        seen[p.id] = n
        prompts.append(p)
    return Suite(tuple(prompts), str(path))


def _text_of(name: str | Path) -> str:
    """The file's text: a regular file of at most MAX_BYTES, UTF-8 without NUL bytes, its
    byte-order mark dropped."""
    if not str(name).strip():
        raise PromptFileError("''", 0, "file", "is empty: name a prompt file")
    path = Path(name)
    try:
        if path.is_dir():
            raise PromptFileError(path, 0, "file", "is a folder: name a prompt file")
        if not path.is_file():
            kind = "does not exist" if not path.exists() else "is not a regular file (a device or a FIFO)"
            raise PromptFileError(path, 0, "file", kind)
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as e:
        raise PromptFileError(path, 0, "file", f"cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES:
        raise PromptFileError(path, 0, "file", f"is over {MAX_BYTES // 2**20} MiB: split it or cut it down")
    if b"\0" in data:
        raise PromptFileError(path, 0, "file", "holds NUL bytes: a binary file, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise PromptFileError(path, 0, "file", f"is not UTF-8 text ({e.reason})") from None


def _text_line(path: Path, n: int, line: str) -> Prompt:
    return Prompt(f"line-{n}", FILE_CATEGORY, line.strip(), n)


def _json_line(path: Path, n: int, line: str) -> Prompt:
    """A JSON Lines record, or a Spec-Bench / MT-Bench question (its first turn)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise PromptFileError(path, n, "JSON", f"is not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict):
        raise PromptFileError(path, n, "JSON", "is not an object")
    if "turns" in record:
        turns = record["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise PromptFileError(path, n, "turns", "must be a list whose first turn is text")
        field, text = "turns", turns[0]
    else:
        field = next((f for f in ("prompt", "text") if f in record), None)
        if field is None:
            raise PromptFileError(path, n, "prompt", "missing: give prompt, text, or turns")
        text = record[field]
    if not isinstance(text, str):
        raise PromptFileError(path, n, field, "must be text")
    if not text.strip():
        raise PromptFileError(path, n, field, "is empty")
    id_field = "question_id" if "question_id" in record else "id"
    pid = record.get(id_field, f"line-{n}")
    if isinstance(pid, bool) or not isinstance(pid, (str, int)) or not str(pid).strip():
        raise PromptFileError(path, n, id_field, "must be a non-empty string or an integer")
    category = record.get("category", FILE_CATEGORY)
    if not isinstance(category, str) or not category.strip():
        raise PromptFileError(path, n, "category", "must be a non-empty string")
    return Prompt(str(pid), category, text, n)


def choose(
    suite: Suite,
    limit: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    per_category: int | None = None,
) -> Suite:
    """The suite cut down: the first `per_category` prompts of each category, then `sample` of
    them drawn with `seed` (kept in the file's order), then the first `limit`."""
    kept = list(suite.prompts)
    if per_category is not None:
        groups = suite.categories()
        keep = {pid for ids in groups.values() for pid in ids[:per_category]}
        kept = [p for p in kept if p.id in keep]
    if sample is not None and sample < len(kept):
        drawn = set(random.Random(seed).sample(range(len(kept)), sample))
        kept = [p for i, p in enumerate(kept) if i in drawn]
    if limit is not None:
        kept = kept[:limit]
    return Suite(tuple(kept), suite.source)
