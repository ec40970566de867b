"""What speculative decoding should buy, from K, the step times and the acceptance.

Notation: K drafts per round, t_draft / t_target one decode step (1 token) of each model,
t_verify one target step over K+1 tokens, c = t_draft / t_target, alpha the per-token acceptance
probability, r = (tokens per round) / (K+1). No JAX here: `specbench theory` starts fast.
"""

from __future__ import annotations

import math

from specbench.draft_cost import DraftCost, flat

SEQUENTIAL = DraftCost.SEQUENTIAL


def speedup_from_r(r: float, K: int, t_draft: float, t_target: float, cost: DraftCost = SEQUENTIAL) -> float:
    """speedup = r (K+1) t_target / (drafting + t_target), drafting = K t_draft for a chain.

    Chen et al. (2023, arXiv:2302.01318), as Mody's "Speculative Sampling" (2023) analyses it:
    a round costs its drafting plus one target step (the verify step taken as costing t_target)
    and yields r(K+1) tokens on average, where AR yields 1 token per t_target. Drafting is the
    drafter's cost shape (draft_cost.py): K t_draft, one pass of t_draft, or nothing.
    K=4, t_draft=1.8, t_target=14.1: r=0.8 -> 2.65, r=0.62 -> 2.05.
    """
    return r * (K + 1) * t_target / (cost.seconds(K, flat(t_draft)) + t_target)


def expected_tokens(alpha: float, K: int) -> float:
    """E[tokens per round] = (1 - alpha^(K+1)) / (1 - alpha); K+1 at alpha = 1.

    Leviathan et al. (2023, arXiv:2211.17192), equation (1), for i.i.d. acceptance alpha.
    """
    if alpha >= 1.0:
        return K + 1.0
    return (1.0 - alpha ** (K + 1)) / (1.0 - alpha)


def expected_tokens_positional(acceptance: list[float]) -> float:
    """E[tokens per round] = 1 + sum_i prod_{j<=i} a_j from the acceptance a_j of each draft
    position given that it was tested; with every a_j = alpha it is expected_tokens(alpha, K).
    A position never tested (NaN, or null in a saved row) ends the sum: no round reached it."""
    total, reach = 1.0, 1.0
    for a in acceptance:
        if a is None or a != a:  # NaN
            break
        reach *= a
        total += reach
    return total


def best_K(alpha: float, drafting_of, t_verify_of, K_max: int = 16) -> int:
    """The K in 1..K_max with the most tokens per second of rounds: expected_tokens(alpha, K) /
    (drafting_of(K) + t_verify_of(K)), drafting_of(K) a round's drafting (draft_cost.DraftCost.
    seconds: K t_D(1) for a chain, t_D(K) for one pass) and t_verify_of(K) the target step over K+1
    tokens. With drafting K c t_target and t_verify_of(K) = t_target (1 + beta K) this is Leviathan
    et al.'s optimum with c + beta."""
    return max(
        range(1, K_max + 1), key=lambda K: expected_tokens(alpha, K) / (drafting_of(K) + t_verify_of(K))
    )


def r_from_alpha(alpha: float, K: int) -> float:
    """r = E[tokens per round] / (K+1)."""
    return expected_tokens(alpha, K) / (K + 1)


def alpha_from_r(r: float, K: int) -> float:
    """The alpha whose expected tokens per round is r (K+1): inverts r_from_alpha (monotone) by bisection."""
    if not 1.0 / (K + 1) <= r <= 1.0:
        raise ValueError(f"r must be in [1/(K+1), 1] = [{1 / (K + 1):.3f}, 1] for K={K} (got {r})")
    if r == 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if r_from_alpha(mid, K) < r else (lo, mid)
    return (lo + hi) / 2


def speedup_from_alpha(alpha: float, K: int, c: float, cost: DraftCost = SEQUENTIAL) -> float:
    """speedup = E[tokens per round] / (K c + 1), c = t_draft / t_target, for a chain; E / (c + 1)
    for a one-pass drafter (one draft step of c, whatever K), E for a free one.

    Leviathan et al. (2023), Theorem 3.8 (walltime improvement), verify step costing one target
    step, the drafting term the drafter's cost shape (draft_cost.py).
    """
    return expected_tokens(alpha, K) / (cost.seconds(K, flat(c)) + 1.0)


def optimal_K(alpha: float, c: float, K_max: int = 16, cost: DraftCost = SEQUENTIAL) -> int:
    """The K in 1..K_max that maximises speedup_from_alpha (Leviathan et al., section 3.5). With a
    verify step that costs one target step whatever K, a one-pass or free drafter's optimum is
    K_max: only a verify cost that grows with K (best_K's t_verify_of) bounds it."""
    return max(range(1, K_max + 1), key=lambda K: speedup_from_alpha(alpha, K, c, cost))


def refined_speedup(
    tokens_per_round: float, K: int, t_draft: float, t_target: float, t_verify: float
) -> float:
    """speedup = tokens_per_round t_target / (K t_draft + t_verify).

    The seed formula with the measured verify step (K+1 tokens) in place of t_target: what the
    measurements predict. t_draft is what the run measured a round's drafting to cost per draft
    (its drafting over K, whatever the drafter's shape), so K t_draft is the round's drafting."""
    return tokens_per_round * t_target / (K * t_draft + t_verify)


