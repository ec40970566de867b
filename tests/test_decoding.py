"""Exactness of speculative sampling, and the statistics it reports."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.errors import DecodeError
from specbench.measure import timing
from specbench.model.decode.sampling import (
    TargetRows,
    Warp,
    accept_reject,
    greedy_verdict,
    probs,
    residual,
    sample,
    sample_residual,
)
from specbench.model.decode.stats import DecodeStats
from specbench.model.generate import autoregressive, speculative
from specbench.model.nets.gpt2 import GPT2Config

from conftest import random_model
from exactness import (
    DRAFT,
    N_SAMPLES,
    P_THRESHOLD,
    broken_accept_reject,
    chi_square_p,
    noisy_copy,
    sampled_tokens,
    target_marginals,
    with_kernel,
    wrong_bonus_accept_reject,
)


@pytest.fixture(scope="module")
def pairs(target):
    return {"poor": random_model(DRAFT, 1, "poor-draft", scale=20), "agreeing": noisy_copy(target, 0.05, 5)}


PROMPTS = [list(np.random.default_rng(i).integers(0, 97, 1 + i % 9)) for i in range(12)]


@pytest.mark.parametrize("pair", ["poor", "agreeing", "agreeing-kernel"])
def test_greedy_speculative_equals_autoregressive(target, pairs, pair):
    draft = pairs[pair.removesuffix("-kernel")]
    if pair.endswith("-kernel"):  # every step through the CPU kernel: 1-token, verify and prefill rows
        draft, target = with_kernel(draft, target)
    alphas = []
    for prompt in PROMPTS:
        ar, _ = autoregressive(target, prompt, 24, max_len=64)
        for K in (1, 2, 4, 7):
            sd, st = speculative(draft, target, prompt, 24, K, max_len=64)
            np.testing.assert_array_equal(sd, ar, err_msg=f"prompt {prompt}, K={K}")
            alphas.append(st.alpha)
    host, _ = speculative(draft, target, PROMPTS[0], 24, 4, max_len=64, device_loop=False)
    np.testing.assert_array_equal(host, autoregressive(target, PROMPTS[0], 24, max_len=64)[0])
    # the two pairs really are different kinds of draft
    if pair.startswith("poor"):
        assert np.mean(alphas) < 0.5
    else:
        assert np.mean(alphas) > 0.6


def test_host_loop_and_device_loop_agree(target, pairs):
    for warp in (Warp(1.0, top_k=20),):  # the greedy host loop is checked in the greedy-equality test
        a, sa = speculative(pairs["agreeing"], target, [3, 1, 4], 30, 3, warp, seed=9, device_loop=True)
        b, sb = speculative(pairs["agreeing"], target, [3, 1, 4], 30, 3, warp, seed=9, device_loop=False)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(sa.accepted_hist, sb.accepted_hist)
        c, _ = autoregressive(target, [3, 1, 4], 30, warp, seed=9, device_loop=True)
        d, _ = autoregressive(target, [3, 1, 4], 30, warp, seed=9, device_loop=False)
        np.testing.assert_array_equal(c, d)


def test_same_seed_same_tokens_and_other_seed_differs(target, pairs):
    warp = Warp(1.0, top_k=20)  # the program of test_host_loop_and_device_loop_agree, compiled once
    a, _ = speculative(pairs["agreeing"], target, [5, 6], 30, 3, warp, seed=1)
    b, _ = speculative(pairs["agreeing"], target, [5, 6], 30, 3, warp, seed=1)
    c, _ = speculative(pairs["agreeing"], target, [5, 6], 30, 3, warp, seed=2)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


@pytest.mark.parametrize("n_tokens", [1, 2, 5, 13])
def test_stops_at_exactly_n_tokens(target, pairs, n_tokens):
    sd, st = speculative(target, target, [1, 2, 3], n_tokens, 4, max_len=64)
    assert len(sd) == st.n_generated == n_tokens
    ar, _ = autoregressive(target, [1, 2, 3], n_tokens, max_len=64)
    np.testing.assert_array_equal(sd, ar)


def test_identical_draft_accepts_everything(target):
    for warp in (Warp(0.0), Warp(0.8, top_p=0.9)):
        K, N = 3, 1 + 4 * 6  # the prefill token, then six full rounds
        _, st = speculative(target, target, [7, 8, 9], N, K, warp, seed=3)
        assert st.alpha == 1.0
        assert st.n_rounds == 6 and st.tokens_per_round == K + 1 and st.r == 1.0
        assert st.accepted_hist.tolist() == [0, 0, 0, 6]
        assert st.per_position == [1.0, 1.0, 1.0]


def test_stats_count_the_recorded_rounds(target, pairs):
    K = 4
    _, st = speculative(pairs["poor"], target, [2, 7, 1], 40, K, Warp(1.0), seed=4, record=True)
    a = np.array([r["n_accepted"] for r in st.rounds])
    assert len(st.rounds) == st.n_rounds
    np.testing.assert_array_equal(st.accepted_hist, np.bincount(a, minlength=K + 1))
    for i in range(K):  # position i+1 is tested when the i before it were accepted
        assert st.evaluated[i] == (a >= i).sum()
        assert st.accepted[i] == (a > i).sum()
    assert st.alpha == pytest.approx(a.sum() / (a.sum() + (a < K).sum()))


def test_metrics_on_a_hand_built_record():
    # K=4, rounds accepting 4, 1, 0, 2 drafts: 5+2+1+3 = 11 tokens from rounds, +1 from the prefill
    st = DecodeStats(
        K=4,
        n_generated=12,
        n_rounds=4,
        accepted_hist=np.array([1, 1, 1, 0, 1]),
        evaluated=np.array([4, 3, 2, 1]),
        accepted=np.array([3, 2, 1, 1]),
    )
    assert st.tokens_per_round == 11 / 4
    assert st.r == 11 / 4 / 5
    assert st.alpha == 7 / (7 + 3)  # 7 accepted, 3 rejections; drafts after a rejection not counted
    assert st.accept_rate_drafted == 7 / 16
    assert st.per_position == [3 / 4, 2 / 3, 1 / 2, 1 / 1]


def test_the_greedy_verdict_is_accept_reject_on_one_hot_distributions():
    # T = 0 verifies on token ids (sampling.greedy_verdict); on one-hot p and q, accept_reject must
    # give the same count and token under every key, whatever the drafts, argmaxes and n_drafted
    rng, V, K = np.random.default_rng(0), 7, 4
    keys = jax.random.split(jax.random.PRNGKey(0), 16)

    def case(target, drafts, n_drafted):  # (greedy_verdict, accept_reject under every key)
        p = jnp.where(jnp.arange(K)[:, None] < n_drafted, jax.nn.one_hot(drafts, V), 0.0)
        one = lambda k: accept_reject(k, drafts, p, jax.nn.one_hot(target, V), n_drafted)
        return greedy_verdict(drafts, target, n_drafted), jax.vmap(one)(keys)

    targets = jnp.asarray(rng.integers(0, V, (40, K + 1)), jnp.int32)
    drafts = jnp.where(
        rng.random((40, K)) < 0.6, targets[:, :K], jnp.asarray(rng.integers(0, V, (40, K)), jnp.int32)
    )
    wants, gots = jax.jit(jax.vmap(case))(targets, drafts, jnp.asarray(rng.integers(0, K + 1, 40), jnp.int32))
    for want, got in zip(zip(*wants), zip(*gots)):  # one case at a time
        assert set(map(int, got[0])) == {int(want[0])} and set(map(int, got[1])) == {int(want[1])}


@pytest.mark.parametrize("warp", [Warp(1.0), Warp(0.7, top_k=5), Warp(1.3, top_p=0.8)], ids=str)
def test_the_verdict_on_target_rows_is_the_verdict_on_their_probabilities(warp):
    # the round hands accept_reject the target's logits as TargetRows, which warps a row only when
    # the verdict reads it: under every key the count and the token must be those that the whole
    # [K+1, V] array of warped probabilities gives, whatever the drafts and n_drafted
    rng, V, K, cases = np.random.default_rng(1), 11, 4, 30
    logits = jnp.asarray(rng.normal(size=(cases, K + 1, V)) * 2, jnp.float32)
    p = rng.dirichlet(np.full(V, 0.5), (cases, K))
    drafts = jnp.asarray([[rng.choice(V, p=row) for row in case] for case in p], jnp.int32)
    n_drafted = jnp.asarray(rng.integers(0, K + 1, cases), jnp.int32)
    p = jnp.where(jnp.arange(K)[:, None] < n_drafted[:, None, None], jnp.asarray(p, jnp.float32), 0.0)
    keys = jax.random.split(jax.random.PRNGKey(2), 64)

    def both(logits, p, drafts, n):  # (lazy, eager) verdicts of one case under every key
        lazy = lambda k: accept_reject(k, drafts, p, TargetRows(logits, warp), n)
        eager = lambda k: accept_reject(k, drafts, p, probs(logits, warp), n)
        return jax.vmap(lazy)(keys), jax.vmap(eager)(keys)

    lazy, eager = jax.jit(jax.vmap(both))(logits, p, drafts, n_drafted)
    np.testing.assert_array_equal(lazy[0], eager[0])
    np.testing.assert_array_equal(lazy[1], eager[1])
    assert 0 < np.mean(np.asarray(lazy[0]) == np.asarray(n_drafted)[:, None]) < 1  # both ends are met


def test_the_residual_draw_falls_back_to_q_where_nothing_is_left():
    # norm(max(q - p, 0)) when q <= p everywhere (q == p: a rejection only by rounding) is q itself
    q = jnp.asarray([0.0, 0.25, 0.0, 0.75], jnp.float32)
    keys = jax.random.split(jax.random.PRNGKey(3), 4000)
    draws = np.asarray(jax.vmap(lambda k: sample_residual(k, q, q))(keys))
    assert chi_square_p(draws, np.asarray(q)) > P_THRESHOLD
    p = jnp.asarray([0.5, 0.5, 0.0, 0.0], jnp.float32)  # the residual of the worked example's shape: [3]
    assert set(np.asarray(jax.vmap(lambda k: sample_residual(k, q, p))(keys)).tolist()) == {3}


@pytest.mark.parametrize("sampler", ["cdf", "race"])
def test_each_sampler_draws_every_token_with_its_probability_and_a_broken_race_fails(sampler, monkeypatch):
    """draw at T = 1 under either sampler (sampling.sampler_for: the CPU's CDF inversion, an
    accelerator's exponential race) follows softmax(logits) by χ², never draws a token of
    probability 0 (a top-k warp), and a race whose clocks are squared exponentials, the broken
    control, fails the same test. (Uniform clocks would not do as a control over 300 tokens:
    the winner's clock is near 0, where a uniform's density equals an exponential's.)"""
    from specbench.model.decode import sampling

    monkeypatch.setenv("SPECBENCH_SAMPLER", sampler)
    assert sampling.sampler_for(jax.default_backend()) == sampler
    assert sampling.sampler_for("cpu") == sampler and sampling.sampler_for("gpu") == sampler
    monkeypatch.delenv("SPECBENCH_SAMPLER")
    assert (sampling.sampler_for("cpu"), sampling.sampler_for("gpu")) == ("cdf", "race")
    monkeypatch.setenv("SPECBENCH_SAMPLER", sampler)
    logits = jnp.asarray(np.random.default_rng(5).normal(0, 1.5, 300), jnp.float32)
    keys = jax.random.split(jax.random.PRNGKey(11), 40000)
    for warp in (Warp(1.0), Warp(1.0, top_k=7)):
        draws = np.asarray(jax.jit(jax.vmap(lambda k: sampling.draw(k, logits, warp)[0]))(keys))
        expected = np.asarray(probs(logits, warp), np.float64)
        assert expected[draws].min() > 0  # nothing outside the top-k
        assert chi_square_p(draws, expected) > P_THRESHOLD
    broken = lambda k: sampling.argmax(
        probs(logits, Warp(1.0)) / jax.random.exponential(k, logits.shape) ** 2
    )
    draws = np.asarray(jax.jit(jax.vmap(broken))(keys))
    assert chi_square_p(draws, np.asarray(probs(logits, Warp(1.0)), np.float64)) < 1e-6


def test_worked_example_from_seed_004():
    q = jnp.array([[0.6, 0.3, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    p = jnp.array([[0.4, 0.5, 0.1]])
    np.testing.assert_allclose(residual(q[0], p[0]), [1.0, 0.0, 0.0], atol=1e-7)
    drafts = jnp.array([1])  # token B
    keys = jax.random.split(jax.random.PRNGKey(0), 20000)
    n_acc, emitted = jax.vmap(lambda k: accept_reject(k, drafts, p, q))(keys)
    n_acc, emitted = np.asarray(n_acc), np.asarray(emitted)
    assert abs(n_acc.mean() - 0.6) < 4 * np.sqrt(0.24 / len(keys))  # accept B with prob 0.3/0.5
    assert (emitted[n_acc == 0] == 0).all()  # rejected -> always A


def test_temperature_zero_is_one_hot_argmax():
    logits = jnp.array([0.1, 3.0, 2.9999, -1.0])
    np.testing.assert_array_equal(probs(logits, Warp(0.0)), [0, 1, 0, 0])
    assert int(sample(jax.random.PRNGKey(0), probs(logits, Warp(0.0)))) == 1


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = jnp.log(jnp.array([0.5, 0.05, 0.3, 0.15]))
    np.testing.assert_allclose(probs(logits, Warp(1.0, top_k=2)), [0.625, 0, 0.375, 0], atol=1e-6)
    np.testing.assert_allclose(probs(logits, Warp(1.0, top_p=0.8)), [0.625, 0, 0.375, 0], atol=1e-6)
    np.testing.assert_allclose(
        probs(logits, Warp(1.0, top_p=0.81)), [0.5 / 0.95, 0, 0.3 / 0.95, 0.15 / 0.95], atol=1e-6
    )
    np.testing.assert_allclose(probs(logits, Warp(1.0, top_p=1.0)), [0.5, 0.05, 0.3, 0.15], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(K=0), "K must be >= 1"),
        (dict(n_tokens=0), "n-tokens must be >= 1"),
        (dict(n_tokens=200), "exceeds the context"),
    ],
)
def test_invalid_settings_raise_clear_errors(target, pairs, kwargs, message):
    args = dict(n_tokens=10, K=4) | kwargs
    with pytest.raises(DecodeError, match=message):
        speculative(pairs["poor"], target, [1, 2], args["n_tokens"], args["K"])


def test_invalid_warp_and_vocab_mismatch_raise(target):
    for bad in (dict(temperature=-0.1), dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            Warp(**{"temperature": 1.0, **bad})
    other = random_model(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128, n_vocab=50), 2)
    with pytest.raises(DecodeError, match="share the vocabulary"):
        speculative(other, target, [1, 2], 10, 2)


def test_nothing_recompiles_after_warmup(target, pairs):
    # the settings of test_host_loop_and_device_loop_agree, so the module compiles their programs once
    draft, warp = pairs["agreeing"], Warp(1.0, top_k=20)
    for device_loop in (True, False):
        speculative(draft, target, [1, 2, 3], 5, 3, warp, max_len=64, device_loop=device_loop)  # warm-up
        autoregressive(target, [1, 2, 3], 5, warp, max_len=64, device_loop=device_loop)
        with timing.CompileCounter() as compiles:
            for n in (10, 50):
                speculative(
                    draft, target, [4, 5, 6, 7], n, 3, warp, seed=n, max_len=64, device_loop=device_loop
                )
                autoregressive(target, [4, 5, 6, 7], n, warp, seed=n, max_len=64, device_loop=device_loop)
        assert compiles.count == 0, f"device_loop={device_loop}: {compiles.count} compilations after warm-up"


# ---------------------------------------------------------------------------------------------
# T > 0: the speculative tokens follow the target's exact distribution


def token_draws(shared, small_pair, warp, layout):
    """(exact marginals of new tokens 0-2, [the exact sampler's tokens, the broken control's]): K = 2.
    At T = 1, the broken control's warp, both samplers are drawn by one program."""

    def make():
        draft, target = small_pair if layout == "hf" else with_kernel(*small_pair)
        prompt = [3, 7, 1]
        exact = target_marginals(target, prompt, warp, 3)
        verdicts = (accept_reject, broken_accept_reject) if warp == Warp(1.0) else (accept_reject,)
        return exact, sampled_tokens(draft, target, prompt, warp, K=2, verdicts=verdicts)

    return shared(("tokens", warp, layout), make)


@pytest.mark.slow
@pytest.mark.parametrize(
    "warp, layout",
    [(Warp(1.0), "hf"), (Warp(0.8, top_k=5), "hf"), (Warp(1.2, top_p=0.85), "hf"), (Warp(1.0), "kernel")],
    ids=["T1", "T0.8-topk5", "T1.2-topp0.85", "T1-kernel"],
)
def test_speculative_sampling_follows_target_distribution(shared, small_pair, warp, layout, record_property):
    exact, (tokens, *_) = token_draws(shared, small_pair, warp, layout)
    # positions 1 and 2 come from speculative rounds (position 0 is the prefill's draw from q)
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]
    record_property("p_values", p_values)
    print(f"\n{warp}: chi-square p-values {p_values}")
    assert min(p_values) > P_THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["hf", "kernel"])
def test_broken_sampler_is_detected(shared, small_pair, layout, record_property):
    exact, (_, tokens) = token_draws(shared, small_pair, Warp(1.0), layout)
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]
    record_property("p_values", p_values)
    print(f"\nnegative control: chi-square p-values {p_values}")
    assert max(p_values) < P_THRESHOLD


