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
from specbench.results.sections import COMMON_COLUMNS, SECTIONS, Section

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


PARTS_COLUMNS = [(f.header or f.name, f.name) for f in results.PARTS_TABLE]


def table(rows: list[dict], columns: list[tuple[str, str]]) -> dict:
    return {
        "headers": [h for h, _ in columns],
        "rows": [[cell(f, r.get(f)) for _, f in columns] for r in rows],
    }


def pairs(d: dict) -> dict:
    """A two-column table of a dict's keys and values."""
    return {"headers": ["", ""], "rows": [[k, str(v)] for k, v in d.items()]}


def rows_part(s: dict, sec: Section, mine: list[dict], peers: list[dict], directory: Path) -> None:
    """A section of measured rows, into the page's part s: its reading, its plot (bars by
    sec.label, or plot.py's sec.plot), the time budgets where sec.budget, the table of its columns,
    and the peers' table where the rows have peers."""
    from specbench.results import plot

    png = lambda name: directory / f"{sec.id}-{name}.png"
    s["reading"] = sec.reading(mine)
    s["headline"] = sec.headline(mine) if sec.headline else ""
    if sec.label:
        plot.plot_bars(mine, [sec.label(r) for r in mine], str(png("speedup")), sec.bars)
    else:
        getattr(plot, sec.plot)(mine, str(png("speedup")))
    s["images"].append(png("speedup"))
    if sec.budget:
        plot.plot_budget(mine, str(png("budget")))
        s["images"].append(png("budget"))
    s["tables"] += [extra(mine) for extra in sec.tables]
    s["tables"].append(table(mine, list(sec.columns + COMMON_COLUMNS)))
    if peers:
        s["tables"].append(table(mine + peers, PEER_COLUMNS))


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


def roofline_part(s: dict, rl: list[dict], K: int, directory: Path) -> None:
    """The roofline section: its reading, plot and table of steps, and of the Pallas kernels alone."""
    from specbench.results import plot

    path = directory / "roofline-steps.png"
    steps = [r for r in rl if r.get("part", "step") == "step"]
    s["reading"] = readings.roofline(steps, K)
    plot.plot_roofline(steps, str(path))
    s["images"].append(path)
    s["tables"].append(
        table(steps, [(f.header, f.name) for f in results.filled(results.ROOFLINE_TABLE, steps)])
    )
    if parts := [r for r in rl if r.get("part", "step") != "step"]:
        s["tables"].append(table(parts, PARTS_COLUMNS))


def render(directory: Path, rows: list[dict], sections: dict, shows: dict, info: dict) -> Path:
    """Write the plots and index.html into `directory`, a part for each of sections.SECTIONS;
    returns the page's path. rows: the report's rows; sections: per section id its load and extra
    results (report.measure); shows: section id -> the job ids it shows; info: pair, battery, times."""
    by_job: dict[str, list[dict]] = {}
    for r in rows:
        by_job.setdefault(r.get("report_job"), []).append(r)
    shown = lambda sid: [r for j in shows.get(sid, []) for r in by_job.get(j, [])]
    out = []
    for sec in SECTIONS:
        mine = [r for r in shown(sec.id) if r.get("implementation") == "specbench"]
        s = {"id": sec.id, "title": sec.title, "reading": "", "headline": "", "images": [], "tables": []}
        if sec.kind == "rows" and mine:
            peers = [r for r in shown(sec.id) if r.get("implementation") != "specbench"]
            rows_part(s, sec, mine, peers, directory)
        elif sec.kind == "rows" and sec.id in info.get("left_out", {}):
            s["reading"] = info["left_out"][sec.id]
        elif sec.kind == "device":
            s["tables"].append(pairs(info["device"]))
        elif sec.kind == "roofline" and sections.get("roofline", {}).get("rows"):
            roofline_part(s, sections["roofline"]["rows"], info["K"], directory)
        elif sec.kind == "exactness":
            selftest = sections.get("exactness", {}).get("selftest")
            s["reading"] = readings.exactness(rows, selftest)
            if selftest:
                s["tables"].append(pairs(selftest))
        s["images"] = [{"src": data_uri(p), "file": p.name} for p in s["images"]]
        s["under_load"] = bool(sections.get(sec.id, {}).get("under_load")) or any(
            r.get("under_load") for r in mine
        )
        s["load_text"] = load_text(sections.get(sec.id, {}), s["under_load"])
        out.append(s)
    headlines = [s["headline"] for s in out if s["headline"]]
    busy = [s["title"] for s in out if s["under_load"]]
    unclosed = [
        (r.get("report_job"), budget_gap(r))
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
        headlines=headlines,
        busy=busy,
        unclosed=unclosed,
        info=info,
        made=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    page = directory / "index.html"
    export.write_text(str(page), html)
    return page
