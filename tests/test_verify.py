"""Verification beyond one draft token at a time (verify.py): block verification, k drafts per
round and the acceptance dial. Each is exact: the same tokens as AR at T = 0, and at T = 1 every
emitted token, tested by its role in the round, follows the target; a broken variant fails."""

import functools
import itertools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model import generate
from specbench.model.decode import drafters, verify
from specbench.model.decode.sampling import (
    Warp,
    accept_reject,
    all_rows_accept_reject,
    argmax,
    greedy_verdict,
    race,
    residual,
    sample,
    with_zero_row,
)
from specbench.model.decode.verify import (
    all_rows_block_verdict,
    all_rows_gbv_verdict,
    all_rows_multi_draft_verdict,
    block_hazards,
    block_verdict,
    gbv_verdict,
    multi_draft_verdict,
)
from specbench.model.generate import autoregressive, speculative

from conftest import make_small_target
from exactness import P_THRESHOLD, TARGET, noisy_copy, role_p_values, round_samples

# ---------------------------------------------------------------------------------------------
# The paper's toy case, exactly


def expected_accepted(accept_probs, p_draft, K: int) -> float:
    """E[accepted drafts] of a context-free round, by enumerating the K drafts: accept_probs(xs)
    gives P(tau = i) for i = 0..K given the drafts xs."""
    total = 0.0
    for xs in itertools.product(range(len(p_draft)), repeat=K):
        weight = float(np.prod([p_draft[x] for x in xs]))
        total += weight * sum(i * pr for i, pr in enumerate(accept_probs(xs)))
    return total


def test_the_papers_toy_case_block_11_9_against_token_10_9():
    q, p, K = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3]), 2  # M_b = q (target), M_s = p (draft)

    def token_level(xs):  # accept each draft with min(1, q/p), up to the first rejection
        a = [min(1.0, q[x] / p[x]) for x in xs]
        return [(1 - a[0]), a[0] * (1 - a[1]), a[0] * a[1]]

    def block(xs):  # tau = the last i whose coin passes h_i (Sun et al. 2025, Algorithm 2)
        h, _ = block_hazards(
            jnp.asarray(xs), jnp.asarray([p, p], jnp.float32), jnp.asarray([q] * 3, jnp.float32)
        )
        h = np.asarray(h, np.float64)
        return [
            (1 - h[1]) * (1 - h[2]),  # no coin passes
            h[1] * (1 - h[2]),
            h[2],
        ]

    assert expected_accepted(token_level, p, K) == pytest.approx(float(Fraction(10, 9)), abs=1e-12)
    assert expected_accepted(block, p, K) == pytest.approx(float(Fraction(11, 9)), abs=1e-6)


@pytest.mark.parametrize("verdict", [block_verdict, all_rows_accept_reject, all_rows_block_verdict])
def test_verdicts_at_one_hot_rows_are_the_greedy_verdict(verdict):
    rng = np.random.default_rng(0)
    judge = jax.jit(verdict)
    for _ in range(50):
        K, V = 4, 6
        drafts = rng.integers(0, 3, K)
        target = rng.integers(0, 3, K + 1)
        p = jax.nn.one_hot(drafts, V)
        q = jax.nn.one_hot(target, V)
        key = jax.random.PRNGKey(int(rng.integers(1 << 30)))
        got = judge(key, jnp.asarray(drafts), p, q)
        want = greedy_verdict(jnp.asarray(drafts), jnp.asarray(target))
        assert (int(got[0]), int(got[1])) == (int(want[0]), int(want[1]))


