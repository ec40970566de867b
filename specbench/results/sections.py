"""The report's sections, each defined once: its id, title, what it shows and how it reads.

`specbench report` (cli/report.py) plans the jobs each section shows; page.py renders every
section from its entry here, in this order. A section of measured rows ("rows") has a table of
its own columns followed by COMMON_COLUMNS, a reading (readings.py) and a plot: bars labelled by
`label`, or the plot.py function named by `plot`. The other kinds are drawn from what the report
measured besides rows: the device, the roofline, the self-test, and the formulas (in the
template). No JAX here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from specbench.results import readings, requests


@dataclasses.dataclass(frozen=True)
class Section:
    id: str
    title: str
    kind: str = "rows"  # rows | device | roofline | exactness | formulas
    columns: tuple[tuple[str, str], ...] = ()  # (header, field) before COMMON_COLUMNS
    reading: Callable[[list[dict]], str] | None = None
    label: Callable[[dict], str] | None = None  # a bar chart's label for each row ...
    bars: str = ""  # ... and its title
    plot: str = ""  # else the plot.py function that draws the rows: plot(rows, path)
    budget: bool = False  # also the rows' time budgets (plot.plot_budget)
    headline: Callable[[list[dict]], str] | None = None  # the page's top line, from this section's rows
    tables: tuple[Callable[[list[dict]], dict], ...] = ()  # more tables: rows -> {"headers", "rows"}


COMMON_COLUMNS = (
    ("AR time", "ar_mean_s"),
    ("SD time", "sd_mean_s"),
    ("speedup", "speedup"),
    ("±", "speedup_std"),
    ("α", "alpha"),
    ("tok/round", "tokens_per_round"),
    ("theory", "theory_speedup"),
    ("refined", "refined_speedup"),
    ("accounted", "accounted_speedup"),
    ("measured ÷ accounted", "measured_over_accounted"),
    ("±", "measured_over_accounted_err"),
    ("account closes", "budget_closed"),
    ("other load", "other_load"),
)


def warp_label(r: dict) -> str:
    return f"T={r['temperature']:g}" + (f" p={r['top_p']:g}" if r.get("top_p") else "")


SECTIONS = (
    Section("device", "Device and software", kind="device"),
    Section("roofline", "Roofline: step time against the memory bound", kind="roofline"),
    Section(
        "categories",
        "AR against SD over the prompt suite",
        columns=(("prompt", "prompt_id"), ("repeated", "repetition")),
        reading=readings.categories,
        label=lambda r: r["prompt_id"],
        bars="by prompt",
        budget=True,
        headline=readings.suite,
        tables=(readings.category_table, readings.histogram_table),
    ),
    Section(
        "requests",
        "Per request over the suite: TTFT, TPOT and E2E",
        columns=(
            ("prompt", "prompt_id"),
            ("AR TPOT p50", "ar_tpot_p50_s"),
            ("SD TPOT p50", "sd_tpot_p50_s"),
            ("AR TTFT p50", "ar_ttft_p50_s"),
            ("SD TTFT p50", "sd_ttft_p50_s"),
        ),
        reading=requests.reading,
        plot="plot_requests",
    ),
    Section("K", "K sweep", columns=(("K", "K"),), reading=readings.K_sweep, plot="plot_K"),
    Section(
        "temperature",
        "Temperature and top-p",
        columns=(("T", "temperature"), ("top-p", "top_p")),
        reading=readings.temperature,
        label=warp_label,
        bars="by temperature",
    ),
    Section(
        "drafters",
        "Drafters compared",
        columns=(("drafter", "draft"), ("dynamic K", "dynamic_K")),
        reading=readings.drafters,
        label=lambda r: r["drafter"] + (" dyn" if r.get("dynamic_K") else ""),
        bars="by drafter",
    ),
    Section(
        "batch",
        "Batch size",
        columns=(
            ("batch", "batch"),
            ("prompts", "prompt_id"),
            ("idle", "idle_fraction"),
            ("AR tok/s", "ar_tokens_per_s"),
            ("SD tok/s", "sd_tokens_per_s"),
        ),
        reading=readings.batch,
        plot="plot_batch",
    ),
    Section(
        "verification",
        "Verification methods: token, block, k drafts, gbv (T = 1)",
        columns=(("verify", "verify"), ("drafts", "drafts"), ("t_verify", "t_verify_s")),
        reading=readings.verification,
        label=readings.method_label,
        bars="by verification method (T = 1)",
    ),
    Section(
        "trees",
        "Token trees against chains (T = 1)",
        columns=(
            ("drafter", "draft"),
            ("verify", "verify"),
            ("nodes", "tree_nodes"),
            ("t_verify", "t_verify_s"),
        ),
        reading=readings.trees,
        label=readings.tree_label,
        bars="by drafter and shape (T = 1)",
    ),
    Section(
        "dial",
        "Speedup against acceptance: the dial (T = 0)",
        columns=(("dial a", "acceptance"), ("t_verify", "t_verify_s"), ("t_target", "t_target_s")),
        reading=readings.dial,
        plot="plot_dial",
    ),
    Section("exactness", "Exactness", kind="exactness"),
    Section("formulas", "The formulas", kind="formulas"),
)
BY_ID = {s.id: s for s in SECTIONS}
