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


def slo_unmet(row: dict) -> bool:
    """Whether the row had an SLO that neither AR nor SD met for a single request (goodput 0 and 0):
    goodput then cannot tell them apart."""
    return bool(row.get("slo")) and not (row.get("sd_goodput_rps") or row.get("ar_goodput_rps"))


def pays(row: dict) -> bool | None:
    """Whether SD served this row's requests better than AR: more goodput where an SLO was set and
    met by either; else (no SLO, or one that neither met) a lower TPOT at p50, and where an SLO went
    unmet, at least AR's served rate too (within 1%); None where the row lacks the numbers."""
    if row.get("slo") and not slo_unmet(row):
        sd, ar = row.get("sd_goodput_rps"), row.get("ar_goodput_rps")
        return None if sd is None or ar is None else sd > ar
    sd, ar = row.get("sd_tpot_p50_s"), row.get("ar_tpot_p50_s")
    if sd is None or ar is None:
        return None
    if not slo_unmet(row):
        return sd < ar
    sd_rps, ar_rps = row.get("sd_served_rps"), row.get("ar_served_rps")
    return None if sd_rps is None or ar_rps is None else sd < ar and sd_rps >= 0.99 * ar_rps


def stop_lines(rows: list[dict]) -> list[str]:
    """For each curve over two or more rates: the lowest rate at which SD stopped paying, or that it
    paid at every rate measured, and by what measure (goodput, unless neither side met the SLO)."""
    lines = []
    for label, curve in curves(rows).items():
        if len(curve) < 2:
            continue
        unmet = [r["request_rate"] for r in curve if slo_unmet(r)]
        if not curve[0].get("slo"):
            measure = "TPOT p50"
        elif not unmet:
            measure = "goodput"
        elif len(unmet) == len(curve):
            measure = (
                f"served rate and TPOT p50: neither AR nor SD met the SLO ({curve[0]['slo']}) at any rate"
            )
        else:
            at = ", ".join(f"{x:g}" for x in unmet) + " requests/s"
            measure = (
                f"goodput where either met the SLO; neither AR nor SD met it ({curve[0]['slo']}) at {at}, "
                "judged there by served rate and TPOT p50"
            )
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
