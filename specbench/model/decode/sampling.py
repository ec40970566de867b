"""From logits to tokens: warping, sampling, and the speculative accept/reject step.

Notation as in gpt-fast and Chen et al. (2023): `p` are the draft's probabilities, `q` the target's.

The accept/reject rule is the modified rejection sampling of Chen et al. (DeepMind, 2023,
arXiv:2302.01318, Algorithm 2) and Leviathan et al. (2023, arXiv:2211.17192, Algorithm 1):
accept draft token x with probability min(1, q(x)/p(x)); on the first rejection emit a token
from the residual norm(max(q - p, 0)); if all K are accepted emit a bonus token from q_{K+1}.
The emitted tokens are then distributed exactly as the target's (warped) distribution.

Warping (temperature, top-k, top-p) is applied identically to p and q, so exactness holds with
respect to the warped target. Temperature 0 is greedy: one-hot argmax distributions, no epsilon,
so a draft token is accepted iff it is the target's argmax, and otherwise the target's argmax
is emitted -- the same code path, exactly.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from specbench import environment
from specbench.model.decode.warp import Warp  # noqa: F401  (Warp's home; sampling's callers import it here)


def probs_by_definition(logits, warp: Warp):
    """What the warps mean, with full sorts: temperature, then top-k, then top-p (the nucleus of
    Holtzman et al. 2020: the most likely tokens whose mass before each is < top_p); ties at the
    cut are kept. probs() below is the same distribution, computed fast on the CPU."""
    if warp.greedy:
        return jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1], dtype=jnp.float32)
    logits = logits.astype(jnp.float32) * (1.0 / warp.temperature)  # one division: the scale
    if warp.top_k is not None and warp.top_k < logits.shape[-1]:
        kth = jnp.sort(logits, axis=-1)[..., -warp.top_k, None]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    pr = jax.nn.softmax(logits, axis=-1)
    if warp.nucleus:
        desc = -jnp.sort(-pr, axis=-1)
        threshold = jnp.min(
            jnp.where(jnp.cumsum(desc, -1) - desc < warp.top_p, desc, jnp.inf), -1, keepdims=True
        )
        pr = jnp.where(pr >= threshold, pr, 0.0)
        pr = pr / jnp.sum(pr, axis=-1, keepdims=True)
    return pr


def argmax(x):
    """First index of the maximum along the last axis.

    Same result as jnp.argmax, as two plain reductions: XLA's CPU argmax is a variadic
    (value, index) reduce that does not vectorise.
    """
    idx = jnp.arange(x.shape[-1], dtype=jnp.int32)
    is_max = x == jnp.max(x, axis=-1, keepdims=True)
    return jnp.min(jnp.where(is_max, idx, x.shape[-1]), axis=-1)


def probs(logits, warp: Warp):
    """[..., V] logits -> [..., V] float32 probabilities: probs_by_definition, without a sort of
    the vocabulary (a full sort of 50,257 logits is slow on the CPU; docs/performance.md)."""
    logits = logits.astype(jnp.float32)
    n_vocab = logits.shape[-1]
    if warp.greedy:
        return jax.nn.one_hot(argmax(logits), n_vocab, dtype=jnp.float32)
    logits = logits * (1.0 / warp.temperature)  # one division (temperature is traced): a product a token
    if warp.top_k is not None and warp.top_k < n_vocab:
        # keep every token at least as likely as the k-th (ties at the k-th are all kept). The
        # k-th is the min of top_k's values, not top_k(...)[..., -1:]: XLA rewrites that slice
        # into a full sort of the vocabulary.
        kth = jnp.min(lax.top_k(logits, warp.top_k)[0], axis=-1, keepdims=True)
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    pr = jax.nn.softmax(logits, axis=-1)
    if warp.nucleus:
        pr = jnp.where(pr >= nucleus_threshold(pr, warp.top_p), pr, 0.0)
        pr = pr / jnp.sum(pr, axis=-1, keepdims=True)
    return pr


NUCLEUS_FAST = 128  # nucleus_threshold's fast path looks at this many most likely tokens


def nucleus_threshold(pr, top_p: float):
    """[..., V] probabilities -> [..., 1]: the smallest probability inside the nucleus.

    The nucleus (Holtzman et al. 2020) is the smallest set of most likely tokens whose mass
    reaches top_p: sorted descending, token i is in while the mass before it is < top_p; ties
    with the last one are kept too (pr >= threshold). Instead of sorting the whole vocabulary,
    the threshold is found among the NUCLEUS_FAST most likely tokens (lax.top_k) whenever their
    mass reaches top_p, which settles it exactly; only when some row's nucleus is wider does the
    exact radix search below run.
    """
    top = lax.top_k(pr, min(NUCLEUS_FAST, pr.shape[-1]))[0]  # [..., M], descending
    mass_before = jnp.cumsum(top, axis=-1) - top
    fast = jnp.min(jnp.where(mass_before < top_p, top, jnp.inf), axis=-1, keepdims=True)
    if top.shape[-1] == pr.shape[-1]:  # the whole vocabulary is sorted: nothing is left to search
        return fast
    settled = jnp.all(jnp.sum(top, axis=-1) >= top_p)
    flat = pr.reshape(-1, pr.shape[-1])
    exact = lambda: jax.vmap(lambda row: _nucleus_threshold_radix(row, top_p))(flat).reshape(fast.shape)
    return lax.cond(settled, lambda: fast, exact)


def _nucleus_threshold_radix(pr, top_p: float):
    """nucleus_threshold of one row [V] by a radix search over the bits of the probabilities.

    For p >= 0 the float32 bit pattern, read as an integer key, orders like p. The threshold is
    the smallest key t whose mass strictly above it is < top_p; it is found 12 + 12 + 7 bits at a
    time: the mass of each bucket of keys sharing the prefix found so far, then the first
    bucket whose mass above (plus everything above the prefix) is < top_p.
    """
    key = lax.bitcast_convert_type(pr, jnp.int32)
    above_prefix, prefix = jnp.float32(0.0), jnp.int32(0)
    for shift, bits in ((19, 12), (7, 12), (0, 7)):
        inside = (key >> (shift + bits)) == prefix
        bucket = (key >> shift) & ((1 << bits) - 1)
        mass = jax.ops.segment_sum(jnp.where(inside, pr, 0.0), bucket, num_segments=1 << bits)
        above = jnp.cumsum(mass[::-1])[::-1] - mass  # mass in the buckets above each bucket
        first = jnp.argmax(above_prefix + above < top_p)
        above_prefix = above_prefix + above[first]
        prefix = (prefix << bits) | first.astype(jnp.int32)
    return lax.bitcast_convert_type(prefix, jnp.float32)


def sample(key, pr, block: int = 256):
    """Draw one token id from pr [V], probabilities or any weights >= 0 with a positive sum, by
    inverting the CDF with one uniform number scaled by that sum.

    One random number instead of V Gumbel draws (jax.random.categorical). The CDF is inverted in
    two levels, first over blocks of `block` tokens and then inside the chosen block, because a
    cumsum over all 50,257 entries is slow on the CPU. The chosen block is sliced from pr itself
    (the last block starts early enough to fit, its extra tokens masked), not from a padded copy,
    whose slice cost several times the rest (docs/performance.md, "The verdict at T > 0"). A token
    of weight 0 is never drawn: the index found has cdf[i-1] <= u < cdf[i], and the clips guard
    the rounding case u = total.
    """
    n_vocab = pr.shape[-1]
    block = min(block, n_vocab)  # a small vocabulary is one block, not padded to `block`
    n_blocks = -(-n_vocab // block)
    sums = jnp.sum(jnp.pad(pr, (0, n_blocks * block - n_vocab)).reshape(n_blocks, block), axis=-1)
    block_cdf = jnp.cumsum(sums)
    u = jax.random.uniform(key, dtype=pr.dtype) * block_cdf[-1]
    last_block = jnp.max(jnp.where(sums > 0, jnp.arange(n_blocks), 0))
    b = jnp.minimum(jnp.searchsorted(block_cdf, u, side="right"), last_block)
    u_in = u - jnp.where(b > 0, block_cdf[jnp.maximum(b - 1, 0)], 0.0)
    start = jnp.minimum(b * block, n_vocab - block)
    inner = jnp.where(start + jnp.arange(block) >= b * block, lax.dynamic_slice(pr, (start,), (block,)), 0.0)
    last_in = jnp.max(jnp.where(inner > 0, jnp.arange(block), 0))
    j = jnp.minimum(jnp.searchsorted(jnp.cumsum(inner), u_in, side="right"), last_in)
    return (start + j).astype(jnp.int32)


SAMPLERS = environment.SAMPLER.values[1:]
"""How draw picks a token at T > 0: `sample`'s two-level CDF inversion (one random number, a few
small passes: the CPU's) or `race` (one fused pass with a clock per token: an accelerator's)."""


def sampler_for(backend: str) -> str:
    """The sampler a backend's draws use: `cdf` on the CPU, `race` on an accelerator, unless
    SPECBENCH_SAMPLER names one of SAMPLERS. The one place the choice is made; rows record it."""
    asked = environment.SAMPLER.get()
    if asked in SAMPLERS:
        return asked
    return "cdf" if backend == "cpu" else "race"


def draw(key, logits, warp: Warp):
    """A token from the warped distribution, and that distribution: (token, probs), the token by
    this backend's sampler (sampler_for). Both samplers are exact: each token is drawn with its
    probability.

    At temperature 0 the token is the argmax itself: what `sample` returns for a one-hot, without
    the CDF work.
    """
    if warp.greedy:
        token = argmax(logits)
        return token, jax.nn.one_hot(token, logits.shape[-1], dtype=jnp.float32)
    pr = probs(logits, warp)
    pick = race if sampler_for(jax.default_backend()) == "race" else sample
    return pick(key, pr), pr


def race(key, w):
    """One token drawn with probability w(x) / sum(w), by an exponential race: each token gets an
    independent clock E_x ~ Exp(1) and the token of largest w(x) / E_x wins (the first arrival
    of independent exponential clocks of rates w(x); the Gumbel-max trick in another form). No
    normalisation, no sort, no data-dependent loop: one fixed-shape pass over the vocabulary,
    which is what a GPU wants. A token of weight 0 never wins while any weight is positive."""
    e = jax.random.exponential(key, w.shape, jnp.float32)
    return argmax(w / jnp.maximum(e, jnp.finfo(jnp.float32).tiny))  # E = 0 is float32's rounding of tiny E


def race_residual(key, q, p):
    """sample_residual by a race over max(q - p, 0), or over q where that is all zero."""
    r = jnp.maximum(q - p, 0.0)
    return race(key, jnp.where(jnp.sum(r) > 0, r, q))


def sample_residual(key, q, p):
    """A token from residual(q, p) = norm(max(q - p, 0)), drawn from the unnormalised weights
    (sample scales by their sum), or from q where they are all zero, as residual falls back."""
    r = jnp.maximum(q - p, 0.0)
    return lax.cond(jnp.sum(r) > 0, lambda: sample(key, r), lambda: sample(key, q))


def residual(q, p):
    """norm(max(q - p, 0)): the distribution to resample from after a rejection.

    If q <= p everywhere (only when q == p, where rejection has probability 0 and can occur
    only through rounding), fall back to q.
    """
    r = jnp.maximum(q - p, 0.0)
    total = jnp.sum(r, axis=-1, keepdims=True)
    return jnp.where(total > 0, r / jnp.where(total > 0, total, 1.0), q)


def with_zero_row(p):
    """p [K, V] with a row of zeros after its last: the draft's distribution at position K, where
    nothing was drafted, so a residual there is the target's own row."""
    return jnp.concatenate([p, jnp.zeros_like(p[:1])], axis=0)


