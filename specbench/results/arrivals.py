"""Speculation under load: a sweep over request rates (--request-rate 1,2,4,8, served as requests
arrive: measure/serving.py) read as curves of AR and SD against the rate, and the rate at which SD
stops paying (the speedup shrinking as load rises: "Performance or Illusion?", arXiv 2601.11580).
With an SLO the measure is goodput, the requests a second that met it; without one, TPOT at p50.
NumPy only."""

from __future__ import annotations

from specbench.results import schema as results


def curves(rows: list[dict]) -> dict[tuple, list[dict]]:
    """The rows served at a rate, grouped by every other setting that varies: {label: rows by rate}."""
    served = [r for r in rows if r.get("request_rate")]
    series = results.varying(served, exclude=("request_rate",))
    out: dict[tuple, list[dict]] = {}
    for r in served:
        out.setdefault(tuple((n, r.get(n)) for n in series), []).append(r)
    return {k: sorted(v, key=lambda r: r["request_rate"]) for k, v in out.items()}


def pays(row: dict) -> bool | None:
    """Whether SD served this row's requests better than AR: more goodput where an SLO was set,
    else a lower TPOT at p50; None where the row lacks the numbers."""
    if row.get("slo"):
        sd, ar = row.get("sd_goodput_rps"), row.get("ar_goodput_rps")
        return None if sd is None or ar is None else sd > ar
    sd, ar = row.get("sd_tpot_p50_s"), row.get("ar_tpot_p50_s")
    return None if sd is None or ar is None else sd < ar


def stop_lines(rows: list[dict]) -> list[str]:
    """For each curve over two or more rates: the lowest rate at which SD stopped paying, or that it
    paid at every rate measured."""
    lines = []
    for label, curve in curves(rows).items():
        if len(curve) < 2:
            continue
        measure = "goodput" if curve[0].get("slo") else "TPOT p50"
        name = " · ".join(f"{n} {v}" for n, v in label)
        rates = [r["request_rate"] for r in curve]
        stopped = next((r["request_rate"] for r in curve if pays(r) is False), None)
        said = (
            f"SD pays at every rate measured ({rates[0]:g}–{rates[-1]:g} requests/s)"
            if stopped is None
            else f"SD stops paying at {stopped:g} requests/s"
            + (f" (it paid up to {max(x for x in rates if x < stopped):g})" if stopped > rates[0] else "")
        )
        lines.append(f"{name + ': ' if name else ''}{said}, by {measure}")
    return lines
