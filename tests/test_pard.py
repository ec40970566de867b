"""PARD, the one-pass drafter (decode/pard.py, train/pard.py): SD = AR at T = 0 for chains, block
verification, k drafts, dynamic K, a batch, a draft vocabulary and the CPU kernel's layout; every
role at T = 1 follows the target (chi-square) and a control that reports the next row's p fails;
the training pass's rows are exactly what drafting reads; the command line; and its cost shape."""

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.draft_cost import DraftCost
from specbench.model import generate
from specbench.model.checkpoints import hf_layout
from specbench.model.decode import drafters, pard
from specbench.model.decode.sampling import Warp
from specbench.model.generate import autoregressive, speculative
from specbench.model.nets import gpt2
from specbench.model.nets.network import Model

from conftest import assert_one_line_error, invoke, make_small_target, random_model
from exactness import DRAFTING, P_THRESHOLD, TARGET, noisy_copy, role_p_values, round_samples, with_kernel

PROMPT = [5, 17, 2, 88, 40, 3, 5, 17]
ROOT = Path(__file__).resolve().parent.parent


def pard_draft(target: Model, noise: float, seed: int) -> Model:
    """A PARD draft for a target: the target with noise on every weight (it agrees often, not
    always) and a mask token appended (train/pard.with_mask)."""
    from specbench.train.pard import with_mask

    params, config = with_mask(noisy_copy(target, noise, seed).params, target.config)
    return Model("pard-draft", config, params, "random")


@pytest.fixture(scope="module")
def pair():
    target = random_model(TARGET, 0, "t", scale=8)
    return pard_draft(target, 0.3, 1), target


SHAPES = DRAFTING


@pytest.mark.parametrize("shape", SHAPES)
def test_greedy_pard_equals_autoregressive(pair, shape):
    draft, target = pair
    drafter = dataclasses.replace(drafters.pard_drafter(draft.config), **SHAPES[shape])
    ar, _ = autoregressive(target, PROMPT, 24)
    for K in (1, 3, 5):
        sd, stats = speculative(draft, target, PROMPT, 24, K, drafter=drafter)
        np.testing.assert_array_equal(sd, ar, err_msg=f"{shape} K={K}")
    if shape == "chain":  # some drafts accepted, some rejected; a batch; the CPU kernel's layout
        assert 0 < stats.accepted.sum() < stats.evaluated.sum()
        batch, _ = speculative(draft, target, [PROMPT, PROMPT[:5]], 24, 4, drafter=drafter)
        np.testing.assert_array_equal(batch[0], ar)
        k_draft, k_target = with_kernel(draft, target)
        np.testing.assert_array_equal(speculative(k_draft, k_target, PROMPT, 24, 4, drafter=drafter)[0], ar)


def test_a_draft_without_the_mask_token_is_refused(pair):
    from specbench.errors import DecodeError

    _, target = pair
    drafter = drafters.pard_drafter(target.config)
    with pytest.raises(DecodeError, match="has no mask token"):
        generate.draft_params_for(drafter, target, target)


# ---------------------------------------------------------------------------------------------
# T = 1: every role follows the target; a draft that reports the next row's p does not


def next_row_propose(drafter, params, dstate, tokens, n, key, warp, K, n_vocab):
    """The control: draft i drawn from its own row, reported as drawn from row i + 1's."""
    dstate, drafts, p, n_drafted = pard.pard_propose(
        drafter, params, dstate, tokens, n, key, warp, K, n_vocab
    )
    return dstate, drafts, jnp.roll(p, -1, axis=0), n_drafted


@pytest.mark.slow
@pytest.mark.parametrize("case", ["pard", "pard-next-row"])
def test_every_role_of_a_pard_round_follows_the_target(case, record_property):
    small = make_small_target()
    draft = pard_draft(small, 1.0, 3)
    spec = drafters.KINDS["pard"]
    if case == "pard-next-row":
        spec = dataclasses.replace(spec, name=case, propose=next_row_propose)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(drafters, "KINDS", {**drafters.KINDS, spec.name: spec})
        drafter = drafters.Drafter(spec, draft.config)
        params = generate.draft_params_for(drafter, draft, small)
        tokens, accepted, drafted = round_samples(params, small, [3, 7, 1], Warp(1.0), 3, drafter)[0]
    p_values = role_p_values(small, [3, 7, 1], Warp(1.0), tokens, accepted, drafted, 3)
    record_property("p_values", p_values)
    assert {"draft 1", "draft 2", "draft 3", "after rejection"} <= set(p_values)
    assert 0.05 < accepted.mean() / 3 < 0.95  # drafts both accepted and rejected
    if case == "pard":
        assert min(p_values.values()) > P_THRESHOLD, p_values
    else:
        assert min(p_values.values()) < P_THRESHOLD, p_values


# ---------------------------------------------------------------------------------------------
# Training reads the rows drafting reads; the cost shape; the command line


