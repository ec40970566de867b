"""Speedup against K, or against batch size when the file varies it, measured beside the theory
curve (matplotlib, extra "plot")."""

from __future__ import annotations

from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from specbench.results import schema as results
from specbench.results import theory


def plot_rows(rows: list[dict], output: str) -> None:
    """Against the request rate when the rows vary it (load_plot), against batch size when they
    vary that (plot_batch), else against K (plot_K)."""
    if len({r.get("request_rate") for r in rows if r.get("request_rate")}) > 1:
        from specbench.results.load_plot import plot_load

        return plot_load(rows, output)
    if len({r.get("batch", 1) for r in rows}) > 1:
        plot_batch(rows, output)
    else:
        plot_K(rows, output)


def plot_batch(rows: list[dict], output: str) -> None:
    """Speedup against batch size, measured and as the refined theory predicts it from the step
    times measured at each batch size; and the throughput of AR and SD (all sequences' tokens/s)."""
    fig, (ax_s, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (draft, K, temp, top_p, mix), curve in sorted(
        theory.batch_curves(rows).items(), key=lambda g: str(g[0])
    ):
        label = f"{draft} K={K} T={temp:g}" + (f" top-p={top_p:g}" if top_p else "") + theory.MIX_LABEL[mix]
        Bs, measured, refined = curve["batch"], curve["speedup"], curve["refined_speedup"]
        line = ax_s.plot(Bs, measured, "o-", label=f"measured {label}")[0]
        ax_s.plot(
            Bs, refined, "x--", color=line.get_color(), label=f"refined theory (step times at each B) {label}"
        )
        for name, values, style in (("measured", measured, "o"), ("theory", refined, "x")):
            b = theory.crossover(Bs, values)
            if b is not None:
                ax_s.plot([b], [1.0], style, ms=11, mfc="none", color=line.get_color())
                ax_s.annotate(
                    f"{name} crosses 1 at B≈{b:.1f}",
                    (b, 1.0),
                    textcoords="offset points",
                    xytext=(4, 8 if name == "measured" else -14),
                    fontsize=7,
                    color=line.get_color(),
                )
        ax_t.plot(Bs, curve["sd_tokens_per_s"], "o-", color=line.get_color(), label=f"SD {label}")
        ax_t.plot(Bs, curve["ar_tokens_per_s"], "s:", color=line.get_color(), label=f"AR {label}")
    ax_s.axhline(1.0, color="grey", lw=0.8)
    sizes = sorted({r.get("batch", 1) for r in rows})
    for ax in (ax_s, ax_t):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])  # the batch sizes measured, as plain numbers
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_s.set(xlabel="batch size B", ylabel="speedup (AR time / SD time)", title="speedup against batch size")
    ax_t.set(xlabel="batch size B", ylabel="tokens/s, all sequences", title="throughput")
    _save(fig, rows, output)


DRAFT_DETAILS = ("drafter", "ngram", "draft_layers")  # named by the draft itself: lookup(n=3), target[:2]


def plot_K(rows: list[dict], output: str) -> None:
    """One series per combination of the settings that vary besides K (draft, prompt,
    temperature, ...): measured speedup, the refined theory, and Leviathan's curve from the
    series' mean alpha and c = t_draft / t_target; one legend below both panels."""
    series = results.varying(rows, exclude=("K", *DRAFT_DETAILS))
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r.get(n) for n in series)].append(r)
    legend_rows = -(-len(groups) // 3)
    fig, (ax_s, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2 + 0.2 * legend_rows))
    if len(groups) > 10:  # past the default cycle's 10 colours, 20 distinct ones
        for ax in (ax_s, ax_t):
            ax.set_prop_cycle(color=plt.cm.tab20.colors)
    for values, group in sorted(groups.items(), key=lambda g: str(g[0])):
        label = " · ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) or "all rows"
        Ks = sorted({r["K"] for r in group})
        mean = lambda col, k: float(np.mean([r[col] for r in group if r["K"] == k]))
        line = ax_s.plot(Ks, [mean("speedup", k) for k in Ks], "o-", label=label)[0]
        ax_s.plot(Ks, [mean("refined_speedup", k) for k in Ks], "x:", color=line.get_color())
        ax_t.plot(Ks, [mean("tokens_per_round", k) for k in Ks], "o-", color=line.get_color())
        alphas = [r["alpha"] for r in group if r.get("alpha") is not None]  # None: no draft was ever tested
        if not alphas:
            continue
        alpha = float(np.mean(alphas))
        c = float(np.mean([r["t_draft_s"] / r["t_target_s"] for r in group]))
        grid = np.arange(1, max(Ks) + 1)
        ax_s.plot(grid, [theory.speedup_from_alpha(alpha, k, c) for k in grid], "--", color=line.get_color())
        ax_t.plot(grid, [theory.expected_tokens(alpha, k) for k in grid], "--", color=line.get_color())
    ax_s.axhline(1.0, color="grey", lw=0.8)
    K_axis = "K (draft tokens per round)"
    ax_s.set(
        xlabel=K_axis,
        ylabel="speedup (AR time / SD time)",
        title="speedup: measured o-, refined x:, theory --",
    )
    ax_t.set(xlabel=K_axis, ylabel="tokens per round", title="tokens per round: measured o-, theory --")
    Ks = sorted({r["K"] for r in rows})
    for ax in (ax_s, ax_t):
        ax.grid(alpha=0.3)
        ax.set_xticks(range(1, max(Ks) + 1) if max(Ks) <= 16 else Ks)
    if series:  # one legend for both panels, below them: the series are the same
        fig.legend(
            loc="lower center",
            ncol=min(3, len(groups)),
            fontsize=7,
            title=" · ".join(series),
            title_fontsize=7,
            frameon=False,
        )
    _save(fig, rows, output, bottom=0.05 + 0.045 * legend_rows / (1 + 0.05 * legend_rows) if series else 0)


