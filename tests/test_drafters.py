"""Every drafter is exact: greedy tokens equal the target's, sampled tokens follow its distribution."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.measure import timing
from specbench.model import generate
from specbench.model.checkpoints import draft_vocab
from specbench.model.decode import drafters, lookup
from specbench.model.decode.sampling import Warp, accept_reject
from specbench.model.generate import autoregressive, speculative

from conftest import make_small_target, random_model
from exactness import (
    P_THRESHOLD,
    SMALL_T,
    TARGET,
    broken_accept_reject,
    chi_square_p,
    noisy_copy,
    sampled_tokens,
    target_marginals,
    with_kernel,
)


@pytest.fixture(scope="module")
def draft(target):
    return noisy_copy(target, 0.05, 5)


rng = np.random.default_rng(7)
# random prompts (rarely an n-gram match), prompts that repeat themselves, and a one-token prompt
PROMPTS = [list(rng.integers(0, 97, 2 + i % 7)) for i in range(4)] + [
    [5, 6, 7, 5, 6, 7, 5, 6],
    [1, 2, 1, 2, 1, 2, 1],
    [9, 9, 9, 9],
    [3, 4, 5, 6, 3, 4],
    [42],
]


def drafter_cases(target):
    return {
        "lookup-1": (None, drafters.lookup_drafter(1)),
        "lookup-3": (None, drafters.lookup_drafter(3)),
        "layerskip-1": (None, drafters.layerskip_drafter(target.config, 1)),
        "layerskip-1-dynamic": (None, drafters.layerskip_drafter(target.config, 1, confidence=0.6)),
        "model-dynamic": ("draft", drafters.model_drafter(TARGET, confidence=0.6)),
        # heads over the 40 most frequent of the 97 tokens: targets that want others reject drafts
        "model-vocab": ("draft", dataclasses.replace(drafters.model_drafter(TARGET), vocab=40)),
        "layerskip-1-vocab": (
            None,
            dataclasses.replace(drafters.layerskip_drafter(target.config, 1), vocab=40),
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "lookup-1",
        "lookup-3",
        "layerskip-1",
        "layerskip-1-dynamic",
        "model-dynamic",
        "model-vocab",
        "layerskip-1-vocab",
    ],
)
def test_greedy_speculative_equals_autoregressive_for_every_drafter(target, draft, case):
    uses_draft, drafter = drafter_cases(target)[case]
    d = draft if uses_draft else None
    lengths = []
    for prompt in PROMPTS:
        ar, _ = autoregressive(target, prompt, 24, max_len=64)
        for K in (2, 5):
            sd, st = speculative(d, target, prompt, 24, K, max_len=64, drafter=drafter)
            np.testing.assert_array_equal(sd, ar, err_msg=f"{case}, prompt {prompt}, K={K}")
            assert st.drafted_hist.sum() == st.n_rounds
            lengths.append(st.drafted_hist)
    host, _ = speculative(d, target, PROMPTS[-4], 24, 4, max_len=64, device_loop=False, drafter=drafter)
    np.testing.assert_array_equal(host, autoregressive(target, PROMPTS[-4], 24, max_len=64)[0])
    if drafter.name == "lookup" or drafter.confidence:
        # the draft length really varies from round to round (K=5): several lengths occur, 0 among them
        K5 = sum(h for h in lengths if len(h) == 6)
        assert K5[0] > 0 and np.count_nonzero(K5) >= 2, K5


def test_lookup_proposes_what_followed_the_latest_longest_match():
    def propose(seq, K=4, ngram=3):
        tokens = jnp.asarray(seq + [0] * (16 - len(seq)), jnp.int32)
        drafts, n = lookup.lookup(tokens, jnp.int32(len(seq)), K, ngram)
        return np.asarray(drafts)[: int(n)].tolist()

    assert propose([1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 3]) == [8, 1, 2, 3]  # the most recent match wins
    assert propose([7, 1, 2, 5, 6, 2]) == [5, 6, 2, 5]  # no 3- or 2-gram: the 1-gram "2", then periodic
    assert propose([4, 4]) == [4, 4, 4, 4]  # a run continues itself
    assert propose([5, 6, 7, 8]) == []  # no match: nothing is proposed
    assert propose([1, 2, 3, 1, 2, 3], ngram=1) == [1, 2, 3, 1]
    assert propose([9, 1, 2, 3, 4, 1, 2, 3], K=3, ngram=2) == [4, 1, 2]


def test_dynamic_K_stops_below_the_confidence():
    drafter = drafters.model_drafter(TARGET, confidence=0.999999)
    target = random_model(TARGET, 3, "t", scale=1)  # a flat model: every draft's top probability is low
    _, st = speculative(target, target, [1, 2, 3], 12, 4, max_len=64, drafter=drafter)
    assert st.drafted_hist[0] == st.n_rounds  # nothing was ever proposed: one target step per round
    assert st.n_rounds == 11


@pytest.fixture(scope="module")
def small_target():
    return make_small_target()


def lookup_draws(shared, target, warp):
    """(exact marginals, the exact sampler's tokens, the broken control's) of the lookup drafter,
    both samplers drawn by one program. The prompt repeats itself, so lookup has something to
    propose."""

    def make():
        prompt, verdicts = [3, 7, 3, 7, 3], (accept_reject, broken_accept_reject)
        tokens = sampled_tokens(
            None, target, prompt, warp, K=2, verdicts=verdicts, drafter=drafters.lookup_drafter(2)
        )
        return target_marginals(target, prompt, warp, 3), *tokens

    return shared(("lookup", warp), make)


@pytest.mark.slow
@pytest.mark.parametrize("warp", [Warp(1.0), Warp(0.8, top_k=5)], ids=["T1", "T0.8-topk5"])
def test_lookup_sampling_follows_target_distribution(shared, small_target, warp, record_property):
    exact, tokens, _ = lookup_draws(shared, small_target, warp)
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]
    record_property("p_values", p_values)
    print(f"\nlookup {warp}: chi-square p-values {p_values}")
    assert min(p_values) > P_THRESHOLD


@pytest.mark.slow
def test_lookup_broken_sampler_is_detected(shared, small_target, record_property):
    exact, _, tokens = lookup_draws(shared, small_target, Warp(1.0))
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]
    record_property("p_values", p_values)
    print(f"\nlookup negative control: chi-square p-values {p_values}")
    # the test above would fail: at the first round the target gives the drafted token little mass,
    # so resampling from q instead of the residual barely shows there; at the second it does
    assert min(p_values) < P_THRESHOLD


# drafters of a noisy copy of the target (noise 0.3) that change what it proposes
NOISY_DRAFTERS = {
    "dynamic-K": drafters.model_drafter(SMALL_T, confidence=0.6),  # stops below a top probability of 0.6
    "draft-vocabulary": dataclasses.replace(drafters.model_drafter(SMALL_T), vocab=6),  # 6 of the 12 tokens
}


def noisy_draft_p_values(shared, small_target, case):
    """Chi-square p-values of new tokens 2 and 3 drafted by NOISY_DRAFTERS[case]: (the exact
    sampler's, the broken control's), both drawn by one program."""

    def make():
        exact = target_marginals(small_target, [3, 7, 1], Warp(1.0), 3)
        draft, verdicts = noisy_copy(small_target, 0.3, 1), (accept_reject, broken_accept_reject)
        draws = sampled_tokens(
            draft, small_target, [3, 7, 1], Warp(1.0), K=3, verdicts=verdicts, drafter=NOISY_DRAFTERS[case]
        )
        return [[chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)] for tokens in draws]

    return shared(("noisy", case), make)


@pytest.mark.slow
@pytest.mark.parametrize("case", NOISY_DRAFTERS)
def test_noisy_drafters_sampling_follows_target_distribution(shared, small_target, case, record_property):
    p_values, _ = noisy_draft_p_values(shared, small_target, case)
    record_property("p_values", p_values)
    print(f"\n{case}: chi-square p-values {p_values}")
    assert min(p_values) > P_THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize("case", NOISY_DRAFTERS)
def test_noisy_drafters_broken_sampler_is_detected(shared, small_target, case, record_property):
    _, p_values = noisy_draft_p_values(shared, small_target, case)
    record_property("p_values", p_values)
    print(f"\n{case} negative control: chi-square p-values {p_values}")
    assert max(p_values) < P_THRESHOLD


@pytest.mark.parametrize("kernel", [False, True], ids=["hf", "kernel"])
def test_a_draft_vocabulary_draws_from_the_drafts_own_distribution_restricted_to_it(target, draft, kernel):
    """FR-Spec's draft: p is the full head's softmax renormalised over the kept tokens, zero elsewhere,
    and every draft is a kept token."""
    if kernel:
        draft, target = with_kernel(draft, target)
    full = drafters.model_drafter(TARGET)
    kept = draft_vocab.frequent_ids(40, TARGET.n_vocab)
    prompt = jnp.asarray([5, 6, 7, 8, 0, 0, 0, 0], jnp.int32)
    tokens = jnp.zeros(64, jnp.int32).at[:8].set(prompt)
    ps, drafts = {}, {}
    for vocab in (None, 40):
        drafter = dataclasses.replace(full, vocab=vocab)
        params = generate.draft_params_for(drafter, draft, target)
        state = drafters.start(drafter, params, prompt, len(prompt), 64)
        _, drafts[vocab], ps[vocab], _ = drafters.propose(
            drafter, params, state, tokens, jnp.int32(4), jax.random.PRNGKey(3), Warp(1.0), 3, TARGET.n_vocab
        )
    assert set(np.asarray(drafts[40]).tolist()) <= set(kept.tolist())
    restricted = np.asarray(ps[40][0])
    outside = np.setdiff1d(np.arange(TARGET.n_vocab), kept)
    assert np.all(restricted[outside] == 0)
    first = np.asarray(ps[None][0])  # the first draft's p reads only the committed tokens
    np.testing.assert_allclose(restricted[kept], first[kept] / first[kept].sum(), rtol=1e-5, atol=1e-7)


def test_no_recompiles_whatever_the_draft_length(target, draft):
    for drafter, d in (
        (drafters.lookup_drafter(3), None),
        (drafters.model_drafter(TARGET, 0.6), draft),
        (drafters.layerskip_drafter(TARGET, 1), None),
    ):
        # the greedy test's settings (K = 5, max_len 64): the module compiles these programs once
        speculative(d, target, [1, 2, 1, 2], 5, 5, Warp(0.0), max_len=64, drafter=drafter)  # warm-up
        with timing.CompileCounter() as compiles:
            for n, prompt in ((10, [4, 5, 4, 5, 4]), (40, [9, 8, 7, 6])):
                speculative(d, target, prompt, n, 5, Warp(0.0), seed=n, max_len=64, drafter=drafter)
        assert compiles.count == 0, f"{drafter.name}: {compiles.count} compilations after warm-up"


def test_layerskip_reads_the_targets_own_weights(target):
    drafter = drafters.layerskip_drafter(target.config, 1)
    from specbench.model.generate import draft_params_for

    assert draft_params_for(drafter, None, target) is target.params  # no copy
    with pytest.raises(ValueError, match="1..1"):
        drafters.layerskip_drafter(target.config, 2)
    assert jax.tree_util.tree_leaves(target.params)[0].shape[0] > 0


def test_the_command_lines_copies_of_the_model_layers_lists_are_the_lists():
    # the CLI keeps copies so that --help imports no JAX; a kind or method added to the model
    # layer and not to the copy fails here
    from specbench.cli.asked import params
    from specbench.model.decode import verify
    from specbench.model.kernels import cpu

    assert params.DRAFTER_KINDS == tuple(drafters.KINDS)
    from specbench.model.decode import drafter

    assert params.VERIFY_METHODS == verify.METHODS == drafter.VERIFY_METHODS
    assert params.VERIFY_SHAPES == verify.SHAPES == drafter.VERIFY_SHAPES
    assert params.KERNELS == cpu.CHOICES


def test_each_drafter_kind_is_one_record_whose_traits_the_drafter_follows():
    kinds = drafters.KINDS
    assert drafters.kinds_that("network") == ("model", "layerskip", "eagle", "pard", "mtp")
    assert drafters.kinds_that("features") == ("eagle", "mtp")
    assert drafters.kinds_that("trees") == ("model", "layerskip", "eagle", "mtp")
    assert drafters.kinds_that("draft_model") == ("model", "pard") and drafters.kinds_that("acceptance") == (
        "dial",
    )
    assert drafters.kinds_that("pass_rows") == ("pard",)  # the one-pass kinds
    assert all(k.k_drafts == k.distributions == k.network for k in kinds.values())
    for name, kind in kinds.items():
        assert kind.name == name and kind.title and callable(kind.start) and callable(kind.propose)
    with pytest.raises(ValueError, match="a drafter's kind is a record of drafters.KINDS"):
        drafters.Drafter("medusa")
    with pytest.raises(ValueError, match="drafts must be 1 for the lookup drafter"):
        drafters.Drafter(drafters.KINDS["lookup"], drafts=2)
    assert drafters.lookup_drafter(3).spec is kinds["lookup"]
