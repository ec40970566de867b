"""The report's page: rows and sections in, DIR/index.html and the plots as PNGs out.

The page is a Jinja2 template (templates/report.html.j2) with its CSS inline and every plot
embedded as a data URI, so index.html alone opens from disk, in any browser, with no network
and no JavaScript; the same PNGs are written beside it for reuse. No JAX here.
"""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

import jinja2

from specbench.results import export, readings
from specbench.results import schema as results
from specbench.results.budget import budget_gap

COLUMNS = {  # section -> (header, field) of its table; cells are formatted by results.cell
    "common": [
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
    ],
    "categories": [("prompt", "prompt_id")],
    "K": [("K", "K")],
    "temperature": [("T", "temperature"), ("top-p", "top_p")],
    "drafters": [("drafter", "draft"), ("dynamic K", "dynamic_K")],
    "batch": [("batch", "batch"), ("AR tok/s", "ar_tokens_per_s"), ("SD tok/s", "sd_tokens_per_s")],
    "verification": [("verify", "verify"), ("drafts", "drafts"), ("t_verify", "t_verify_s")],
    "dial": [("dial a", "acceptance"), ("t_verify", "t_verify_s"), ("t_target", "t_target_s")],
}
PEER_COLUMNS = [
    ("prompt", "prompt_id"),
    ("implementation", "implementation"),
    ("version", "implementation_version"),
    ("AR time", "ar_mean_s"),
    ("SD time", "sd_mean_s"),
    ("AR ÷ specbench", "ar_over_specbench"),
    ("SD ÷ specbench", "sd_over_specbench"),
    ("speedup", "speedup"),
    ("same tokens", "same_as_specbench"),
]


def cell(field: str, value) -> str:
    if field in ("ar_mean_s", "sd_mean_s") and isinstance(value, float):
        return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.2f} s"
    fields = results.ROOFLINE_BY_NAME if field in results.ROOFLINE_BY_NAME else results.BY_NAME
    return results.cell(field, value, fields) if field in fields else str(value if value is not None else "")


ROOFLINE_COLUMNS = [(f.header, f.name) for f in results.ROOFLINE_TABLE]


def table(rows: list[dict], columns: list[tuple[str, str]]) -> dict:
    return {
        "headers": [h for h, _ in columns],
        "rows": [[cell(f, r.get(f)) for _, f in columns] for r in rows],
    }


def load_text(load: dict, under_load: bool) -> str:
    """'while measured: other processes used 0.03 cores on average · load average 1.02 → 1.10'."""
    if load.get("other_load") is None and load.get("load_average_start") is None:
        return ""
    parts = []
    if load.get("other_load") is not None:
        parts.append(f"other processes used {load['other_load']:.2f} cores on average")
    if load.get("load_average_start") is not None:
        parts.append(f"load average {load['load_average_start']:.2f} → {load['load_average_end']:.2f}")
    return "while measured: " + " · ".join(parts) + (" · UNDER LOAD" if under_load else "")


def data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def render(directory: Path, rows: list[dict], sections: dict, shows: dict, titles: dict, info: dict) -> Path:
    """Write the plots and index.html into `directory`; returns the page's path.
    rows: the report's rows; sections: per section its load and extra results (report.measure);
    shows: section -> the job ids it shows; titles: section -> title; info: pair, battery, times."""
    from specbench.results import plot

    by_job: dict[str, list[dict]] = {}
    for r in rows:
        by_job.setdefault(r.get("report_job"), []).append(r)
    own = lambda section: [
        r for j in shows.get(section, []) for r in by_job.get(j, []) if r.get("implementation") == "specbench"
    ]
    out = []
    for sid, title in titles.items():
        s = {"id": sid, "title": title, "reading": "", "images": [], "tables": []}
        mine = own(sid)
        png = lambda name: directory / f"{sid}-{name}.png"
        if sid == "device":
            s["tables"].append(
                {"headers": ["", ""], "rows": [[k, str(v)] for k, v in info["device"].items()]}
            )
        elif sid == "roofline" and sections.get("roofline", {}).get("rows"):
            rl = sections["roofline"]["rows"]
            s["reading"] = readings.roofline(rl, info["K"])
            plot.plot_roofline(rl, str(png("steps")))
            s["images"].append(png("steps"))
            s["tables"].append(table(rl, ROOFLINE_COLUMNS))
        elif sid in COLUMNS and mine:
            reading, draw = {
                "categories": (
                    readings.categories,
                    lambda p: plot.plot_bars(mine, [r["prompt_id"] for r in mine], p, "by prompt category"),
                ),
                "K": (readings.K_sweep, lambda p: plot.plot_K(mine, p)),
                "temperature": (
                    readings.temperature,
                    lambda p: plot.plot_bars(
                        mine,
                        [
                            f"T={r['temperature']:g}" + (f" p={r['top_p']:g}" if r.get("top_p") else "")
                            for r in mine
                        ],
                        p,
                        "by temperature",
                    ),
                ),
                "drafters": (
                    readings.drafters,
                    lambda p: plot.plot_bars(
                        mine,
                        [r["drafter"] + (" dyn" if r.get("dynamic_K") else "") for r in mine],
                        p,
                        "by drafter",
                    ),
                ),
                "batch": (readings.batch, lambda p: plot.plot_batch(mine, p)),
                "verification": (
                    readings.verification,
                    lambda p: plot.plot_bars(
                        mine,
                        [readings.method_label(r) for r in mine],
                        p,
                        "by verification method (T = 1)",
                    ),
                ),
                "dial": (readings.dial, lambda p: plot.plot_dial(mine, p)),
            }[sid]
            s["reading"] = reading(mine)
            draw(str(png("speedup")))
            s["images"].append(png("speedup"))
            if sid == "categories":
                plot.plot_budget(mine, str(png("budget")))
                s["images"].append(png("budget"))
            s["tables"].append(table(mine, COLUMNS[sid] + COLUMNS["common"]))
            peers = [
                r for j in shows[sid] for r in by_job.get(j, []) if r.get("implementation") != "specbench"
            ]
            if peers:
                s["tables"].append(table(own(sid) + peers, PEER_COLUMNS))
        elif sid == "exactness":
            selftest = sections.get("exactness", {}).get("selftest")
            s["reading"] = readings.exactness(rows, selftest)
            if selftest:
                s["tables"].append({"headers": ["", ""], "rows": [[k, str(v)] for k, v in selftest.items()]})
        s["images"] = [{"src": data_uri(p), "file": p.name} for p in s["images"]]
        s["under_load"] = bool(sections.get(sid, {}).get("under_load")) or any(
            r.get("under_load") for r in mine
        )
        s["load_text"] = load_text(sections.get(sid, {}), s["under_load"])
        out.append(s)
    busy = [s["title"] for s in out if s["under_load"]]
    unclosed = [
        f"{r.get('report_job')}: {budget_gap(r)}"
        for r in rows
        if r.get("implementation", "specbench") == "specbench" and budget_gap(r)
    ]
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("specbench.results", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    html = env.get_template("report.html.j2").render(
        sections=out,
        busy=busy,
        unclosed=unclosed,
        info=info,
        made=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    page = directory / "index.html"
    export.write_text(str(page), html)
    return page