@pytest.fixture(scope="module")
def full_round_draws(small_pair):
    """K = 3, 6 new tokens: their exact marginals, and the tokens of the exact sampler and of the
    wrong-bonus control, drawn by one program."""
    target = small_pair[1]
    draft = noisy_copy(target, 0.3, 13)
    prompt, warp, K = [3, 7, 1], Warp(1.0), 3
    exact = target_marginals(target, prompt, warp, K + 3)
    verdicts = (accept_reject, wrong_bonus_accept_reject)
    draws = sampled_tokens(draft, target, prompt, warp, K=K, verdicts=verdicts, n_tokens=K + 3)
    return exact, dict(zip(verdicts, draws))


@pytest.mark.slow
@pytest.mark.parametrize(
    "verdict", [accept_reject, wrong_bonus_accept_reject], ids=["exact", "wrong-bonus-row"]
)
def test_every_position_of_a_round_the_bonus_and_the_next_round(full_round_draws, verdict, record_property):
    # K = 3, N = 6: new positions 1..3 are the round's drafts (or what replaced a rejected one), 4 is
    # its bonus or resampled token, 5 the first token of the next round; an agreeing draft makes the
    # bonus frequent, so a bonus drawn from the wrong row of q shows at position 4 and only there
    K = 3
    exact, draws = full_round_draws
    tokens = draws[verdict]
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in range(1, K + 3)]
    record_property("p_values", p_values)
    print(f"\n{verdict.__name__}, K=3, positions 1-5: chi-square p-values {p_values}")
    if verdict is accept_reject:
        assert min(p_values) > P_THRESHOLD
    else:  # the negative control fails at the bonus position, and the drafts' positions cannot see it
        assert p_values[K] < P_THRESHOLD and min(p_values[:K]) > P_THRESHOLD