def test_the_all_rows_verdict_accepts_what_the_lazy_one_accepts_with_the_same_coins():
    # the same key draws the same coins, and the first rejection found by a cumulative product is
    # the one the lazy loop stops at: only the emitted token's draw differs (a race, not the CDF)
    rng = np.random.default_rng(5)
    K, V, n = 4, 7, 400
    p = jnp.asarray(rng.dirichlet(np.ones(V), (n, K)), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(V), (n, K + 1)), jnp.float32)
    drafts = jnp.asarray(rng.integers(0, V, (n, K)))
    drafted = jnp.asarray(rng.integers(0, K + 1, n))
    p = jnp.where(jnp.arange(K)[None, :, None] < drafted[:, None, None], p, 0.0)  # rows not proposed: 0
    keys = jax.random.split(jax.random.PRNGKey(3), n)
    both = lambda f: jax.jit(jax.vmap(f))(keys, drafts, p, q, drafted)[0]
    lazy, fixed = both(accept_reject), both(all_rows_accept_reject)
    np.testing.assert_array_equal(lazy, fixed)
    assert 0 < int(lazy.min()) or int(lazy.max()) > 0  # a spread of outcomes, not all zero


def uniform_race(key, q, p):
    """Negative control: the race run with uniform clocks, argmax w(x) / U_x, which favours the
    heavy tokens beyond their weight."""
    r = jnp.maximum(q - p, 0.0)
    w = jnp.where(jnp.sum(r) > 0, r, q)
    return argmax(w / jax.random.uniform(key, w.shape, minval=1e-12))


def test_a_race_draws_each_token_with_its_weight_and_uniform_clocks_do_not():
    from exactness import chi_square_p

    w = jnp.asarray([0.0, 3.0, 1.0, 0.5, 0.0, 2.0, 0.25, 1.25])  # unnormalised, zeros included
    keys = jax.random.split(jax.random.PRNGKey(11), 20000)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: race(k, w)))(keys))
    wrong = np.asarray(jax.jit(jax.vmap(lambda k: uniform_race(k, w, jnp.zeros_like(w))))(keys))
    expected = np.asarray(w / w.sum())
    assert not np.isin(draws, [0, 4]).any()  # weight 0: never drawn
    assert chi_square_p(draws, expected) > P_THRESHOLD
    assert chi_square_p(wrong, expected) < P_THRESHOLD


def test_each_backend_gets_its_verdict_kind_and_every_method_has_both():
    assert verify.kind_for("cpu") == "lazy" and verify.kind_for("gpu") == "all-rows"
    assert set(verify.VERDICTS) == set(verify.KINDS)
    for kind in verify.KINDS:
        # traversal judges trees, whose verdicts are the same walk on every device (verdict_of)
        assert set(verify.VERDICTS[kind]) == {*verify.METHODS, "drafts"} - {"traversal"}
    drafter = drafters.Drafter(drafters.KINDS["model"], TARGET, drafts=2)
    assert verify.verdict_of(drafter, "all-rows") is all_rows_multi_draft_verdict
    assert (
        verify.verdict_of(drafters.Drafter(drafters.KINDS["model"], TARGET, verify="block"), "lazy")
        is block_verdict
    )


def test_multi_draft_verdict_with_one_draft_is_token_by_token_in_distribution():
    # k = 1: recursive rejection over one candidate is accept_reject itself; the same coins give
    # the same number of accepted drafts
    rng = np.random.default_rng(1)
    K, V = 3, 5
    p = jnp.asarray(rng.dirichlet(np.ones(V), K), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(V), K + 1), jnp.float32)
    drafts = jnp.asarray(rng.integers(0, V, K))
    # the 300 verdicts in one compiled program, not 300 eager calls op by op
    verdict = lambda key: multi_draft_verdict(key, drafts[None], p[None], q[None], jnp.array([K]))[0]
    n = np.asarray(jax.jit(jax.vmap(verdict))(jax.vmap(jax.random.PRNGKey)(jnp.arange(300))))
    a = np.minimum(1, np.asarray(q)[np.arange(K), drafts] / np.asarray(p)[np.arange(K), drafts])
    mean = sum(np.prod(a[:i]) for i in range(1, K + 1))
    assert np.mean(n) == pytest.approx(mean, abs=4 * np.sqrt(K * K / 4 / 300) + 0.05)