def parse_K_range(text: str, most: int | None = None, span_most: int | None = None) -> list[int]:
    """'4' -> [4]; '1-8' -> [1..8]; '1,2,4,8' -> [1, 2, 4, 8]. Raises ValueError on anything else,
    on a value above `most` (checked before a range is expanded), on a range reaching above
    `span_most` (a value given alone may be larger: a later check names what it needs) and on
    a value given twice."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part[1:]:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if lo > hi:
                raise ValueError(f"empty range {part!r}")
            limit = min(m for m in (most, span_most, hi) if m is not None)
            if hi > limit:
                raise ValueError(
                    f"{'values' if limit == most else 'a range'} must be at most {limit} (got {hi})"
                )
            values.extend(range(lo, hi + 1))
        else:
            values.append(int(part))
    if not values or any(v < 1 for v in values):
        raise ValueError("values must be integers >= 1")
    if most is not None and max(values) > most:
        raise ValueError(f"values must be at most {most} (got {max(values)})")
    seen: set[int] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{v} is listed twice")
        seen.add(v)
    return values


def crossover(xs: list[float], speedups: list[float]) -> float | None:
    """Where a speedup curve first falls below 1: x at speedup = 1, interpolated linearly in
    log2(x) between the last point at or above 1 and the first below; None if it never falls
    below 1, or is below 1 from the first point on (no crossing inside the range)."""
    pairs = sorted(zip(xs, speedups))
    for (x0, s0), (x1, s1) in zip(pairs, pairs[1:]):
        if s0 >= 1 > s1:
            a, b = math.log2(x0), math.log2(x1)
            return 2 ** (a + (s0 - 1) / (s0 - s1) * (b - a))
    return None


MIX_LABEL = {
    None: "",
    "mixed": ", distinct prompts",
    "repeated": ", one prompt repeated (upper bound)",
    "refilled": ", refilled from a queue",
}


def batch_mix(row: dict) -> str | None:
    """'mixed' for a batch of distinct prompts, 'repeated' for one prompt repeated, 'refilled' for
    slots refilled from a queue, None for one sequence or a row written before rows recorded the mix."""
    if row.get("queue"):
        return "refilled"
    if row.get("batch", 1) == 1 or row.get("batch_prompts") is None:
        return None
    return "mixed" if row["batch_prompts"] > 1 else "repeated"


def batch_curves(rows: list[dict]) -> dict[tuple, dict[str, list[float]]]:
    """Result rows that vary the batch size, as curves: (draft, K, temperature, top_p, mix) ->
    {"batch", "speedup", "refined_speedup", "ar_tokens_per_s", "sd_tokens_per_s", "idle_fraction"},
    each a list over the sorted batch sizes (the mean where several rows share one). mix is
    batch_mix's; a single sequence's row (B = 1) starts every curve of its settings."""
    grouped: dict[tuple, dict[int, list[dict]]] = {}
    singles: dict[tuple, list[dict]] = {}
    for r in rows:
        settings = (r.get("draft"), r["K"], r.get("temperature"), r.get("top_p"))
        if r.get("batch", 1) == 1:
            singles.setdefault(settings, []).append(r)
        else:
            grouped.setdefault((*settings, batch_mix(r)), {}).setdefault(r["batch"], []).append(r)
    for settings, ones in singles.items():
        mixes = [key for key in grouped if key[:4] == settings] or [(*settings, None)]
        for key in mixes:
            grouped.setdefault(key, {})[1] = ones
    curves = {}
    columns = ("speedup", "refined_speedup", "ar_tokens_per_s", "sd_tokens_per_s", "idle_fraction")
    for key, by_batch in grouped.items():
        Bs = sorted(by_batch)
        mean = lambda col: [sum(r.get(col) or 0.0 for r in by_batch[b]) / len(by_batch[b]) for b in Bs]
        curves[key] = {"batch": Bs, **{col: mean(col) for col in columns}}
    return curves


def calculator_rows(o) -> list[tuple]:
    """`specbench theory`'s rows, one per K of o.Ks (o: the theory command's options, with t_draft,
    t_target, r or alpha, t_verify and the drafter's cost shape): (K, tokens/round, r, alpha,
    speedup, refined or None). From r: Chen et al.'s speedup_from_r, alpha by alpha_from_r; from
    alpha: Leviathan et al.'s expected_tokens and speedup_from_alpha; refined where t_verify is
    given (a round's drafting by its cost shape, plus t_verify). ValueError for an r below 1/(K+1),
    which no round can give."""
    c, rows = o.t_draft / o.t_target, []
    for k in o.Ks:
        if o.r is not None:
            if o.r < 1 / (k + 1):
                raise ValueError(f"r must be in [1/(K+1), 1] = [{1 / (k + 1):.3f}, 1] for K={k}")
            a, tpr = alpha_from_r(o.r, k), o.r * (k + 1)
            s = speedup_from_r(o.r, k, o.t_draft, o.t_target, o.cost)
        else:
            a, tpr, s = o.alpha, expected_tokens(o.alpha, k), speedup_from_alpha(o.alpha, k, c, o.cost)
        drafting = o.cost.seconds(k, flat(o.t_draft))
        refined = tpr * o.t_target / (drafting + o.t_verify) if o.t_verify else None
        rows.append((k, tpr, tpr / (k + 1), a, s, refined))
    return rows
