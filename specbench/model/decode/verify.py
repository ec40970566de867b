"""How the target judges a round's drafts: token by token, as a block, k drafts at once, or a tree.

Notation as in the rest of specbench (DESIGN.md §4): p = the draft's distributions, q = the
target's. Every rule here is exact -- the emitted tokens follow the target's warped distribution
-- and at T = 0 each reduces to sampling.greedy_verdict, which the round runs instead.

  * token  sampling.accept_reject (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023).
  * block  block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro and Suresh,
           "Block Verification Accelerates Speculative Decoding", ICLR 2025, arXiv:2403.10444,
           Algorithm 2): one joint decision over the K drafts. Never fewer tokens per round in
           expectation than token by token; on the paper's toy case 11/9 against 10/9.
  * k drafts  multi_draft_verdict: SpecInfer's multi-step speculative sampling (Miao et al.,
           ASPLOS 2024, Algorithm 2) over k independent draft sequences: at each depth the
           candidates that share the accepted prefix are tried in turn against a residual that
           every rejection shrinks. gbv (gbv_verdict): greedy multi-path block verification
           (Thomas and Pal 2026), one greedily chosen path judged as a block.
  * trees  verify_trees.py: tree_verdict, recursive rejection sampling from the root
           (SpecInfer); traversal_verdict, Traversal Verification from the leaves (Weng et al. 2025).

A drafter without distributions (lookup) proposes with certainty: its p rows are one-hot, so
block verification's ratio q(x)/p(x) is q(x) and its residual max(eta q - p, 0) removes at most
the drafted token's mass; the rule is the same and stays exact.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from specbench import environment
from specbench.model.decode.sampling import (
    TargetRows,
    accept_reject,
    all_rows,
    all_rows_accept_reject,
    draft_row,
    race,
    race_residual,
    residual,
    sample,
    sample_residual,
    with_zero_row,
)
from specbench.model.decode.verify_trees import traversal_verdict, tree_verdict

METHODS = ("token", "block", "traversal", "gbv")
SHAPES = {
    "token": ("chain", "tree", "drafts"),
    "block": ("chain",),
    "traversal": ("tree",),
    "gbv": ("drafts",),
}
"""What each method judges: one chain of drafts, a token tree, or k draft sequences (drafts)."""
KINDS = environment.VERDICT.values[1:]
"""How a verdict is computed (the same distribution either way): `lazy` reads the target's rows
up to the first rejection in a data-dependent loop and samples by the CDF, the fastest on a CPU;
`all-rows` is one fixed-shape computation over every row with an exponential race, for a GPU,
where each iteration of a data-dependent loop waits for the host (docs/gpu.md)."""


def block_hazards(draft_tokens, p, q, n_drafted=None):
    """Block verification's quantities for one round (Sun et al. 2025, Algorithm 2, in specbench's
    notation: their M_s is p, M_b is q, their p_i is eta_i, gamma is K).

    draft_tokens [K] drawn from p [K, V]; q [K+1, V]. Returns (h [K+1], eta [K+1]) with eta_0 = 1,

        eta_i = min(1, eta_{i-1} q_{i-1}(x_i) / p_{i-1}(x_i))                        (i = 1..K)
        Z_i   = sum_x max(eta_i q_i(x) - p_i(x), 0)
        h_i   = Z_i / (Z_i + 1 - eta_i)  for i < K,    h_K = eta_K,

    where row i is the distribution of the token after i drafts. h_0 is not used (position 0 is
    where the round falls back to when no coin passes). 0/0 counts as 0: it occurs only when
    eta_i = 1 and q_i = p_i, where no residual mass is left to emit from. Drafts at and after
    n_drafted were not proposed (their p rows are zero): eta is 0 there, so h is 0 and the
    residual after the last proposed draft is q itself (its Z_i = eta_i, so h_i = eta_i).
    """
    K = draft_tokens.shape[0]
    p_x = jnp.take_along_axis(p, draft_tokens[:, None], axis=-1)[:, 0]
    q_x = jnp.take_along_axis(q[:K], draft_tokens[:, None], axis=-1)[:, 0]
    ratio = jnp.where(p_x > 0, q_x / jnp.where(p_x > 0, p_x, 1.0), 0.0)
    if n_drafted is not None:
        ratio = jnp.where(jnp.arange(K) < n_drafted, ratio, 0.0)
    eta = _running_min_product(ratio)
    z = jnp.sum(jnp.maximum(eta[:, None] * q - with_zero_row(p), 0.0), axis=-1)
    denominator = z + 1.0 - eta
    h = jnp.where(denominator > 0, z / jnp.where(denominator > 0, denominator, 1.0), 0.0)
    return h.at[K].set(eta[K]), eta


def _running_min_product(ratio):
    """eta_0 = 1, eta_i = min(1, eta_{i-1} ratio_i): a scan (the min does not distribute over
    the product, so no closed form over cumulative products)."""

    def next_eta(eta, r):
        eta = jnp.minimum(1.0, eta * r)
        return eta, eta

    _, etas = lax.scan(next_eta, jnp.float32(1.0), ratio.astype(jnp.float32))
    return jnp.concatenate([jnp.ones(1, jnp.float32), etas])


def block_verdict(key, draft_tokens, p, q, n_drafted=None, draw_residual=sample_residual):
    """One round's verdict by block verification (Sun et al. 2025, Algorithm 2; block_hazards).

    One coin u_i per draft position; tau = the last i in 1..K with u_i < h_i, or 0 when none
    passes (strictly: jax.random.uniform can return 0.0, and h_i = 0 must never pass). The first
    tau drafts are accepted; the emitted token is the bonus from q_K when tau = K, else a draw from
    norm(max(eta_tau q_tau - p_tau, 0)). Same signature and result as sampling.accept_reject:
    (n_accepted, emitted)."""
    K, q = draft_tokens.shape[0], all_rows(q)  # every row's Z_i is read
    k_coins, k_emit = jax.random.split(key)
    h, eta = block_hazards(draft_tokens, p, q, n_drafted)
    passed = jax.random.uniform(k_coins, (K,)) < h[1:]
    tau = jnp.max(jnp.where(passed, jnp.arange(1, K + 1), 0)).astype(jnp.int32)
    return tau, draw_residual(k_emit, eta[tau] * q[tau], draft_row(p, tau))


def all_rows_block_verdict(key, draft_tokens, p, q, n_drafted=None):
    """block_verdict, its residual drawn by an exponential race (sampling.race_residual): with
    its hazards already over all rows, one fixed-shape computation."""
    return block_verdict(key, draft_tokens, p, q, n_drafted, draw_residual=race_residual)


def multi_draft_verdict(
    key, draft_tokens, p, q, n_drafted, update_residual: bool = True, all_rows_kind: bool = False
):
    """One round's verdict over k draft sequences: SpecInfer's multi-step speculative sampling
    (Miao et al. 2024, Algorithm 2, for k sequences drawn independently from the draft). A
    paper's algorithm, written as one function as the paper writes it.

    draft_tokens [k, K], p [k, K, V], q [k, K+1, V] (the target on each sequence; or a
    sampling.TargetRows, of which only the rows visited are warped), n_drafted [k].
    At depth i the sequences still alive (those whose first i drafts equal the accepted prefix)
    are tried in order: candidate x of sequence j is accepted with probability min(1, r(x) / p_j(x)),
    starting from r = q_i; each rejection replaces r by norm(max(r - p_j, 0)). The first accepted
    candidate extends the prefix and keeps alive only the sequences that drafted it; when every
    candidate is rejected the emitted token is drawn from r, and after K accepted depths the bonus
    from q_K. Each candidate is an independent draw from p given the prefix, so every step is a
    rejection sampler of the current r and the token is exactly q's (Miao et al. 2024, Theorem 4.2).

    Returns (n_accepted, emitted, branch): branch is a sequence carrying the accepted prefix,
    whose caches the round keeps. update_residual=False is the tests' broken variant: every
    candidate is tried against q itself. all_rows_kind: every row warped at once, a loop of K
    depths (those after a rejection change nothing) and the emitted token drawn by a race.
    """
    if all_rows_kind:
        q = all_rows(q)
    k, K = draft_tokens.shape
    k_coins, k_emit = jax.random.split(key)
    coins = jax.random.uniform(k_coins, (K, k))
    first_alive = lambda alive: jnp.argmax(alive).astype(jnp.int32)

    def depth(carry):  # visited while every depth before it accepted a candidate
        i, alive, stopped, n_accepted, r_stop = carry
        r = q[first_alive(alive), i]
        token, found = jnp.int32(0), jnp.bool_(False)
        for j in range(k):  # k is small and static: the candidates in order, unrolled
            tested = alive[j] & ~found & (i < n_drafted[j])
            x = draft_tokens[j, i]
            accepted = tested & (coins[i, j] * p[j, i, x] < r[x])
            token = jnp.where(accepted, x, token)
            rejected = tested & ~accepted
            if update_residual:
                r = jnp.where(rejected, residual(r, p[j, i]), r)
            found = found | accepted
        alive = jnp.where(found, alive & (draft_tokens[:, i] == token), alive)
        new = i + 1, alive, ~found, n_accepted + found.astype(jnp.int32), r  # r: emitted if ~found
        if not all_rows_kind:
            return new
        # a fixed count of depths: after a rejection, a depth leaves everything as it was
        return tuple(jnp.where(stopped, old, now) for old, now in zip(carry, new))

    init = (
        jnp.int32(0),
        jnp.ones(k, bool),
        jnp.bool_(False),
        jnp.int32(0),
        jnp.zeros(p.shape[-1], jnp.float32),
    )
    if all_rows_kind:
        _, alive, stopped, n_accepted, r_stop = lax.fori_loop(0, K, lambda _, c: depth(c), init)
        branch = first_alive(alive)
        return n_accepted, race(k_emit, jnp.where(stopped, r_stop, q[branch, K])), branch
    _, alive, stopped, n_accepted, r_stop = lax.while_loop(lambda c: (c[0] < K) & ~c[2], depth, init)
    branch = first_alive(alive)
    emitted = sample(k_emit, lax.cond(stopped, lambda: r_stop, lambda: q[branch, K]))
    return n_accepted, emitted, branch


def all_rows_multi_draft_verdict(key, draft_tokens, p, q, n_drafted):
    """multi_draft_verdict as one fixed-shape computation (all_rows_kind)."""
    return multi_draft_verdict(key, draft_tokens, p, q, n_drafted, all_rows_kind=True)


def gbv_verdict(
    key, draft_tokens, p, q, n_drafted, skew: bool = True, block=None, support: int | None = None
):
    """One round's verdict over k draft sequences by greedy multi-path block verification (Thomas
    and Pal 2026, arXiv:2602.16961): one path is chosen greedily, then judged by block verification
    against the distribution that choosing made.

    The k sequences were drawn independently from the draft: a tree of shared prefixes. From the
    root, at each depth, the path goes on with the candidate whose token x ranks highest by
    q(x) / p(x) (ties: the first sequence). Ranking every length-i prefix by that lexicographic
    order, let P be the draft's probability of the current node, A the probability of drawing a
    prefix ranked below it, and F(x) / F-(x) the draft's mass at or below / strictly below x at
    the node. The chosen path's next token then follows the skewed draft

        s(x) = [(A + P F(x))^k - (A + P F-(x))^k] / [(A + P)^k - A^k]

    (the best of k independent draws, where A = 0 at the root), computed as
    p(x) sum_j a^j b^(k-1-j) with a, b the two bases over A + P, then normalised. Block
    verification with s in place of p along the chosen path is exact (the paper's Theorem); with
    k = 1 it is block verification itself.

    Arguments and result as multi_draft_verdict: (n_accepted, emitted, branch). skew=False is
    the tests' broken variant: the greedy path judged against p itself. block: the block verdict
    to run (block_verdict, or all_rows_block_verdict for the all-rows kind). support: at most this
    many tokens have p > 0 (a draft vocabulary's size): the ranking then sorts those alone, since a
    token the draft cannot draw adds nothing to F and has s = 0 (a sort of the whole vocabulary
    at each depth is most of the verdict's time on a CPU).
    """
    block = block or block_verdict
    k, K = draft_tokens.shape
    first_alive = lambda alive: jnp.argmax(alive).astype(jnp.int32)
    alive, P, below = jnp.ones(k, bool), jnp.float32(1.0), jnp.float32(0.0)  # below: A
    skewed = []
    for i in range(K):  # K is static and small
        j0 = first_alive(alive)
        q_i, p_i = q[j0, i], p[j0, i]
        ratio = q_i / (p_i + jnp.finfo(jnp.float32).tiny)
        at_most = ranked_mass(ratio, p_i, support)  # F(x)
        scale = jnp.maximum(below + P, 1e-30)
        a, b = (below + P * at_most) / scale, (below + P * (at_most - p_i)) / scale
        s = p_i * sum(a**j * b ** (k - 1 - j) for j in range(k))
        skewed.append(s / jnp.maximum(jnp.sum(s), 1e-30) if skew else p_i)
        x = draft_tokens[:, i]
        best = jnp.argmax(jnp.where(alive, ratio[x], -1.0))
        token = x[best]
        below, P = below + P * (at_most[token] - p_i[token]), P * p_i[token]
        alive = alive & (x == token)
    branch = first_alive(alive)
    rows = all_rows(q)[branch] if not isinstance(q, TargetRows) else TargetRows(q.logits[branch], q.warp)
    n_accepted, emitted = block(key, draft_tokens[branch], jnp.stack(skewed), rows, n_drafted[branch])
    return n_accepted, emitted, branch


def ranked_mass(ratio, p, support: int | None = None):
    """F(x) = the mass of p at tokens ranked at or below x by `ratio` (ties: the lower id below),
    [V]. With `support`, p is zero outside at most that many tokens, which alone are sorted."""
    V = p.shape[0]
    if support is None or support >= V:
        ranked = jnp.argsort(ratio, stable=True)
        return jnp.zeros_like(p).at[ranked].set(jnp.cumsum(p[ranked]))
    ids = jnp.nonzero(p > 0, size=support, fill_value=V)[0]  # increasing ids: ties stay in id order
    safe = jnp.minimum(ids, V - 1)
    key = jnp.where(ids < V, ratio[safe], jnp.inf)
    mass = jnp.where(ids < V, p[safe], 0.0)
    order = jnp.argsort(key, stable=True)
    return jnp.zeros_like(p).at[ids[order]].set(jnp.cumsum(mass[order]), mode="drop")


def all_rows_gbv_verdict(key, draft_tokens, p, q, n_drafted, support: int | None = None):
    """gbv_verdict judged by all_rows_block_verdict: the all-rows kind."""
    return gbv_verdict(key, draft_tokens, p, q, n_drafted, block=all_rows_block_verdict, support=support)


# every verdict, by how it is computed (KINDS) and what it judges: a method, or k drafts
VERDICTS = {
    "lazy": {
        "token": accept_reject,
        "block": block_verdict,
        "drafts": multi_draft_verdict,
        "gbv": gbv_verdict,
    },
    "all-rows": {
        "token": all_rows_accept_reject,
        "block": all_rows_block_verdict,
        "drafts": all_rows_multi_draft_verdict,
        "gbv": all_rows_gbv_verdict,
    },
}


def kind_for(backend: str) -> str:
    """The verdict kind a backend runs: `lazy` on the CPU, `all-rows` on an accelerator, unless
    SPECBENCH_VERDICT names one of KINDS (a comparison on one machine). The one place the choice
    is made; every row records it."""
    asked = environment.VERDICT.get()
    if asked in KINDS:
        return asked
    return "lazy" if backend == "cpu" else "all-rows"


def verdict_of(drafter, kind: str | None = None):
    """The drafter's verify rule, computed the `kind` way (default: kind_for this JAX backend):
    tree_verdict for a tree, the k-drafts verdict with k drafts, else that of drafter.verify."""
    if drafter.tree is not None:  # one walk over the tree whatever the device
        if drafter.verify == "traversal":
            return traversal_verdict
        return functools.partial(tree_verdict, certain=True) if drafter.tree.dynamic else tree_verdict
    kind = kind or kind_for(jax.default_backend())
    if drafter.drafts > 1:
        if drafter.verify == "gbv":  # a draft vocabulary bounds the tokens its ranking sorts
            return functools.partial(VERDICTS[kind]["gbv"], support=drafter.vocab)
        return VERDICTS[kind]["drafts"]
    return VERDICTS[kind][drafter.verify]