# ---------------------------------------------------------------------------------------------
# T = 0: the same tokens as AR


@pytest.fixture(scope="module")
def draft(target):
    return noisy_copy(target, 0.3, 5)


PROMPTS = [list(np.random.default_rng(i).integers(0, 97, 2 + i % 5)) for i in range(4)]


@pytest.mark.parametrize("method", ["block", "drafts-2", "drafts-3", "gbv-3", "dial-0.5", "dial-0", "dial-1"])
def test_greedy_tokens_equal_autoregressive(target, draft, method):
    if method.startswith("dial"):
        drafter = drafters.dial_drafter(float(method.split("-")[1]))
    elif method == "block":
        drafter = drafters.Drafter(drafters.KINDS["model"], draft.config, verify="block")
    elif method == "gbv-3":
        drafter = drafters.Drafter(drafters.KINDS["model"], draft.config, verify="gbv", drafts=3)
    else:
        drafter = drafters.Drafter(drafters.KINDS["model"], draft.config, drafts=int(method.split("-")[1]))
    for prompt in PROMPTS:
        ar, _ = autoregressive(target, prompt, 20, Warp(0.0), seed=0)
        sd, stats = speculative(draft, target, prompt, 20, 4, Warp(0.0), seed=0, drafter=drafter)
        np.testing.assert_array_equal(sd, ar)
    if method == "dial-1":
        assert stats.alpha == 1.0
    if method == "dial-0":
        assert stats.alpha == 0.0


@pytest.mark.parametrize("a", [0.25, 0.5, 0.9])
def test_the_dial_accepts_each_draft_with_probability_a(target, a):
    drafter = drafters.dial_drafter(a)
    evaluated = accepted = 0
    for seed, prompt in enumerate(PROMPTS * 6):
        _, stats = speculative(None, target, prompt, 110, 4, Warp(0.0), seed=seed, drafter=drafter)
        evaluated += sum(stats.evaluated)
        accepted += sum(stats.accepted)
    assert evaluated >= 2000
    sigma = np.sqrt(a * (1 - a) / evaluated)
    assert abs(accepted / evaluated - a) < 4 * sigma, (accepted / evaluated, a, evaluated)


def test_the_dial_needs_its_reference_and_runs_one_greedy_sequence(target):
    from specbench.errors import DecodeError

    with pytest.raises(DecodeError, match="greedy tokens"):
        generate.draft_params_for(drafters.dial_drafter(0.5), None, target)
    with pytest.raises(DecodeError, match="temperature 0"):
        speculative(None, target, PROMPTS[0], 10, 4, Warp(1.0), drafter=drafters.dial_drafter(0.5))
    with pytest.raises(ValueError, match="acceptance"):
        drafters.Drafter(drafters.KINDS["dial"], acceptance=1.5)
    with pytest.raises(ValueError, match="block verification judges chain, not drafts"):
        drafters.Drafter(drafters.KINDS["model"], target.config, verify="block", drafts=2)


# ---------------------------------------------------------------------------------------------
# T = 1: every token by its role in the round


def broken_block_verdict(key, draft_tokens, p, q, n_drafted=None):
    """Negative control: the residual after tau drafts drawn from norm(max(q - p, 0)), without eta_tau."""
    tau, _ = block_verdict(key, draft_tokens, p, q, n_drafted)
    return tau, sample(jax.random.fold_in(key, 3), residual(q[tau], with_zero_row(p)[tau]))


def broken_all_rows_verdict(key, draft_tokens, p, q, n_drafted=None):
    """Negative control for the all-rows verdict: its residual raced with uniform clocks."""
    return all_rows_accept_reject(key, draft_tokens, p, q, n_drafted, draw_residual=uniform_race)


def broken_multi_draft_verdict(key, draft_tokens, p, q, n_drafted):
    """Negative control: every candidate tried against q itself, the residual never updated."""
    return multi_draft_verdict(key, draft_tokens, p, q, n_drafted, update_residual=False)


