"""The result row: one schema that builds every row and drives every output of it.

Each Field says what a column is and where it shows: in CSV (the scalars), at which place in the
Markdown export and in the sweep table (with its header), whether it keys a sweep row (a
setting; `old` is its value in rows written before it existed), whether `specbench plot` needs
it, and how many decimals a table gives it. export.py, plot.py, the sweep table and its resume
key all read this list; nothing else names the columns. No JAX here: plot, theory and the
exports start fast.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specbench.prompts import prompt_hash
from specbench.results import theory


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    kind: type = float
    csv: bool = True  # a scalar column of CSV and Markdown; False: JSON only
    md: int = 0  # place in the Markdown export (0: not there)
    table: int = 0  # place in the sweep table (0: not there)
    header: str = ""  # its sweep-table header
    key: bool = False  # a setting that tells sweep rows apart
    old: object = None  # a key's value in rows written before the field existed
    plot: bool = False  # `specbench plot` needs it
    fmt: str = ".2f"  # table cells: a format spec, "ms" (seconds shown in ms) or "%"


F = Field
FIELDS = [
    # context
    F("specbench_version", str),
    F("git_commit", str),
    F("jax_version", str),
    F("device", str),
    F("timestamp", str),
    F("implementation", str, md=1, table=1, header="implementation", key=True, old="specbench"),
    F("implementation_version", str),
    F("dtype", str, key=True),
    F("kernels", str, key=True, old="xla"),
    F("draft", str, md=3, table=2, header="drafter", key=True),
    F("target", str, md=4, key=True),
    F("drafter", str, md=2, key=True, old="model"),
    F("ngram", int, key=True),
    F("draft_layers", int, key=True),
    F("dynamic_K", bool, key=True, old=False),
    F("draft_confidence", float, key=True),
    F("K", int, md=7, table=5, header="K", key=True, plot=True),
    F("temperature", float, md=8, table=6, header="T", key=True, plot=True, fmt="g"),
    F("top_k", int, key=True),
    F("top_p", float, md=9, table=7, header="top-p", key=True, fmt="g"),
    F("seed", int, key=True),
    F("prompt_id", str, md=5, table=3, header="prompt", key=True),
    F("prompt_sha", str),
    F("n_tokens", int, key=True),
    F("repeats", int),
    F("warmup", int),
    F("loop", str, key=True),
    F("batch", int, md=6, table=4, header="batch", key=True, old=1),
    # wall times of the repeats (mean ± σ, range, median), AR then SD
    *[F(f"ar_{s}") for s in ("mean_s", "std_s", "min_s", "max_s", "median_s")],
    F("ar_tokens_per_s", md=10, table=8, header="AR tok/s", fmt=".1f"),
    *[F(f"sd_{s}") for s in ("mean_s", "std_s", "min_s", "max_s", "median_s")],
    F("sd_tokens_per_s", md=11, table=9, header="SD tok/s", fmt=".1f"),
    F("speedup", md=12, table=10, header="speedup", plot=True),
    F("speedup_std", table=11, header="±"),
    # a peer's row (peers.py): its times over specbench's own on the same method, same run
    F("ar_over_specbench"),
    F("sd_over_specbench"),
    # acceptance
    F("n_rounds", int),
    F("tokens_per_round", md=13, table=12, header="tok/round", plot=True),
    F("mean_drafted"),
    F("r", fmt=".3f"),
    F("alpha", md=14, table=15, header="α", plot=True, fmt=".3f"),
    F("accept_rate_drafted"),
    F("batch_rounds", int),
    F("tokens_per_batch_round", table=13, header="tok/batch-round"),
    F("idle_fraction", table=14, header="idle", fmt="%"),
    # step times and theory
    F("t_draft_s", plot=True, fmt="ms"),
    F("t_target_s", table=16, header="t_target", plot=True, fmt="ms"),
    F("t_verify_s", table=17, header="t_verify", fmt="ms"),
    F("t_round_s", fmt="ms"),
    F("t_overhead_s", fmt="ms"),
    F("t_overhead_err_s", fmt="ms"),
    F("t_ar_token_s", fmt="ms"),
    # the time budget: each wall time as the parts measured on their own, and what they leave
    F("t_ar_start_s", fmt="ms"),
    F("t_sd_start_s", fmt="ms"),
    F("ar_accounted_s", fmt="ms"),
    F("sd_accounted_s", fmt="ms"),
    F("ar_residual_s", fmt="ms"),
    F("sd_residual_s", fmt="ms"),
    F("theory_speedup", md=15, table=18, header="theory"),
    F("refined_speedup", md=16, table=19, header="refined", plot=True),
    F("round_model_speedup"),
    F("accounted_speedup", md=18),
    F("measured_over_theory"),
    F("measured_over_refined", md=17),
    F("measured_over_accounted", md=19),
    F("measured_over_accounted_err"),
    F("tokens_per_round_iid"),
    F("tokens_per_round_positional"),
    F("best_K_predicted", int),
    F("compile_s"),
    # how busy the machine was while the row was measured (load.py): other processes, in cores
    F("other_load", fmt=".2f"),
    F("under_load", bool),
    F("report_job", str),  # `specbench report`: the battery's name of the job
    F("identical", bool, table=20, header="T=0 same"),
    F("same_as_specbench", bool),
    F("first_difference", str),
    # JSON only; for a batch (B > 1) prompt, token ids and texts are lists, one entry per sequence
    F("prompt", object, csv=False),
    F("ar_times_s", list, csv=False),
    F("sd_times_s", list, csv=False),
    F("accepted_hist", list, csv=False),
    F("per_position_acceptance", list, csv=False),
    F("drafted_hist", list, csv=False),
    F("ar_token_ids", list, csv=False),
    F("sd_token_ids", list, csv=False),
    F("batch_prompt_ids", list, csv=False),
    F("ar_text", object, csv=False),
    F("sd_text", object, csv=False),
]
BY_NAME = {f.name: f for f in FIELDS}

# A roofline row (measure/roofline.py, `specbench roofline`, the report's roofline section): one
# step shape of one model, against both roofs. `table` places a column in the command's table and
# the report's.
CONTEXT = FIELDS[:5]
ROOFLINE_FIELDS = [
    *CONTEXT,
    F("model", str, table=1, header="model"),
    F("weights", str),
    F("dtype", str, table=2, header="dtype"),
    F("kernels", str, table=3, header="kernels"),
    F("layout", str),
    F("layout_extra_bytes", int, table=4, header="+MB", fmt="MB"),
    F("context", int),
    F("n_tokens_per_step", int, table=5, header="tokens"),
    F("t_step_s", table=6, header="t_step", fmt="ms"),
    F("bound_s", table=7, header="memory roof", fmt="ms"),
    F("compute_s", table=8, header="compute roof", fmt="ms"),
    F("limit_s", fmt="ms"),
    F("limited_by", str),
    F("t_over_limit", table=9, header="t/limit"),
    F("fraction_of_bound", fmt="%"),
    F("t_over_t1", table=10, header="t(n)/t(1)"),
    F("bytes_per_step", int, fmt="MB"),
    F("flops_per_step", fmt="G"),
    F("achieved_gbps", table=11, header="GB/s", fmt=".1f"),
    F("achieved_gflops", fmt=".1f"),
    F("peak_gbps", fmt=".0f"),
    F("measured_gbps", fmt=".1f"),
    F("bound_gbps", fmt=".1f"),
    F("bound_source", str),
    F("matmul_gflops", fmt=".0f"),
    F("t_plain_step_s", fmt="ms"),
    F("plain_over_loop", table=12, header="plain/loop"),
]
ROOFLINE_BY_NAME = {f.name: f for f in ROOFLINE_FIELDS}
ROOFLINE_COLUMNS = [f.name for f in ROOFLINE_FIELDS]
ROOFLINE_TABLE = [f for f in sorted((f for f in ROOFLINE_FIELDS if f.table), key=lambda f: f.table)]
CSV_COLUMNS = [f.name for f in FIELDS if f.csv]
MARKDOWN_COLUMNS = [f.name for f in sorted((f for f in FIELDS if f.md), key=lambda f: f.md)]
TABLE_COLUMNS = [f.name for f in sorted((f for f in FIELDS if f.table), key=lambda f: f.table)]
SWEEP_KEY = tuple(f.name for f in FIELDS if f.key)
SETTINGS = [f.name for f in FIELDS[: [f.name for f in FIELDS].index("batch") + 1]]  # context and settings
PLOT_FIELDS = tuple(f.name for f in FIELDS if f.plot)


def sweep_key(row: dict) -> tuple:
    """The settings that tell a sweep row apart (rows of older versions read with each key's `old`)."""
    return tuple(row.get(name, BY_NAME[name].old) for name in SWEEP_KEY)


def varying(rows: list[dict], exclude: tuple[str, ...] = ()) -> list[str]:
    """The settings (SWEEP_KEY fields) that take more than one value across the rows."""
    return [
        n for n in SWEEP_KEY if n not in exclude and len({str(r.get(n, BY_NAME[n].old)) for r in rows}) > 1
    ]


def cell(column: str, value, fields: dict | None = None) -> str:
    """A table cell with the decimals its column deserves (tokens/s 1, speedups 2, alpha 3), its
    Field found in `fields` (default: the result row's)."""
    if value is None:
        return ""
    field = (BY_NAME if fields is None else fields).get(column)
    fmt = field.fmt if field else ".2f"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, int) and fmt != "MB")
    ):
        return str(value)
    if fmt == "ms":
        return f"{value * 1e3:.2f} ms"
    if fmt == "%":
        return f"{value:.0%}"
    if fmt == "MB":
        return f"{value / 1e6:.1f}"
    if fmt == "G":
        return f"{value / 1e9:.2f}"
    return format(value, fmt)


