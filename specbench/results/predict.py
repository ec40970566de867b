"""What speculative decoding would buy on a device not at hand: the speedup and time per token at
any K, from the acceptance of a saved run (on any device) and the step times t(n) of the device
asked about. No JAX here.

A round of K drafts costs its drafting, K draft steps for a chain (one step over K rows for a
one-pass drafter, nothing for a free one: the draft curve's cost shape, draft_cost.py), and one
target step over K + 1 tokens; it yields
E[tokens] = 1 + sum_i prod_{j<=i} a_j, a_j the acceptance of draft position j given that it was
tested (Leviathan et al. 2023, eq. 1, with the per-position acceptance in place of one alpha).
Autoregressive decoding costs one target step over 1 token a token. So, per token,

    speedup(K) = E(K) t_T(1) / (drafting(K) + t_T(K + 1) + overhead),  drafting(K) = K t_D(1), t_D(K) or 0,

with t_T(n), t_D(n) the target's and the draft's step over n tokens. What sets this apart from
Leviathan's closed form (t_T(K + 1) = t_T(1)) and from a fitted cost model is t(n) itself,
measured: a `specbench roofline` export of the device, or modelled from its bandwidth, FLOP rate
and a fixed per-step cost over the bytes and FLOPs of each step (as a roofline export records
them). A sharded target adds its communication per step to every target step, verify and AR
alike. The start of a generation (the prefill) is left out: these are steady-state figures.
"""

from __future__ import annotations

import dataclasses
import math

from specbench.draft_cost import DraftCost
from specbench.results import theory


@dataclasses.dataclass(frozen=True)
class StepCurve:
    """t(n), seconds of one step over n tokens, for one model on one device: measured at
    `times`' n; beyond the largest, extrapolated on the line through the last two."""

    name: str
    times: dict[int, float]
    cost: DraftCost = DraftCost.SEQUENTIAL  # a draft's: how a round spends it (draft_cost.py)
    rows_per_draft: int = 1  # a one-pass draft's step reads this many rows a draft (PARD: 2)

    def at(self, n: int) -> float:
        if n in self.times:
            return self.times[n]
        ns = sorted(self.times)
        if len(ns) == 1:
            return self.times[ns[0]]
        a, b = ns[-2], ns[-1]
        slope = (self.times[b] - self.times[a]) / (b - a)
        return self.times[b] + slope * (n - b)

    def measured(self, n: int) -> bool:
        return n in self.times


FREE = StepCurve("free", {1: 0.0}, DraftCost.FREE)
"""A drafter whose drafting costs nothing beside the target's step (the dial, prompt lookup)."""


def curve_from_roofline(rows: list[dict], model: str, kernels: str | None = None) -> StepCurve:
    """A model's t(n) from `specbench roofline --export-json` rows (or a report's roofline rows):
    the median t_step_s of each n_tokens_per_step, of the rows of `model` (and `kernels` where
    given). ValueError naming what is there when no row matches."""
    mine = [
        r
        for r in rows
        if r.get("model") == model and r.get("part", "step") == "step" and kernels in (None, r.get("kernels"))
    ]
    if not mine:
        there = sorted({f"{r.get('model')} ({r.get('kernels')})" for r in rows})
        raise ValueError(
            f"no roofline row of {model}{f' ({kernels})' if kernels else ''}: it has {', '.join(there)}"
        )
    by_n: dict[int, list[float]] = {}
    for r in mine:
        by_n.setdefault(int(r["n_tokens_per_step"]), []).append(float(r["t_step_s"]))
    return StepCurve(model, {n: sorted(ts)[len(ts) // 2] for n, ts in sorted(by_n.items())})


def curve_from_device(rows: list[dict], model: str, gbps: float, gflops: float, fixed_s: float) -> StepCurve:
    """A model's t(n) on a device known by its memory bandwidth (GB/s), FLOP rate (GFLOP/s) and a
    fixed cost per step (launches, dispatch): fixed + max(bytes / bandwidth, FLOPs(n) / rate), the
    bytes and FLOPs of each step as a roofline export of any device records them."""
    if not (gbps > 0 and gflops > 0 and fixed_s >= 0):
        raise ValueError("bandwidth and FLOP rate must be positive, the fixed cost at least 0")
    mine = [r for r in rows if r.get("model") == model and r.get("part", "step") == "step"]
    if not mine:
        raise ValueError(f"no roofline row of {model}: it records the bytes and FLOPs of each step")
    times = {
        int(r["n_tokens_per_step"]): fixed_s
        + max(float(r["bytes_per_step"]) / (gbps * 1e9), float(r["flops_per_step"]) / (gflops * 1e9))
        for r in mine
    }
    return StepCurve(f"{model} on the device", times)


def acceptance_of(row: dict) -> list[float]:
    """A saved row's acceptance per draft position (per_position_acceptance); positions no round
    tested are left out. Without it (an older row), its alpha at every one of its K positions."""
    measured = [a for a in (row.get("per_position_acceptance") or []) if a is not None and not math.isnan(a)]
    if measured:
        return measured
    alpha = row.get("alpha")
    if alpha is None or alpha != alpha:
        raise ValueError("the row has neither per_position_acceptance nor alpha: it drafted nothing")
    return [float(alpha)] * int(row["K"])


def acceptance_at(acceptance: list[float], K: int) -> list[float]:
    """K positions' acceptance: the measured ones, and beyond them the last measured one (positions
    deeper than a run drafted are assumed to accept as its deepest did)."""
    return (acceptance + [acceptance[-1]] * K)[:K]


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One K's prediction: tokens per round, the round's and AR's seconds, and what they give."""

    K: int
    tokens_per_round: float
    t_round_s: float
    t_ar_token_s: float
    extrapolated: bool  # a step time beyond the curve's measured n, or acceptance beyond the run's K

    @property
    def t_per_token_s(self) -> float:
        return self.t_round_s / self.tokens_per_round

    @property
    def speedup(self) -> float:
        return self.t_ar_token_s / self.t_per_token_s


def predict(
    acceptance: list[float],
    draft: StepCurve,
    target: StepCurve,
    K: int,
    comm_s: float = 0.0,
    overhead_s: float = 0.0,
) -> Prediction:
    """The prediction at K (the module's formula): `comm_s` added to every target step (a sharded
    target's collectives), `overhead_s` to every round (accept/reject, bookkeeping)."""
    tokens = theory.expected_tokens_positional(acceptance_at(acceptance, K))
    step = lambda n: draft.at(n * draft.rows_per_draft)  # a one-pass draft's step over its pass's rows
    t_round = draft.cost.seconds(K, step) + target.at(K + 1) + comm_s + overhead_s
    drafts_at = {DraftCost.SEQUENTIAL: 1, DraftCost.ONE_PASS: K * draft.rows_per_draft}.get(draft.cost)
    beyond = not (
        target.measured(K + 1) and target.measured(1) and (drafts_at is None or draft.measured(drafts_at))
    )
    reached = math.prod(acceptance) > 0  # positions past the run's matter only if its last was reached
    return Prediction(K, tokens, t_round, target.at(1) + comm_s, beyond or (K > len(acceptance) and reached))


def predictions(
    acceptance, draft: StepCurve, target: StepCurve, Ks, comm_s=0.0, overhead_s=0.0
) -> list[Prediction]:
    """predict() at each K of Ks."""
    return [predict(acceptance, draft, target, K, comm_s, overhead_s) for K in Ks]


def best(preds: list[Prediction]) -> Prediction:
    """The prediction of the most tokens per second (the optimal K among those predicted)."""
    return max(preds, key=lambda p: p.speedup)
