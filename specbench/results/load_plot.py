"""A sweep over request rates drawn (results/arrivals.py): TPOT at p50 and p99, and goodput (with
an SLO; else the requests served a second), of AR and SD against the rate (matplotlib)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from specbench.results import arrivals


def plot_load(rows: list[dict], output: str) -> None:
    """Two panels against the request rate: TPOT p50 and p99, then goodput (or throughput)."""
    fig, (ax_t, ax_g) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, curve in arrivals.curves(rows).items():
        name = " ".join(f"{n}={v}" for n, v in label)
        rates = [r["request_rate"] for r in curve]
        good = "goodput_rps" if curve[0].get("slo") else "served_rps"
        for m, style in (("ar", "s:"), ("sd", "o-")):
            p50 = [1e3 * (r.get(f"{m}_tpot_p50_s") or float("nan")) for r in curve]
            p99 = [1e3 * (r.get(f"{m}_tpot_p99_s") or float("nan")) for r in curve]
            line = ax_t.plot(rates, p50, style, label=f"{m.upper()} p50 {name}")[0]
            ax_t.plot(rates, p99, style, alpha=0.5, color=line.get_color(), label=f"{m.upper()} p99 {name}")
            ax_g.plot(rates, [r.get(f"{m}_{good}") for r in curve], style, label=f"{m.upper()} {name}")
    slo = next((r.get("slo") for r in rows if r.get("slo")), None)
    ax_t.set(xlabel="request rate (requests/s)", ylabel="TPOT (ms)", title="time per output token")
    ax_g.set(
        xlabel="request rate (requests/s)",
        ylabel="requests/s",
        title=f"goodput under {slo}" if slo else "requests served a second (no SLO)",
    )
    for ax in (ax_t, ax_g):
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    lines = arrivals.stop_lines(rows)
    fig.suptitle("; ".join(lines) if lines else "speculation under load", fontsize=9)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)