def drafter_settings(drafter) -> dict:
    """The drafter's settings as row fields (drafters.Drafter, read by attribute)."""
    if drafter is None:
        return {
            "drafter": "model",
            "ngram": None,
            "draft_layers": None,
            "dynamic_K": False,
            "draft_confidence": None,
        }
    return {
        "drafter": drafter.kind,
        "ngram": drafter.ngram if drafter.kind == "lookup" else None,
        "draft_layers": drafter.config.n_layer if drafter.kind == "layerskip" else None,
        "dynamic_K": drafter.confidence is not None,
        "draft_confidence": drafter.confidence,
    }


def summarize(times: list[float]) -> dict[str, float]:
    """mean, σ (0 for one value), min, max and median of per-repeat seconds."""
    t = np.asarray(times)
    return {
        "mean_s": float(t.mean()),
        "std_s": float(t.std(ddof=1)) if len(t) > 1 else 0.0,
        "min_s": float(t.min()),
        "max_s": float(t.max()),
        "median_s": float(np.median(t)),
    }


def result_row(
    res,
    *,
    draft: str,
    dtype: str,
    prompt_id: str,
    prompt: str | list[str],
    context: dict,
    decode=None,
    batch_prompt_ids: list[str] | None = None,
) -> dict:
    """One flat row, in FIELDS' order: the context, the measurements, and the theory from the same
    measurements. `res` is a bench.BenchmarkResult.

    For a batch (res.batch = B > 1) `prompt` is the list of the B prompts, and the JSON-only
    prompt, token id and text fields are lists with one entry per sequence; tokens/s count all
    B x N tokens, and every step time is the batch's.
    """
    c, st, B = res.config, res.stats, res.batch
    K, warp, N = c.K, c.warp, c.n_tokens
    ar, sd = summarize(res.ar_times_s), summarize(res.sd_times_s)
    speedups = np.asarray(res.ar_times_s) / np.asarray(res.sd_times_s)
    speedup = float(speedups.mean())
    seed_theory = theory.speedup_from_r(st.r, K, res.t_draft_s, res.t_target_s)
    # a batch waits for its slowest sequence: what it yields per round it runs (one sequence: tokens/round)
    refined = theory.refined_speedup(
        st.tokens_per_batch_round, K, res.t_draft_s, res.t_target_s, res.t_verify_s
    )
    values = {
        **context,
        "implementation": "specbench",
        "implementation_version": context.get("specbench_version"),
        "dtype": dtype,
        "kernels": res.kernels,
        "draft": draft,
        "target": c.target.name,
        **drafter_settings(c.drafter),
        "K": K,
        "temperature": warp.temperature,
        "top_k": warp.top_k,
        "top_p": warp.top_p,
        "seed": c.seed,
        "prompt_id": prompt_id,
        "prompt_sha": prompt_hash(prompt if isinstance(prompt, str) else "\n".join(prompt)),
        "n_tokens": N,
        "repeats": c.repeats,
        "warmup": c.warmup,
        "loop": "device" if c.device_loop else "host",
        "batch": B,
        **{f"ar_{k}": v for k, v in ar.items()},
        **{f"sd_{k}": v for k, v in sd.items()},
        "ar_tokens_per_s": B * N / ar["mean_s"],
        "sd_tokens_per_s": B * N / sd["mean_s"],
        "speedup": speedup,
        "speedup_std": float(speedups.std(ddof=1)) if len(speedups) > 1 else 0.0,
        "n_rounds": st.n_rounds,
        "tokens_per_round": st.tokens_per_round,
        "r": st.r,
        "alpha": st.alpha,
        "batch_rounds": st.rounds_run,
        "tokens_per_batch_round": st.tokens_per_batch_round,
        "idle_fraction": st.idle_fraction,
        "accept_rate_drafted": st.accept_rate_drafted,
        "t_draft_s": res.t_draft_s,
        "t_target_s": res.t_target_s,
        "t_verify_s": res.t_verify_s,
        "t_round_s": res.t_round_s,
        "t_overhead_s": res.t_round_s - K * res.t_draft_s - res.t_verify_s,
        "t_overhead_err_s": res.t_overhead_err_s,
        "t_ar_token_s": res.t_ar_token_s,
        "theory_speedup": seed_theory,
        "refined_speedup": refined,
        # stragglers hold a batch back: the rounds it runs, not each sequence's own, cost time
        "round_model_speedup": st.tokens_per_batch_round * res.t_ar_token_s / res.t_round_s,
        "measured_over_theory": speedup / seed_theory,
        "measured_over_refined": speedup / refined,
        **budget(res, ar["median_s"], sd["median_s"]),
        # medians on both sides, as the residuals have them: one slow repeat moves neither
        "measured_over_accounted": (ar["median_s"] / sd["median_s"]) / (budget_ar(res) / budget_sd(res)),
        "measured_over_accounted_err": measured_over_accounted_err(res),
        "tokens_per_round_iid": theory.expected_tokens(st.alpha, K) if st.alpha == st.alpha else None,
        "tokens_per_round_positional": theory.expected_tokens_positional(st.per_position),
        "best_K_predicted": best_K_predicted(res, st.alpha),
        "compile_s": res.compile_s,
        "other_load": res.load.get("other_load"),
        "under_load": res.load.get("under_load"),
        "identical": (res.ar_tokens == res.sd_tokens) if warp.temperature == 0 else None,
        "prompt": prompt,
        "ar_times_s": res.ar_times_s,
        "sd_times_s": res.sd_times_s,
        "accepted_hist": st.accepted_hist.tolist(),
        "per_position_acceptance": st.per_position,
        "drafted_hist": st.drafted_hist.tolist() if st.drafted_hist is not None else None,
        "mean_drafted": float(np.dot(np.arange(K + 1), st.drafted_hist) / max(1, st.n_rounds))
        if st.drafted_hist is not None
        else float(K),
        "ar_token_ids": res.ar_tokens,
        "sd_token_ids": res.sd_tokens,
    }
    if B > 1:
        values["batch_prompt_ids"] = batch_prompt_ids
    if decode is not None:
        text = decode if B == 1 else (lambda seqs: [decode(ids) for ids in seqs])
        values["ar_text"], values["sd_text"] = text(res.ar_tokens), text(res.sd_tokens)
    return {f.name: values[f.name] for f in FIELDS if f.name in values}