def test_two_level_sampler_matches_its_distribution():
    rng = np.random.default_rng(0)
    V = 1000  # 16 blocks of 64, the last one partial
    pr = rng.dirichlet(np.full(V, 0.3))
    pr[rng.random(V) < 0.3] = 0.0  # scattered zeros
    pr[128:256] = 0.0  # and two whole blocks of zeros
    pr /= pr.sum()
    keys = jax.random.split(jax.random.PRNGKey(7), N_SAMPLES)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: sample(k, jnp.asarray(pr, jnp.float32), block=64)))(keys))
    assert pr[draws].min() > 0, "drew a token of probability 0"
    assert chi_square_p(draws, pr) > P_THRESHOLD
    weights = jnp.asarray(7.5 * pr, jnp.float32)  # weights need not sum to 1: u is scaled by their sum
    draws = np.asarray(jax.jit(jax.vmap(lambda k: sample(k, weights, block=64)))(keys))
    assert pr[draws].min() > 0 and chi_square_p(draws, pr) > P_THRESHOLD
    for one in (0, 63, 64, 999):  # a one-hot anywhere, the last partial block included
        assert int(sample(jax.random.PRNGKey(one), jax.nn.one_hot(one, V), block=64)) == one


def _sorted_warp_reference(logits, warp):
    """The warping as first written, with full sorts: what the fast version must equal."""
    logits = logits / warp.temperature
    if warp.top_k and warp.top_k < logits.shape[-1]:
        kth = -jnp.sort(-logits, axis=-1)[..., warp.top_k - 1 : warp.top_k]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    pr = jax.nn.softmax(logits, -1)
    if warp.top_p:
        desc = -jnp.sort(-pr, axis=-1)
        before = jnp.cumsum(desc, -1) - desc
        threshold = jnp.min(jnp.where(before < warp.top_p, desc, jnp.inf), -1, keepdims=True)
        pr = jnp.where(pr >= threshold, pr, 0.0)
        pr = pr / pr.sum(-1, keepdims=True)
    return pr


