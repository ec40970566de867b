"""CSV / JSON / Markdown from one list of result rows (dicts), hyperfine-style.

Files are rewritten whole after every finished row, atomically (temp file + rename), so an
interrupted sweep keeps every row it finished and never leaves a half-written file. "-" means
standard output. CSV and Markdown hold the scalar columns; JSON holds everything, including the
raw per-run times, the accepted-per-round histogram and the generated token ids.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

CONTEXT_COLUMNS = ["specbench_version", "git_commit", "jax_version", "device", "timestamp", "dtype", "draft",
                   "target", "drafter", "ngram", "draft_layers", "dynamic_K", "draft_confidence", "K", "temperature", "top_k", "top_p", "seed", "prompt_id", "prompt_sha", "n_tokens",
                   "repeats", "warmup", "loop", "batch"]
METRIC_COLUMNS = ["ar_mean_s", "ar_std_s", "ar_min_s", "ar_max_s", "ar_median_s", "ar_tokens_per_s",
                  "sd_mean_s", "sd_std_s", "sd_min_s", "sd_max_s", "sd_median_s", "sd_tokens_per_s",
                  "speedup", "speedup_std", "n_rounds", "tokens_per_round", "mean_drafted", "r", "alpha",
                  "accept_rate_drafted", "batch_rounds", "tokens_per_batch_round", "idle_fraction",
                  "t_draft_s", "t_target_s", "t_verify_s", "t_round_s", "t_overhead_s", "t_overhead_err_s", "t_ar_token_s",
                  "theory_speedup", "refined_speedup", "round_model_speedup", "measured_over_theory",
                  "measured_over_refined", "compile_s", "identical"]
CSV_COLUMNS = CONTEXT_COLUMNS + METRIC_COLUMNS
# the JSON rows also carry: ar_times_s, sd_times_s, accepted_hist, per_position_acceptance,
# ar_token_ids, sd_token_ids, ar_text, sd_text, prompt, drafted_hist, and for a batch (B > 1)
# batch_prompt_ids, with prompt, token ids and texts as lists of one entry per sequence
MARKDOWN_COLUMNS = ["drafter", "draft", "target", "prompt_id", "batch", "K", "temperature", "top_p", "ar_tokens_per_s",
                    "sd_tokens_per_s", "speedup", "tokens_per_round", "alpha", "theory_speedup",
                    "refined_speedup", "measured_over_refined"]


class ExportError(Exception):
    pass


# Which file names each format may be written to: the extension must agree with the format.
EXTENSIONS = {"csv": (".csv",), "json": (".json",), "markdown": (".md", ".markdown")}


def check_extension(path: str, fmt: str) -> None:
    """Refuse `out.csv` for JSON and the like: a file's name says what is in it. '-' is stdout."""
    if path != "-" and Path(path).suffix.lower() not in EXTENSIONS[fmt]:
        raise ExportError(f"{path}: {fmt} goes to a file named *{' or *'.join(EXTENSIONS[fmt])} (or - for stdout)")


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


def write_text(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent if str(p.parent) else ".", prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _clean(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def to_csv(rows: list[dict], columns: list[str] | None = None) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns or CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def to_json(rows: list[dict]) -> str:
    return json.dumps([{k: _clean(v) for k, v in row.items()} for row in rows], indent=1) + "\n"


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else value


def fmt_fixed(column: str, value) -> str:
    """A table cell with the decimals its column deserves (tokens/s 1, speedups 2, alpha 3)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    decimals = {"ar_tokens_per_s": 1, "sd_tokens_per_s": 1, "alpha": 3, "r": 3, "temperature": 2,
                "top_p": 2}.get(column, 2)
    if column in ("temperature", "top_p"):
        return f"{value:g}"
    if column.startswith("t_") and column.endswith("_s"):
        return f"{value * 1e3:.2f} ms"
    if column == "idle_fraction":
        return f"{value:.0%}"
    return f"{value:.{decimals}f}"


def to_markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    columns = columns or MARKDOWN_COLUMNS
    return tabulate([[_fmt(r.get(c)) for c in columns] for r in rows], headers=columns, tablefmt="github") + "\n"


WRITERS = {"csv": to_csv, "json": to_json, "markdown": to_markdown}


def write(rows: list[dict], path: str, fmt: str) -> None:
    write_text(path, WRITERS[fmt](rows))


def read_json(path: str) -> list[dict]:
    """Rows from a JSON results file; ExportError if it is not one."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(f"{path} is not a specbench JSON results file ({str(e).splitlines()[0]})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "K" in r for r in rows):
        raise ExportError(f"{path} is not a specbench JSON results file (expected a list of result rows)")
    return rows
