"""The time budget of a row: each wall time as the parts measured on their own (the starts, the
AR token, the round), what they leave (the residual), and whether the account closes. No JAX here.
DESIGN.md §12; the README's time budget."""

from __future__ import annotations

import numpy as np

from specbench.draft_cost import DraftCost
from specbench.results import theory


def budget_ar(res, t_start=None, t_token=None):
    """AR's accounted time: the prefill with the first token, then N - 1 tokens (step and sampling);
    of the row's medians, or of the parts given (arrays too). A refilled queue: every batched start
    it ran, and every batched step."""
    t_start, t_token = (res.t_ar_start_s, res.t_ar_token_s) if t_start is None else (t_start, t_token)
    starts, steps = ar_counts(res)
    return starts * t_start + steps * t_token


def ar_counts(res) -> tuple[float, int]:
    """(AR's starts in batched starts' worth, its steps): 1 and N - 1, or a refilled queue's: its
    requests over its slots (each request's prefill one slot's share of a batched start) and the
    batched steps it ran."""
    served = getattr(res, "ar_stats", None)
    if served is not None and served.n_slots:
        return served.starts, served.rounds_run
    return 1, res.config.n_tokens - 1


def budget_sd(res, t_start=None, t_round=None):
    """SD's accounted time: both prefills with the first token, then every round the decoding ran
    (the last one whole too: the device loop runs a round's full work), each t_round = K draft steps
    (the first over 2 tokens), the verify, warping, accept/reject and bookkeeping; of the row's
    medians, or of the parts given (arrays too)."""
    t_start, t_round = (res.t_sd_start_s, res.t_round_s) if t_start is None else (t_start, t_round)
    starts = getattr(res.stats, "starts", 1.0)  # a refilled queue's, in batched starts' worth
    return starts * t_start + res.stats.rounds_run * t_round


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
    ar_starts, ar_steps = ar_counts(res)
    return {
        "ar_starts": ar_starts,
        "ar_steps": ar_steps,
        "sd_starts": getattr(res.stats, "starts", 1.0),
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
    interpolated linearly between the measured 1-token step and the (K+1)-token verify, the
    per-round overhead (t_round less its drafts and verify) added to each round, and the drafting
    of K' drafts by the drafter's cost shape (draft_cost.py): the measured pass whatever K' for a
    one-pass drafter, else K' times the measured cost of a draft (a chain's step, or a lookup's)."""
    if alpha != alpha:  # NaN: no draft was ever tested
        return None
    K = res.config.K
    overhead = max(0.0, res.t_round_s - K * res.t_draft_s - res.t_verify_s)
    slope = (res.t_verify_s - res.t_target_s) / K
    one_pass = res.config.drafter.kind.draft_cost is DraftCost.ONE_PASS
    drafting = (lambda k: K * res.t_draft_s) if one_pass else (lambda k: k * res.t_draft_s)
    return theory.best_K(alpha, drafting, lambda k: res.t_target_s + slope * k + overhead, 2 * K)


RATIO_BAND = (0.9, 1.1)  # measured / accounted outside this: the account does not close
RESIDUAL_SHARE = 0.10  # nor where a residual exceeds this share of its wall time


def closes(row: dict) -> bool | None:
    """Whether a row's time account closes: measured ÷ accounted within RATIO_BAND and each
    method's residual within RESIDUAL_SHARE of its wall time (medians). None for a row with no
    budget (a peer's, or one written before the budget existed)."""
    return budget_gap(row) is None if "measured_over_accounted" in row else None


def budget_gap(row: dict) -> str | None:
    """Where a row's account does not close, in words ("SD's residual is +14% of its wall time;
    measured / accounted 1.16"), or None where it closes or there is no budget."""
    if row.get("measured_over_accounted") is None:
        return None
    gaps = []
    for method, name in (("ar", "AR"), ("sd", "SD")):
        share = row[f"{method}_residual_s"] / row[f"{method}_median_s"]
        if abs(share) > RESIDUAL_SHARE:
            gaps.append(f"{name}'s residual is {share:+.0%} of its wall time")
    ratio = row["measured_over_accounted"]
    if not RATIO_BAND[0] <= ratio <= RATIO_BAND[1]:
        gaps.append(f"measured / accounted {ratio:.2f}")
    return "; ".join(gaps) or None