def draft_row(p, i):
    """with_zero_row(p)[i] without copying p: row i of p [K, V], or zeros at i = K. The row is
    made once (an optimization barrier): fused into each consumer's loop, the dynamic slice
    made those loops several times slower on the CPU (docs/performance.md)."""
    return lax.optimization_barrier(jnp.where(i < p.shape[0], p[jnp.minimum(i, p.shape[0] - 1)], 0.0))


@dataclasses.dataclass(frozen=True)
class TargetRows:
    """The target's logits at a round's K+1 positions [K+1, V] (with k drafts [k, K+1, V]) and
    the warp: rows[i] (rows[j, i]) is that row's warped distribution, computed when it is read.
    A verdict that stops at the first rejection reads only the rows it tests, so the warping of
    the rows after it is never computed."""

    logits: jax.Array
    warp: Warp

    def __getitem__(self, i):
        return probs(self.logits[i], self.warp)

    def all(self):
        """Every row's warped distribution: [K+1, V]."""
        return probs(self.logits, self.warp)


def all_rows(q):
    """q as a [K+1, V] array of probabilities: every row of a TargetRows, or q itself."""
    return q.all() if isinstance(q, TargetRows) else q


def accept_reject(key, draft_tokens, p, q, n_drafted=None):
    """One round's verdict, token by token (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023,
    Algorithm 2).

    draft_tokens [K] were drawn from p [K, V]; q is the target at the same positions plus one:
    [K+1, V] probabilities, or a TargetRows. Returns (n_accepted in 0..K, the emitted token:
    resampled from the residual at the first rejection, or the bonus token from q[K] if all K
    were accepted). Draft i is accepted iff u_i p_i(x_i) < q_i(x_i), in order, so only rows
    0 .. n_accepted of q are read: (1 - alpha^(K+1)) / (1 - alpha) of the K + 1 in expectation
    at acceptance alpha.

    n_drafted (default K): only the first n_drafted drafts were proposed; the rows of p after
    them must be zero, so at position n_drafted the residual is q itself: the target's own draw.
    """
    n_draft = draft_tokens.shape[0]
    n_drafted = n_draft if n_drafted is None else n_drafted
    k_accept, k_emit = jax.random.split(key)
    u = jax.random.uniform(k_accept, (n_draft,))
    p_x = jnp.take_along_axis(p, draft_tokens[:, None], axis=-1)[:, 0]  # > 0 where drafted: x ~ p

    def accepted(state):  # u < min(1, q/p), without dividing
        i, row = state
        j = jnp.minimum(i, n_draft - 1)
        return (i < n_drafted) & (u[j] * p_x[j] < row[draft_tokens[j]])

    def next_row(state):
        i, _ = state
        return i + 1, q[i + 1]

    n_accepted, row = lax.while_loop(accepted, next_row, (jnp.int32(0), q[0]))
    # at n_accepted == K the residual of q[K] against the zero row is q[K] itself
    return n_accepted, sample_residual(k_emit, row, draft_row(p, n_accepted))


