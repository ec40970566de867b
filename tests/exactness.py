"""What the exactness tests share: the small models, and the negative controls beyond the one
the package's self-test has. The exact marginals, the chi-square test, its threshold and the
broken sampler live in specbench/selftest.py, which `specbench report` runs too."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.measure import selftest
from specbench.measure.selftest import (  # noqa: F401  (re-exported for the test modules)
    N_SAMPLES,
    P_THRESHOLD,
    SMALL_D,
    SMALL_T,
    broken_accept_reject,
    chi_square_p,
)
from specbench.model.decode.sampling import accept_reject, sample
from specbench.model.kernels import cpu, pallas
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.layouts import kernel_layout, pallas_layout
from specbench.model.nets.network import Model

MANY_SAMPLES = {"xla_backend_optimization_level": 1}
"""XLA's options for a program that draws thousands of samples, or scores thousands of
continuations (target_marginals), at once: the rest of the suite
compiles without LLVM's optimisation (conftest.py), which would leave such a program running far
longer than it compiles (docs/internals.md, "How the suite stays affordable")."""

sampled_tokens = functools.partial(selftest.sampled_tokens, compiler_options=MANY_SAMPLES)
target_marginals = functools.partial(selftest.target_marginals, compiler_options=MANY_SAMPLES)

DRAFTING = {
    "chain": {},
    "block": dict(verify="block"),
    "2 drafts": dict(drafts=2),
    "dynamic K": dict(confidence=0.4),
    "draft vocabulary": dict(vocab=60),
}
"""The ways of drafting a greedy SD = AR test runs a drafter through (dataclasses.replace on its
Drafter): a chain, block verification, two drafts, dynamic K, a 60-token draft vocabulary."""

TARGET = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=128, n_vocab=97)
DRAFT = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128, n_vocab=97)


def with_kernel(*models: Model) -> tuple[Model, ...]:
    """The models in the CPU kernel's layout (layouts.kernel_layout), or a skip where it cannot run."""
    if cpu.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {cpu.unavailable()}")
    return tuple(Model(m.name, m.config, kernel_layout(m.params), m.source) for m in models)


def with_pallas(*models: Model) -> tuple[Model, ...]:
    """The models marked for the fused Pallas kernels (layouts.pallas_layout), those whose shapes
    they tile; on the CPU they run interpreted (pallas.py)."""
    fits = lambda m: pallas.unsupported(m.config.n_embd, m.config.n_head) is None
    mark = lambda m: Model(m.name, m.config, pallas_layout(m.params), m.source) if fits(m) else m
    return tuple(mark(m) for m in models)


def noisy_copy(model: Model, noise: float, seed: int) -> Model:
    """The same network with relative noise on every weight: a draft that agrees often, not always."""
    rng = np.random.default_rng(seed)
    noisy = lambda x: x + noise * jnp.std(x) * jnp.asarray(rng.normal(size=x.shape), x.dtype)
    return Model("noisy", model.config, jax.tree_util.tree_map(noisy, model.params), "random")


def wrong_bonus_accept_reject(key, draft_tokens, p, q, n_drafted=None):
    """Negative control: when every draft is accepted, the bonus token comes from q[K-1], the last
    draft's row, instead of q[K]. Positions 1..K are untouched; only the bonus position shows it."""
    n_accepted, emitted = accept_reject(key, draft_tokens, p, q, n_drafted)
    K = draft_tokens.shape[0]
    return n_accepted, jnp.where(n_accepted == K, sample(jax.random.fold_in(key, 2), q[K - 1]), emitted)


# ---------------------------------------------------------------------------------------------
# Per role: every emitted token tested by its place in the round, against the target's exact
# distribution given that sample's own prefix


