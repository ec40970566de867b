"""Batched decoding: every sequence of a batch is exactly what decoding it alone gives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.measure import selftest, timing
from specbench.model import generate
from specbench.model.decode import batched, drafters
from specbench.model.decode.sampling import Warp, accept_reject
from specbench.model.generate import autoregressive
from specbench.results import theory

from conftest import random_model
from exactness import (
    DRAFT,
    MANY_SAMPLES,
    N_SAMPLES,
    P_THRESHOLD,
    TARGET,
    broken_accept_reject,
    chi_square_p,
    noisy_copy,
    target_marginals,
    with_kernel,
)

# prompts of different lengths (1 to 13 tokens: two prompt buckets' worth of padding)
PROMPTS = [list(np.random.default_rng(40 + i).integers(0, 97, 1 + (5 * i) % 13)) for i in range(8)]


@pytest.fixture(scope="module")
def draft(target):
    return noisy_copy(target, 0.05, 5)  # agrees often, not always: sequences accept different counts


@pytest.fixture(scope="module")
def alone(target):
    """Each prompt decoded on its own, greedily: what every batch must reproduce."""
    return [autoregressive(target, p, 20, max_len=64)[0] for p in PROMPTS]


@pytest.mark.parametrize("B", [2, 3, 8, "8-kernel"])
def test_each_sequence_equals_the_same_prompt_decoded_alone(target, draft, alone, B):
    if B == "8-kernel":  # the batch's rows through the CPU kernel, each sequence alone through XLA
        B, (draft, target) = 8, with_kernel(draft, target)
    tokens, st = generate.speculative(draft, target, PROMPTS[:B], 20, 4, max_len=64)
    for i in range(B):
        np.testing.assert_array_equal(tokens[i], alone[i], err_msg=f"sequence {i} of {B}")
    ar, _ = generate.autoregressive(target, PROMPTS[:B], 20, max_len=64)
    np.testing.assert_array_equal(ar, tokens)
    # the sequences advanced on their own: different round counts, so some waited for the slowest
    assert st.n_seqs == B and st.n_generated == 20 * B
    assert st.idle_slots == B * st.batch_rounds - st.n_rounds
    if B == 8:
        assert st.idle_slots > 0 and st.tokens_per_batch_round < st.tokens_per_round


@pytest.mark.parametrize(
    "make",
    [
        lambda t: drafters.lookup_drafter(2),
        lambda t: drafters.layerskip_drafter(t.config, 1),
        lambda t: drafters.model_drafter(DRAFT, confidence=0.5),
    ],
    ids=["lookup", "layerskip", "dynamic-K"],
)
def test_every_drafter_is_exact_in_a_batch(target, alone, make):
    drafter = make(target)
    draft = random_model(DRAFT, 1, "poor-draft", scale=20) if drafter.name == "model" else None
    tokens, _ = generate.speculative(draft, target, PROMPTS[:3], 20, 3, max_len=64, drafter=drafter)
    for i in range(3):
        np.testing.assert_array_equal(tokens[i], alone[i], err_msg=f"{drafter.name}: sequence {i}")


def test_a_batch_of_identical_full_acceptance_wastes_no_slot(target):
    K, N = 3, 1 + 4 * 5  # the prefill token, then five full rounds each
    _, st = generate.speculative(target, target, [PROMPTS[1]] * 3, N, K, Warp(0.0), max_len=64)
    assert st.batch_rounds == 5 and st.n_rounds == 15 and st.idle_slots == 0
    assert st.tokens_per_round == st.tokens_per_batch_round == K + 1 and st.alpha == 1.0


def test_no_recompile_after_warm_up_for_a_given_batch(target, draft):
    generate.speculative(draft, target, PROMPTS[:3], 5, 4, max_len=64)  # compiled already by the test above
    generate.autoregressive(target, PROMPTS[:3], 5, max_len=64)
    with timing.CompileCounter() as compiles:
        for n in (9, 17):  # other prompts, other N, other seeds
            generate.speculative(draft, target, PROMPTS[3:6], n, 4, seed=n, max_len=64)
            generate.autoregressive(target, PROMPTS[3:6], n, seed=n, max_len=64)
    assert compiles.count == 0


def test_memory_estimate_grows_with_batch_and_cache():
    one = batched.memory_bytes(1, [TARGET, DRAFT], 64, 4, TARGET.n_vocab)
    assert batched.memory_bytes(8, [TARGET, DRAFT], 64, 4, TARGET.n_vocab) == 8 * one
    # 64 more positions: the caches, 2 (k, v) x layers x positions x width x 4 bytes for each model,
    # twice, and the int32 token buffer
    more = 2 * (2 * 2 * 64 * 32 + 2 * 1 * 64 * 16) * 4 + 4 * 64
    assert batched.memory_bytes(1, [TARGET, DRAFT], 128, 4, TARGET.n_vocab) - one == more


def test_crossover_interpolates_where_the_speedup_falls_below_one():
    assert theory.crossover([1, 2, 4, 8], [1.5, 1.2, 1.0, 0.5]) == pytest.approx(4.0)
    assert theory.crossover([1, 2, 4], [2.0, 1.5, 1.1]) is None  # never below 1
    assert theory.crossover([1, 2], [0.9, 0.8]) is None  # below 1 from the start
    assert theory.crossover([4, 8], [1.2, 0.8]) == pytest.approx(2**2.5)  # halfway in log2


# ---------------------------------------------------------------------------------------------
# T > 0: one sequence inside a batch of other prompts follows the target's distribution


def batch_samples(draft, target, prompts, warp, K, verdicts, n_tokens=3):
    """For each verdict, N_SAMPLES / 2 independent batches, each with its own B keys; the new tokens
    of every sequence, all drawn by one program (selftest.one_of). (Half the samples of the
    single-sequence tests: three sequences each, and the sampler itself is tested at full power
    there.)"""
    drafter = drafters.model_drafter(draft.config)
    bufs, n_prompts = batched.prompt_buffers(prompts, 16)

    def tokens(draft_params, target_params, keys, index):
        return batched.spec_generate(
            draft_params,
            target_params,
            bufs,
            n_prompts,
            jnp.int32(n_tokens),
            keys,
            drafter=drafter,
            target_config=target.config,
            warp=warp,
            max_len=16,
            K=K,
            verdict=selftest.one_of(verdicts, index),
        ).tokens

    keys = jax.random.split(jax.random.PRNGKey(7), N_SAMPLES // 2 * len(prompts)).reshape(
        N_SAMPLES // 2, len(prompts), -1
    )
    draw = jax.jit(jax.vmap(tokens, in_axes=(None, None, 0, None)), compiler_options=MANY_SAMPLES)
    return [np.asarray(draw(draft.params, target.params, keys, jnp.int32(i))) for i in range(len(verdicts))]


@pytest.fixture(scope="module")
def batch_draws(small_pair):
    """The middle sequence's exact marginals, and its tokens under the exact sampler and the broken
    control, both drawn by one program."""
    draft, target = small_pair
    prompts = [[5, 2], [3, 7, 1], [9, 9, 4, 0, 11]]  # the tested sequence is the middle one
    warp, verdicts = Warp(1.0), (accept_reject, broken_accept_reject)
    draws = batch_samples(draft, target, prompts, warp, K=2, verdicts=verdicts)
    return target_marginals(target, prompts[1], warp, 3), {v: d[:, 1, 3:6] for v, d in zip(verdicts, draws)}


@pytest.mark.slow
@pytest.mark.parametrize("verdict", [accept_reject, broken_accept_reject], ids=["exact", "broken"])
def test_a_sequence_in_a_batch_follows_the_target_distribution(batch_draws, verdict, record_property):
    exact, draws = batch_draws
    tokens = draws[verdict]
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]
    record_property("p_values", p_values)
    print(f"\n{verdict.__name__} in a batch of 3: chi-square p-values {p_values}")
    if verdict is accept_reject:
        assert min(p_values) > P_THRESHOLD
    else:  # the negative control: the same test fails a broken sampler
        assert max(p_values) < P_THRESHOLD