def all_rows_accept_reject(key, draft_tokens, p, q, n_drafted=None, draw_residual=race_residual):
    """accept_reject as one fixed-shape computation over all K+1 rows, for a GPU: the rows warped
    together, every coin drawn at once (the same coins as accept_reject for the same key), the
    first rejection found by a cumulative product of the per-draft verdicts, and the emitted
    token drawn by an exponential race (race_residual). The same distribution as accept_reject,
    without its data-dependent loop, whose predicate a GPU copies to the host each iteration.
    `draw_residual` is the tests' hook for a broken variant."""
    q = all_rows(q)  # [K+1, V]
    n_draft = draft_tokens.shape[0]
    n_drafted = n_draft if n_drafted is None else n_drafted
    k_accept, k_emit = jax.random.split(key)
    u = jax.random.uniform(k_accept, (n_draft,))
    p_x = jnp.take_along_axis(p, draft_tokens[:, None], axis=-1)[:, 0]
    q_x = jnp.take_along_axis(q[:n_draft], draft_tokens[:, None], axis=-1)[:, 0]
    passed = (u * p_x < q_x) & (jnp.arange(n_draft) < n_drafted)
    n_accepted = jnp.sum(jnp.cumprod(passed.astype(jnp.int32))).astype(jnp.int32)
    return n_accepted, draw_residual(k_emit, q[n_accepted], draft_row(p, n_accepted))