def test_fast_top_k_and_top_p_keep_the_same_sets_as_sorting_ties_included():
    from specbench.model.decode import sampling

    rng = np.random.default_rng(0)
    paths = set()
    for trial in range(9):
        V = (60, 1000, 50257)[trial % 3]
        scale = (0.05, 1.0, 6.0)[
            (trial + trial // 3) % 3
        ]  # flat rows take the radix path, peaked the fast one
        x = jnp.asarray(np.round(rng.normal(0, scale, (3, V)), int(rng.integers(1, 4))), jnp.float32)  # ties
        for warp in (
            Warp(1.0, top_k=int(rng.integers(1, 70))),
            Warp(0.7, top_p=float(rng.uniform(0.05, 0.99))),
            Warp(1.3, top_k=40, top_p=0.8),
        ):
            fast, ref = probs(x, warp), _sorted_warp_reference(x, warp)
            np.testing.assert_array_equal(np.asarray(fast) > 0, np.asarray(ref) > 0)
            np.testing.assert_allclose(fast, ref, atol=1e-6)
            if warp.top_p:
                pr = jax.nn.softmax(x / warp.temperature, -1)
                top = jax.lax.top_k(pr, min(sampling.NUCLEUS_FAST, V))[0]
                paths.add(bool(jnp.all(top.sum(-1) >= warp.top_p)))
    assert paths == {True, False}  # both the fast path and the exact radix search were tested
