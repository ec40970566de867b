"""Batches that refill (model/decode/refill.py): every request decodes exactly as it would alone
with its own key, whatever slot it lands in and whoever held that slot before; a refill that
reuses the previous request's random stream is caught."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model import generate
from specbench.model.decode import batched, drafters, refill
from specbench.model.decode.sampling import Warp

from conftest import random_model
from exactness import TARGET, noisy_copy

N, K, B = 8, 3, 2
PROMPTS = [[3, 7, 1], [5, 5, 2, 9, 4], [11], [2, 8, 6, 1], [13, 4, 4], [9, 1, 7, 3, 3, 2]]


def refill_pair():
    """A draft that agrees with its target often, not always, and the target (random weights)."""
    target = random_model(TARGET, 0, "target", scale=20)
    return noisy_copy(target, 0.3, 4), target


@pytest.fixture(scope="module")
def models():
    return refill_pair()


def queue(prompts, seed=0, max_len=64):
    bufs, n_prompts = batched.prompt_buffers(prompts, max_len)
    return refill.Queue(bufs, n_prompts, batched.keys(seed, len(prompts)))


def fixed_batch(draft, target, prompts, warp, seed=0, max_len=64):
    """Every request in one fixed batch of len(prompts) slots, each with its own key: what each
    request decodes alone, sequence by sequence (test_batch.py)."""
    drafter = drafters.model_drafter(draft.config)
    tokens, _ = generate.speculative(
        draft, target, prompts, N, K, warp, seed, drafter=drafter, max_len=max_len
    )
    return np.asarray(tokens)


def served(draft, target, prompts, warp, seed=0, max_len=64):
    drafter = drafters.model_drafter(draft.config)
    kw = dict(B=B, n_tokens=N, drafter=drafter, target_config=target.config, warp=warp, max_len=max_len, K=K)
    return refill.serve_spec_jit(draft.params, target.params, queue(prompts, seed, max_len), **kw)


def test_at_t0_every_request_s_tokens_are_its_autoregressive_decode(models):
    draft, target = models
    out = served(draft, target, PROMPTS, Warp())
    ar = refill.serve_ar_jit(
        target.params, queue(PROMPTS), B=B, n_tokens=N, config=target.config, warp=Warp(), max_len=64
    )
    for i, prompt in enumerate(PROMPTS):
        alone, _ = generate.autoregressive(target, prompt, N)
        np.testing.assert_array_equal(np.asarray(out.tokens[i]), alone)
        np.testing.assert_array_equal(np.asarray(ar.tokens[i]), alone)
    # 6 requests on 2 slots: every slot busy until the queue empties, then at most one waits
    counts = out.counts
    assert int(np.sum(counts.rounds)) >= len(PROMPTS) and int(out.rounds) < int(np.sum(counts.rounds))
    assert 0 <= int(out.idle) < int(out.rounds)


def test_at_t1_every_request_decodes_as_it_would_alone_with_its_own_key(models):
    draft, target = models
    warp = Warp(1.0)
    want = fixed_batch(draft, target, PROMPTS, warp, seed=5)
    got = np.asarray(served(draft, target, PROMPTS, warp, seed=5).tokens)
    np.testing.assert_array_equal(got, want)
    # accepted and rejected drafts both happened: the comparison covers the residual draws
    hist = np.asarray(served(draft, target, PROMPTS, warp, seed=5).counts.accepted_hist).sum(axis=0)
    assert hist[0] > 0 and hist[1:].sum() > 0


def test_a_refill_that_reuses_the_finished_request_s_random_stream_is_caught(models, monkeypatch):
    draft, target = models
    warp = Warp(1.0)
    want = fixed_batch(draft, target, PROMPTS, warp, seed=5)
    real = batched.spec_start

    def stale_key_start(draft_params, target_params, bufs, n, keys, *args):
        # broken: every started request draws from the first request's stream
        return real(draft_params, target_params, bufs, n, jnp.broadcast_to(keys[:1], keys.shape), *args)

    monkeypatch.setattr(batched, "spec_start", stale_key_start)
    drafter = drafters.model_drafter(draft.config)
    kw = dict(B=B, n_tokens=N, drafter=drafter, target_config=target.config, warp=warp, max_len=64, K=K)
    broken = refill.serve_spec(draft.params, target.params, queue(PROMPTS, 5), **kw)  # traced afresh
    assert not np.array_equal(np.asarray(broken.tokens), want)


def test_each_request_s_span_of_rounds_is_recorded_and_a_refill_begins_where_a_slot_freed(models):
    draft, target = models
    out = served(draft, target, PROMPTS, Warp())
    spans, rounds = np.asarray(out.spans), int(out.rounds)
    began, ended = spans[:, 0], spans[:, 1]
    assert (began[:B] == 0).all() and (ended > began).all() and ended.max() == rounds
    freed = set(ended.tolist())
    assert all(b in freed for b in began[B:]), (began, ended)  # a refill takes a slot as it frees
    # each slot serves one request at a time: at any round at most B requests are in their span
    busy = [int(((began < r) & (r <= ended)).sum()) for r in range(1, rounds + 1)]
    assert max(busy) <= B and min(busy) >= 1


def test_generate_serves_a_queue_and_counts_the_slots_use(models):
    draft, target = models
    tokens, stats = generate.serve(draft, target, PROMPTS, N, K, Warp(), 0, slots=4)
    ar_tokens, ar_stats = generate.serve_autoregressive(target, PROMPTS, N, Warp(), 0, slots=4)
    np.testing.assert_array_equal(tokens, ar_tokens)  # T = 0: every request its AR decode
    assert stats.n_seqs == len(PROMPTS) and stats.n_slots == 4 and 0 < stats.idle_fraction < 1
    # AR: 6 requests of N - 1 steps each on 4 slots; the queue empties after 2 refills
    assert ar_stats.batch_rounds == 2 * (N - 1) and ar_stats.idle_slots == 4 * 2 * (N - 1) - 6 * (N - 1)


def test_run_serves_a_refilled_queue_and_its_row_says_so(env, tmp_path):
    from conftest import assert_one_line_error, invoke

    out = tmp_path / "row.json"
    args = ["--batch", 2, "--refill", "--queue", 4, "-n", 8, "--repeats", 2, "--no-save"]
    result = invoke("run", *env, *args, "--export-json", out)
    assert result.exit_code == 0, result.output
    assert "a queue of 4 requests on 2 refilled slots" in result.output
    row = __import__("json").loads(out.read_text())[0]
    assert (row["batch"], row["queue"], row["identical"]) == (2, 4, True)
    assert len(row["sd_token_ids"]) == 4 and row["ar_starts"] == row["sd_starts"] == 2.0
    assert row["sd_tokens_per_s"] == pytest.approx(4 * 8 / row["sd_mean_s"])
    assert 0 <= row["idle_fraction"] < 1 and row["ar_steps"] >= 2 * 7  # 4 requests of 7 steps, 2 at a time
    for flags, flag, words in (
        (["--queue", 4, *env], "--queue", "give --refill"),
        (["--batch", 2, "--refill", "--host-loop", *env], "--host-loop", "device loop"),
        (["--refill", "--drafter", "dial", "--acceptance", 0.5, *env[2:]], "--refill", "dial"),  # no draft
    ):
        assert_one_line_error(invoke("run", *flags, "--dry-run"), flag, words)
    assert_one_line_error(invoke("sweep", *env, "--refill", "--dry-run"), "--refill", "--batch")


@pytest.mark.slow
def test_a_refilled_request_follows_the_target_and_the_stale_key_control_does_not(small_pair, monkeypatch):
    """χ² per position over 1,024 requests of one prompt served on 4 refilled slots (each with its
    own key), against the target's exact marginals; the control reuses one random stream."""
    from exactness import P_THRESHOLD, chi_square_p, target_marginals

    draft, target = small_pair
    prompt, warp, Q = [3, 7, 1], Warp(1.0), 1024
    exact = target_marginals(target, prompt, warp, 3)
    drafter = drafters.model_drafter(draft.config)
    kw = dict(B=4, n_tokens=3, drafter=drafter, target_config=target.config, warp=warp, max_len=16, K=2)
    q = refill.Queue(*batched.prompt_buffers([prompt] * Q, 16), batched.keys(11, Q))
    tokens = np.asarray(refill.serve_spec_jit(draft.params, target.params, q, **kw).tokens)
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]  # the positions rounds emit
    assert min(p_values) > P_THRESHOLD, p_values
    from specbench.model.decode import decoding

    real = decoding.spec_start  # the control: every request started on one random stream
    monkeypatch.setattr(
        decoding, "spec_start", lambda d, t, b, n, key, *a: real(d, t, b, n, jax.random.PRNGKey(0), *a)
    )
    broken = np.asarray(refill.serve_spec(draft.params, target.params, q, **kw).tokens)
    assert max(chi_square_p(broken[:, i], exact[i]) for i in (1, 2)) < P_THRESHOLD