BUDGET_FIELDS = (  # every field plot_budget draws with
    "n_tokens",
    "K",
    "batch_rounds",
    "t_ar_start_s",
    "t_ar_token_s",
    "t_sd_start_s",
    "t_draft_s",
    "t_verify_s",
    "t_overhead_s",
    "ar_residual_s",
    "sd_residual_s",
)


def missing_for_budget(rows: list[dict]) -> str | None:
    """Why plot_budget cannot draw these rows, naming the first field it needs that a row lacks or
    holds no number in; None where it can."""
    for i, r in enumerate(rows):
        for f in BUDGET_FIELDS:
            value = r.get(f)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
                return f"row {i + 1} has no {f}" if f not in r else f"row {i + 1} has {f} = {value!r}"
    return None


def plot_budget(rows: list[dict], output: str) -> None:
    """Where the time goes, per row: AR and SD side by side as stacked bars of their measured
    parts (start; AR's N-1 tokens; SD's drafts, verifies and other per-round work), with the
    residual on top (hatched; below the bar's top when the parts overshoot the clock)."""
    series = results.varying(rows, exclude=DRAFT_DETAILS)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4.6))
    colours = {
        "start": "#8c8c8c",
        "tokens": "#4c72b0",
        "drafts": "#dd8452",
        "verifies": "#55a868",
        "other": "#c44e52",
    }
    labelled = set()
    label = lambda name: None if name in labelled or labelled.add(name) else name  # each name once
    for i, r in enumerate(rows):
        rounds, ms = r["batch_rounds"], 1e3
        ar = {"start": r["t_ar_start_s"], "tokens": (r["n_tokens"] - 1) * r["t_ar_token_s"]}
        sd = {
            "start": r["t_sd_start_s"],
            "drafts": rounds * r["K"] * r["t_draft_s"],
            "verifies": rounds * r["t_verify_s"],
            "other": rounds * max(0.0, r["t_overhead_s"]),
        }
        for x, parts, residual in ((3 * i, ar, r["ar_residual_s"]), (3 * i + 1, sd, r["sd_residual_s"])):
            bottom = 0.0
            for name, seconds in parts.items():
                ax.bar(x, seconds * ms, bottom=bottom, color=colours[name], label=label(name))
                bottom += seconds * ms
            ax.bar(
                x,
                residual * ms,
                bottom=bottom,
                color="white",
                edgecolor="black",
                hatch="//",
                label=label("residual"),
            )
    ticks = [3 * i + 0.5 for i in range(len(rows))]
    value = lambda r, n: f"K={r['K']}" if n == "K" else str(r.get(n))
    names = [" · ".join(value(r, n) for n in series) or f"row {i + 1}" for i, r in enumerate(rows)]
    ax.set_xticks(ticks, [f"AR | SD\n{n}" for n in names], fontsize=7)
    ax.set(ylabel="ms (median wall time = parts + residual)", title="where the time goes")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, rows, output)


def _save(fig, rows: list[dict], output: str, bottom: float = 0.0) -> None:
    """Title the figure with what all rows share (pair, device), leave `bottom` of it to a legend,
    and write it."""
    shared = [n for n in ("draft", "target", "device") if len({str(r.get(n)) for r in rows}) == 1]
    fig.suptitle(" · ".join(f"{n} {rows[0].get(n)}" for n in shared), fontsize=9)
    fig.tight_layout(rect=(0, min(bottom, 0.6), 1, 1))
    fig.savefig(output, dpi=120)
    plt.close(fig)