def test_the_training_pass_gives_each_row_what_drafting_gives_it(pair):
    """Mask m of an anchor j in train/pard's one pass sees what drafting's step shows the mask
    at j + m: the same log-probabilities, to float32 rounding."""
    from specbench.train.pard import PardLoss, draft_logp, layout

    draft, _ = pair
    how, L = PardLoss(K=4, anchors=3), 24
    rng = np.random.default_rng(0)
    x = rng.integers(0, TARGET.n_vocab, (1, L)).astype(np.int32)
    positions, masked, sees = layout(L, how, rng)
    vocab = jnp.arange(TARGET.n_vocab)
    ours = np.asarray(draft_logp(draft.params, x, positions, masked, sees, draft.config, vocab, jnp.float32))[
        0
    ]
    for a, j in enumerate(positions[L :: how.K - 1] - 1):
        rows = np.concatenate([x[0, : j + 1], np.full(how.K - 1, pard.mask_id(draft.config))])
        logits = gpt2.gpt2(draft.params, jnp.asarray(rows), draft.config)[j:, : TARGET.n_vocab]
        expected = np.asarray(jax.nn.log_softmax(logits))
        got = np.concatenate([ours[j : j + 1], ours[L + a * (how.K - 1) : L + (a + 1) * (how.K - 1)]])
        got = np.asarray(jax.nn.log_softmax(got))  # the mask's column is left out of both
        np.testing.assert_allclose(got, expected, atol=2e-4, rtol=1e-4)


def test_pard_is_priced_as_one_pass():
    assert drafters.KINDS["pard"].draft_cost is DraftCost.ONE_PASS
    assert drafters.KINDS["pard"].draft_cost.seconds(8, lambda n: n) == 8  # t_D(K): one step of K rows


def test_run_drafts_with_a_pard_folder_and_refuses_a_plain_draft(tmp_path, monkeypatch):
    target = gpt2.GPT2Config(n_layer=2, n_head=2, n_embd=64, n_ctx=512, n_vocab=50257)
    tiny = Model("tiny", target, gpt2.init_params(target, 0), "random")
    draft = pard_draft(tiny, 0.0, 0)
    hf_layout.save(tmp_path / "pard", draft.params, draft.config)
    out = tmp_path / "row.json"
    args = ("--target", ROOT / "gpt2_weights" / "tiny-target", "--drafter", "pard", "--K", "4")
    result = invoke("run", *args, "--draft", tmp_path / "pard", "-n", "12", "--repeats", "1", "--no-save",
                    "--export-json", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["identical"] is True and (row["drafter"], row["draft_cost"]) == ("pard", "one-pass")
    result = invoke("run", *args, "--draft", tmp_path / "pard", "--peer", "numpy", "--dry-run")
    assert_one_line_error(result, "--peer", "drafts in one pass and has no peer")
    result = invoke("run", "--drafter", "model", "--draft", tmp_path / "pard", "--dry-run")
    assert_one_line_error(result, "--draft", "is a PARD draft", "--drafter pard")
    weights = tmp_path / "gpt2_weights"  # the bundled pair alone: tiny-draft has no mask token
    weights.mkdir()
    for name in ("tiny-draft", "tiny-target"):
        (weights / name).symlink_to(ROOT / "gpt2_weights" / name)
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(weights))
    result = invoke("run", *args, "-n", "4", "--dry-run")
    assert_one_line_error(result, "--draft", "has no mask token", "python -m specbench.train pard")
    (weights / "tiny-draft-pard").symlink_to(tmp_path / "pard")  # where train pard's --out puts it
    result = invoke("sweep", *args[:3], "model,pard", "--K", "4", "-n", "12", "--repeats", "1",
                    "-o", tmp_path / "sweep.json", "--export-json", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = {row["drafter"]: row for row in json.loads(out.read_text())}
    assert rows["model"]["draft"] == "tiny-draft" and rows["pard"]["draft"] == "tiny-draft-pard"
    assert rows["pard"]["identical"] is True


@pytest.mark.parametrize("prompt_length", [3, 20])
def test_the_drafts_are_the_argmax_of_the_uncached_pass(pair, prompt_length):
    """At T = 0 the K drafts are the argmax of rows n - 1 .. n + K - 2 of the draft's uncached
    forward over the committed tokens and K - 1 masks: from the start (s = 0) and where the pass
    re-reads a window over the draft's cache (s > 0)."""
    from specbench.model.decode import decoding

    draft, target = pair
    K, drafter = 4, drafters.pard_drafter(draft.config)
    prompt = (PROMPT * 3)[:prompt_length]
    params = generate.draft_params_for(drafter, draft, target)
    buf = jnp.asarray(prompt + [0] * 24, jnp.int32)
    key, warp = jax.random.PRNGKey(0), Warp(0.0)
    state = decoding.spec_start(params, target.params, buf, jnp.int32(len(prompt)), key, drafter, TARGET,
                                warp, 64, K)  # fmt: skip
    _, drafts, _, _ = drafters.propose(drafter, params, state.draft, state.tokens, state.n, key, warp, K,
                                       TARGET.n_vocab)  # fmt: skip
    n = int(state.n)
    rows = jnp.concatenate([state.tokens[:n], jnp.full(K - 1, pard.mask_id(draft.config))])
    logits = gpt2.gpt2(draft.params, rows, draft.config)[n - 1 :, : TARGET.n_vocab]
    np.testing.assert_array_equal(np.asarray(drafts), np.argmax(np.asarray(logits), -1))