def unskewed_gbv_verdict(key, draft_tokens, p, q, n_drafted):
    """Negative control: the greedy path judged against the draft's p, not the distribution the
    greedy choice among k sequences made (the skew)."""
    return gbv_verdict(key, draft_tokens, p, q, n_drafted, skew=False)


def wrong_bonus_dynamic(key, draft_tokens, p, q, n_drafted=None):
    """Negative control for dynamic K: when every proposed draft is accepted, the token after them
    comes from the row before (q[n_drafted - 1]), the last draft's, instead of q[n_drafted]."""
    n_accepted, emitted = accept_reject(key, draft_tokens, p, q, n_drafted)
    wrong = sample(jax.random.fold_in(key, 2), q[jnp.maximum(n_drafted - 1, 0)])
    return n_accepted, jnp.where((n_accepted == n_drafted) & (n_drafted > 0), wrong, emitted)


@pytest.fixture(scope="module")
def role_pair():
    target = make_small_target()
    return noisy_copy(target, 0.3, 13), target


CASES = {  # name: (drafter settings, verdict, exact?)
    "token": (dict(), accept_reject, True),
    "token-all-rows": (dict(), all_rows_accept_reject, True),
    "token-all-rows-uniform-race": (dict(), broken_all_rows_verdict, False),
    "block": (dict(verify="block"), block_verdict, True),
    "block-all-rows": (dict(verify="block"), all_rows_block_verdict, True),
    "block-no-eta": (dict(verify="block"), broken_block_verdict, False),
    "drafts-2": (dict(drafts=2), None, True),
    "drafts-3": (dict(drafts=3), multi_draft_verdict, True),
    "drafts-3-all-rows": (dict(drafts=3), all_rows_multi_draft_verdict, True),
    "drafts-3-no-residual": (dict(drafts=3), broken_multi_draft_verdict, False),
    "gbv-3": (dict(drafts=3, verify="gbv"), gbv_verdict, True),
    "gbv-3-all-rows": (dict(drafts=3, verify="gbv"), all_rows_gbv_verdict, True),
    "gbv-3-unskewed": (dict(drafts=3, verify="gbv"), unskewed_gbv_verdict, False),
    "dynamic-K": (dict(confidence=0.6), None, True),
    "dynamic-K-wrong-bonus-row": (dict(confidence=0.6), wrong_bonus_dynamic, False),
}


def role_draws(shared, role_pair, settings):
    """(tokens, accepted, drafted) of the drafter with these settings, for each case of CASES that
    has them: the exact verdict first, then its broken controls, all drawn by one program."""
    draft, target = role_pair
    cases = [name for name, (s, _, _) in CASES.items() if s == settings]

    def make():
        drafter = drafters.Drafter(drafters.KINDS["model"], draft.config, **settings)
        verdicts = [CASES[name][1] for name in cases]
        draws = round_samples(draft.params, target, [3, 7, 1], Warp(1.0), 3, drafter, verdicts)
        return dict(zip(cases, draws))

    return shared(("roles", *sorted(settings.items())), make)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_role_of_a_round_follows_the_target(shared, role_pair, case, record_property):
    draft, target = role_pair
    settings, _, exact = CASES[case]
    warp, K, prompt = Warp(1.0), 3, [3, 7, 1]
    tokens, accepted, drafted = role_draws(shared, role_pair, settings)[case]
    p_values = role_p_values(target, prompt, warp, tokens, accepted, drafted, K)
    record_property("p_values", p_values)
    print(f"\n{case}: " + ", ".join(f"{role} {p:.2g}" for role, p in sorted(p_values.items())))
    assert {"draft 1", "draft 2", "draft 3", "bonus", "after bonus", "after rejection"} <= set(p_values)
    if exact:
        assert min(p_values.values()) > P_THRESHOLD
    else:
        assert min(p_values.values()) < P_THRESHOLD