def peer_row(row: dict, peer, decode=None, difference: str | None = None) -> dict:
    """A peer's row (peers.PeerResult) beside specbench's `row` of the same run: the same context
    and settings, the peer's own times, tokens and (where it tells) acceptance, and its times over
    specbench's on the same method. `difference`: where its T = 0 tokens leave specbench's."""
    ar, sd = summarize(peer.ar_times_s), summarize(peer.sd_times_s)
    speedups = np.asarray(peer.ar_times_s) / np.asarray(peer.sd_times_s)
    N, greedy = row["n_tokens"], row["temperature"] == 0
    values = {
        **{k: row[k] for k in SETTINGS if k in row},
        "implementation": peer.name,
        "implementation_version": peer.version,
        **{f"ar_{k}": v for k, v in ar.items()},
        **{f"sd_{k}": v for k, v in sd.items()},
        "ar_tokens_per_s": N / ar["mean_s"],
        "sd_tokens_per_s": N / sd["mean_s"],
        "speedup": float(speedups.mean()),
        "speedup_std": float(speedups.std(ddof=1)) if len(speedups) > 1 else 0.0,
        "ar_over_specbench": ar["mean_s"] / row["ar_mean_s"],
        "sd_over_specbench": sd["mean_s"] / row["sd_mean_s"],
        "identical": peer.ar_tokens == peer.sd_tokens if greedy else None,
        "same_as_specbench": peer.ar_tokens == peer.sd_tokens == row["ar_token_ids"] if greedy else None,
        "first_difference": difference,
        "other_load": row.get("other_load"),  # measured in the same window as specbench's row
        "under_load": row.get("under_load"),
        "prompt": row["prompt"],
        "ar_times_s": peer.ar_times_s,
        "sd_times_s": peer.sd_times_s,
        "ar_token_ids": peer.ar_tokens,
        "sd_token_ids": peer.sd_tokens,
    }
    if peer.accepted:  # the drafts each round kept: tested ones are those kept plus one rejection
        K, kept = row["K"], np.asarray(peer.accepted)
        values |= {
            "n_rounds": len(kept),
            "tokens_per_round": float((kept + 1).mean()),
            "alpha": float(kept.sum() / np.minimum(kept + 1, K).sum()),
        }
    if decode is not None:
        values["ar_text"], values["sd_text"] = decode(peer.ar_tokens), decode(peer.sd_tokens)
    return {f.name: values[f.name] for f in FIELDS if f.name in values}