def greedy_verdict(draft_tokens, target_tokens, n_drafted=None):
    """accept_reject at temperature 0, on token ids: with one-hot p = [x] and q = [y], draft x is
    accepted iff u < q(x) / p(x) = [x == y], so iff x == y, and the residual max(q - p, 0) of a
    rejection is [y]: the drafts are accepted up to the first that is not the target's argmax, then
    the argmax is emitted. target_tokens [K+1]: the argmax of each row of the target's logits.
    Every exact verification method reduces to this at T = 0."""
    n_draft = draft_tokens.shape[0]
    accepted = draft_tokens == target_tokens[:n_draft]
    if n_drafted is not None:
        accepted &= jnp.arange(n_draft) < n_drafted
    n_accepted = jnp.sum(jnp.cumprod(accepted.astype(jnp.int32))).astype(jnp.int32)
    return n_accepted, target_tokens[n_accepted]


def p_width(warp: Warp, n_vocab: int) -> int:
    """Columns of the p a drafter returns: the vocabulary, or none at T = 0, where the verdict reads
    the draft tokens alone (sampling.greedy_verdict) and p would be one-hot rows never read."""
    return 0 if warp.greedy else n_vocab


def zero_after(p, n_drafted):
    """p with its rows at and after n_drafted zero: the drafts not proposed."""
    return jnp.where(jnp.arange(p.shape[0])[:, None] < n_drafted, p, 0.0)