@pytest.mark.slow
def test_block_verification_accepts_more_per_round_than_token_by_token(shared, role_pair):
    # the exact samplers' draws of the tests above
    mean = {
        name: role_draws(shared, role_pair, CASES[name][0])[name][1].mean() for name in ("token", "block")
    }
    assert mean["block"] > mean["token"]


@pytest.mark.slow
def test_greedy_multi_path_block_verification_accepts_more_than_specinfers_recursion(shared, role_pair):
    # Thomas and Pal 2026 report more tokens per round than SpecInfer's recursion over k drafts
    mean = {
        name: role_draws(shared, role_pair, CASES[name][0])[name][1].mean() for name in ("drafts-3", "gbv-3")
    }
    print(f"\naccepted per round, k = 3, K = 3: {mean}")
    assert mean["gbv-3"] > mean["drafts-3"]


def test_gbvs_skew_is_the_best_of_k_draws_at_the_root():
    """At the root (A = 0) the skewed draft is the distribution of the highest-ranked (by q/p) of
    k independent draws from p, which enumeration gives exactly."""
    p = jnp.asarray([0.1, 0.4, 0.3, 0.2])
    q = jnp.asarray([0.4, 0.2, 0.3, 0.1])  # ranks by q/p: 3 (0.5), 1 (0.5), 2 (1), 0 (4)
    k = 3
    best = np.zeros(4)
    rank = np.argsort(np.asarray(q / p), kind="stable").argsort()
    for draws in itertools.product(range(4), repeat=k):
        best[max(draws, key=lambda x: (rank[x], -draws.index(x)))] += np.prod([float(p[x]) for x in draws])
    captured = {}

    def block(key, drafts, skewed, q_rows, n_drafted):
        captured["s"] = skewed[0]
        return jnp.int32(0), jnp.int32(0)

    drafts = jnp.asarray([[0], [1], [2]], jnp.int32)  # one draft each: the root's skew only
    gbv_verdict(
        jax.random.PRNGKey(0),
        drafts,
        jnp.stack([p[None]] * k),
        jnp.stack([jnp.stack([q, q])] * k),
        jnp.full(k, 1),
        block=block,
    )
    np.testing.assert_allclose(captured["s"], best, rtol=1e-5)


def test_gbv_sorting_only_the_drafts_support_gives_the_same_verdict():
    """A draft vocabulary bounds the tokens with p > 0: ranking those alone (support) gives the
    same F where p > 0, so the same skew and the same verdict for the same coins."""
    rng = np.random.default_rng(4)
    k, K, V, S = 3, 3, 40, 12
    kept = np.sort(rng.choice(V, S, replace=False))
    p = np.zeros((k, K, V), np.float32)
    p[..., kept] = rng.dirichlet(np.ones(S), (k, K))
    q = rng.dirichlet(np.ones(V), (k, K + 1)).astype(np.float32)
    ratio, row = jnp.asarray(q[0, 0] / (p[0, 0] + 1e-30)), jnp.asarray(p[0, 0])
    full, narrow = verify.ranked_mass(ratio, row), verify.ranked_mass(ratio, row, support=S)
    np.testing.assert_allclose(np.asarray(narrow)[kept], np.asarray(full)[kept], rtol=1e-6)
    drafts = jnp.asarray(
        np.stack([[rng.choice(kept, p=p[j, i, kept]) for i in range(K)] for j in range(k)]), jnp.int32
    )
    full_verdict, narrow_verdict = jax.jit(gbv_verdict), jax.jit(functools.partial(gbv_verdict, support=S))
    for seed in range(20):
        key = jax.random.PRNGKey(seed)
        a = full_verdict(key, drafts, jnp.asarray(p), jnp.asarray(q), jnp.full(k, K))
        b = narrow_verdict(key, drafts, jnp.asarray(p), jnp.asarray(q), jnp.full(k, K))
        assert [int(x) for x in a] == [int(x) for x in b]