def budget_ar(res, t_start=None, t_token=None):
    """AR's accounted time: the prefill with the first token, then N - 1 tokens (step and sampling);
    of the row's medians, or of the parts given (arrays too)."""
    t_start, t_token = (res.t_ar_start_s, res.t_ar_token_s) if t_start is None else (t_start, t_token)
    return t_start + (res.config.n_tokens - 1) * t_token


def budget_sd(res, t_start=None, t_round=None):
    """SD's accounted time: both prefills with the first token, then every round the decoding ran
    (the last one whole too: the device loop runs a round's full work), each t_round = K draft steps
    (the first over 2 tokens), the verify, warping, accept/reject and bookkeeping; of the row's
    medians, or of the parts given (arrays too)."""
    t_start, t_round = (res.t_sd_start_s, res.t_round_s) if t_start is None else (t_start, t_round)
    return t_start + res.stats.rounds_run * t_round


def measured_over_accounted_err(res, resamples: int = 400) -> float | None:
    """σ of measured ÷ accounted over bootstrap resamples of the repeats (Efron 1979): each resample
    draws repeats with replacement, each wall time with the parts sampled in its own repeat, and
    takes the ratio of medians again. None with fewer than two repeats."""
    parts, R = res.part_samples, len(res.ar_times_s)
    if R < 2 or not parts:
        return None
    series = np.array(
        [res.ar_times_s, res.sd_times_s] + [parts[k] for k in ("ar_start", "ar_token", "sd_start", "round")]
    )
    medians = np.median(series[:, np.random.default_rng(0).integers(0, R, (resamples, R))], axis=-1)
    ar_wall, sd_wall, ar_start, ar_token, sd_start, t_round = medians
    accounted = budget_ar(res, ar_start, ar_token) / budget_sd(res, sd_start, t_round)
    return float(np.std(ar_wall / sd_wall / accounted, ddof=1))