def round_samples(
    draft_params, target, prompt, warp, K, drafter, verdicts=(None,), n_rounds=2, n_samples=N_SAMPLES
):
    """For each verdict (None: the drafter's own, verify.verdict_of), n_samples independent
    generations of n_rounds rounds each: (tokens [S, L], accepted [S, R], drafted [S, R]), tokens
    including the prompt. One compiled program draws them all (selftest.one_of)."""
    from jax import lax

    from specbench.model.decode import decoding
    from specbench.model.decode.verify import verdict_of

    P, max_len = len(prompt), target.config.n_ctx  # the small models' 16: room for 2 rounds of K = 3
    buf = jnp.asarray(np.array(prompt + [0] * (8 - len(prompt)), np.int32))

    def one(draft_params, target_params, key, index):
        state = decoding.spec_start(
            draft_params, target_params, buf, jnp.int32(P), key, drafter, target.config, warp, max_len, K
        )
        judge = selftest.one_of([v or verdict_of(drafter) for v in verdicts], index)

        def body(s, _):
            s, rnd = decoding.spec_round(
                draft_params, target_params, s, drafter, target.config, warp, K, judge
            )
            return s, (rnd.n_accepted, rnd.n_drafted)

        state, (accepted, drafted) = lax.scan(body, state, None, length=n_rounds)
        return state.tokens, accepted, drafted

    keys = jax.random.split(jax.random.PRNGKey(7), n_samples)
    draw = jax.jit(jax.vmap(one, in_axes=(None, None, 0, None)), compiler_options=MANY_SAMPLES)
    return [
        tuple(np.asarray(x) for x in draw(draft_params, target.params, keys, jnp.int32(i)))
        for i in range(len(verdicts))
    ]


def role_p_values(target, prompt, warp, tokens, accepted, drafted, K) -> dict[str, float]:
    """The chi-square p-value of each role's tokens against the sum, over the tokens of that role,
    of q(. | that token's own prefix), computed by the target's uncached forward pass:

        "draft i"        the round's i-th token (i = 1..K), an accepted draft or the token that
                         replaced the first rejected one;
        "bonus"          the token after every proposed draft was accepted;
        "after bonus", "after rejection"   the first token of the next round.

    Pooling positions would hide a bias that changes sign between them (issue 33)."""
    from specbench.model.decode.sampling import probs
    from specbench.model.nets.families import family_of

    P, uncached = len(prompt), family_of(target.config).reading.forward  # GPT-2's or a Llama's
    forward = jax.vmap(lambda t: probs(uncached(target.params, t, target.config), warp))
    q = np.asarray(jax.jit(forward, compiler_options=MANY_SAMPLES)(tokens))
    V = q.shape[-1]
    # each emitted token as (role, sample, position), a round at a time over all samples at once
    roles, samples, places = [], [], []

    def add(role, where, pos):
        roles.append(np.broadcast_to(np.asarray(role, object), where.shape)[where])
        samples.append(np.flatnonzero(where))
        places.append(pos[where])

    S, every = tokens.shape[0], np.ones(tokens.shape[0], bool)
    pos, previous = np.full(S, P + 1), None  # token P is the prefill's draw
    for a, d in zip(accepted.T, drafted.T):
        for i in range(K + 1):
            add(np.where((i == a) & (a == d), "bonus", f"draft {i + 1}"), i <= a, pos + i)
        if previous is not None:
            add(previous, every, pos)
        previous = np.where(a == d, "after bonus", "after rejection")
        pos = pos + a + 1
    roles, samples, places = (np.concatenate(x) for x in (roles, samples, places))
    observed, expected = {}, {}
    for role in dict.fromkeys(roles):
        s, at = samples[roles == role], places[roles == role]
        observed[role] = np.bincount(tokens[s, at], minlength=V).astype(float)
        # q[s, at - 1]: the distribution of token `at` given the tokens before it
        expected[role] = q[s, at - 1].sum(axis=0, dtype=np.float64)
    p_values = {}
    for role in observed:
        n = observed[role].sum()
        p_values[role] = chi_square_counts(observed[role], expected[role] / n)
    return p_values


def chi_square_counts(observed, expected_probs):
    """chi_square_p from counts instead of samples."""
    samples = np.repeat(np.arange(len(observed)), observed.astype(int))
    return chi_square_p(samples, expected_probs)


def assert_follows_target(draft: Model, target: Model, prompt, K: int = 2, positions: int = 3) -> None:
    """SD's first `positions` tokens at T = 1, over many keys, against the target's exact marginals
    (enumerated): every position passes the chi-square test, and the broken verdict (on a rejection
    it resamples from q, not the residual) fails at a position after the first."""
    from specbench.model.decode.sampling import Warp

    warp = Warp(1.0)
    exact = target_marginals(target, prompt, warp, positions)
    verdicts = (accept_reject, broken_accept_reject)
    tokens, broken = sampled_tokens(draft, target, prompt, warp, K, verdicts, positions)
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in range(positions)]
    assert min(p_values) > P_THRESHOLD, p_values
    broken_p = [chi_square_p(broken[:, i], exact[i]) for i in range(1, positions)]
    assert max(broken_p) < P_THRESHOLD, broken_p