def plot_bars(rows: list[dict], labels: list[str], output: str, title: str) -> None:
    """One bar per row: measured speedup with ±σ, the accounted and refined predictions beside it
    as markers; a line at 1 (no gain)."""
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 3.8))
    x = np.arange(len(rows))
    ax.bar(
        x,
        [r["speedup"] for r in rows],
        yerr=[r.get("speedup_std") or 0 for r in rows],
        capsize=3,
        color="#4c72b0",
        label="measured (± σ)",
    )
    for field, marker, name in (("accounted_speedup", "D", "accounted"), ("refined_speedup", "x", "refined")):
        values = [r.get(field) for r in rows]
        if any(v is not None for v in values):
            ax.plot(x, [np.nan if v is None else v for v in values], marker, color="black", ls="", label=name)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, labels, rotation=20 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center")
    ax.set(ylabel="speedup (AR time / SD time)", title=title)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, rows, output)


def plot_requests(rows: list[dict], output: str) -> None:
    """The distribution of time per output token over the rows' requests, AR's beside SD's, as
    empirical CDFs (results/requests.py), with their p50 and p95 marked."""
    recs = [r for row in rows for r in row.get("requests") or []]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for m, name, color in (("ar", "AR", "#dd8452"), ("sd", "SD", "#4c72b0")):
        values = np.sort([r[f"{m}_tpot_s"] * 1e3 for r in recs])
        if values.size:
            ax.step(
                values, np.arange(1, values.size + 1) / values.size, where="post", color=color, label=name
            )
            for p, style in ((50, ":"), (95, "--")):
                ax.axvline(np.percentile(values, p), color=color, ls=style, lw=0.8)
    ax.set(
        xlabel="time per output token (ms); dotted p50, dashed p95",
        ylabel="share of requests",
        title="TPOT per request",
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    _save(fig, rows, output)


def plot_dial(rows: list[dict], output: str) -> None:
    """The dial (T = 0): measured speedup against measured α, and Leviathan et al.'s speedup at
    c = 0 with the run's verify cost, E[tokens](α, K) × t_target / t_verify (theory.expected_tokens)."""
    rows = sorted(rows, key=lambda r: r["acceptance"])
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.errorbar(
        [r["alpha"] for r in rows],
        [r["speedup"] for r in rows],
        yerr=[r.get("speedup_std") or 0 for r in rows],
        fmt="o",
        capsize=3,
        label="measured (± σ)",
    )
    ratio = float(np.median([r["t_target_s"] / r["t_verify_s"] for r in rows]))
    alphas = np.linspace(0, 1, 101)
    K = rows[0]["K"]
    ax.plot(
        alphas,
        [theory.expected_tokens(a, K) * ratio for a in alphas],
        color="black",
        lw=1,
        label=f"theory, c = 0 (K = {K}, t_target/t_verify = {ratio:.2f})",
    )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="α (acceptance per draft)", ylabel="speedup (AR time / SD time)", title="acceptance dial")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    _save(fig, rows, output)


def plot_roofline(rows: list[dict], output: str) -> None:
    """Per model: step time t(n) against tokens per step, with its two roofs (memory: bytes over the
    read bandwidth, flat in n; compute: FLOPs over the product rate, growing with n) and the step's
    time over its limit, max of the two."""
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(10, 3.8))
    for model in dict.fromkeys((r["model"], r.get("kernels", "xla")) for r in rows):
        mine = [r for r in rows if (r["model"], r.get("kernels", "xla")) == model]
        label = f"{model[0]} ({model[1]})"
        n = [r["n_tokens_per_step"] for r in mine]
        line = ax_t.plot(n, [r["t_step_s"] * 1e3 for r in mine], "o-", label=label)[0]
        color = line.get_color()
        ax_t.plot(n, [r["bound_s"] * 1e3 for r in mine], "--", color=color, lw=0.8)
        if mine[0].get("compute_s") is not None:
            ax_t.plot(n, [r["compute_s"] * 1e3 for r in mine], ":", color=color, lw=0.8)
            ax_l.plot(n, [r["t_over_limit"] for r in mine], "o-", color=color, label=label)
    ax_t.set(
        xlabel="tokens per step",
        ylabel="ms",
        title="step time; dashed: memory roof, dotted: compute roof",
        ylim=(0, None),
    )
    ax_l.axhline(1.0, color="grey", lw=0.8)
    ax_l.set(
        xlabel="tokens per step", ylabel="t / max(roofs)", title="step time over its limit", ylim=(0, None)
    )
    for ax in (ax_t, ax_l):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)