def budget(res, ar_wall: float, sd_wall: float) -> dict:
    """The time budget of a row: starts, accounted times, the residual each wall time (median of
    the repeats) leaves, and the speedup the accounted times predict."""
    ar, sd = budget_ar(res), budget_sd(res)
    return {
        "t_ar_start_s": res.t_ar_start_s,
        "t_sd_start_s": res.t_sd_start_s,
        "ar_accounted_s": ar,
        "sd_accounted_s": sd,
        "ar_residual_s": ar_wall - ar,
        "sd_residual_s": sd_wall - sd,
        "accounted_speedup": ar / sd,
    }


def best_K_predicted(res, alpha: float) -> int | None:
    """The K the measured parts predict best (theory.best_K up to 2 K): t_verify of K' drafts
    interpolated linearly between the measured 1-token step and the (K+1)-token verify, and the
    per-round overhead (t_round less its drafts and verify) added to each round."""
    if alpha != alpha:  # NaN: no draft was ever tested
        return None
    K = res.config.K
    overhead = max(0.0, res.t_round_s - K * res.t_draft_s - res.t_verify_s)
    slope = (res.t_verify_s - res.t_target_s) / K
    return theory.best_K(alpha, res.t_draft_s, lambda k: res.t_target_s + slope * k + overhead, 2 * K)


def missing_for_plot(rows: list[dict]) -> str | None:
    """Why these rows cannot be plotted, or None: no rows, or rows without the fields a plot needs."""
    if not rows:
        return "no rows"
    for i, r in enumerate(rows):
        gone = [f for f in PLOT_FIELDS if f not in r]
        if gone:
            return f"row {i + 1} has no {', '.join(gone)}"
        # alpha is null where no draft was ever tested (dynamic K that never drafted): no theory curve
        bad = [f for f in PLOT_FIELDS if not _is_number(r[f]) and not (f == "alpha" and r[f] is None)]
        if bad or not isinstance(r["K"], int) or isinstance(r["K"], bool):
            return f"row {i + 1} has {', '.join(bad or ['K'])} that is not a number"
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN != NaN
