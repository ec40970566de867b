"""The EAGLE head (model/nets/eagle.py): its cached step equals its uncached forward, the round hands it
the target's true features, its drafts are exact at T = 0 and in every role at T = 1 (a broken
control fails), and heads load, refuse damage, train and run from the command line."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model import generate
from specbench.model.checkpoints import eagle_files
from specbench.model.decode import decoding, draft_chains, draft_trees, drafters
from specbench.model.decode.sampling import Warp
from specbench.model.decode.tree import Dynamic, Tree
from specbench.model.generate import autoregressive, speculative
from specbench.model.nets import eagle, gpt2
from specbench.model.nets.network import Model

from conftest import assert_one_line_error, invoke, make_small_target
from exactness import P_THRESHOLD, SMALL_T, TARGET, role_p_values, round_samples, with_kernel


def random_head(target: Model, seed: int, scale: float = 3.0) -> Model:
    """A head with random weights of the target's width (fc and the block scaled up, so that its
    drafts depend on the features it reads, and its biases non-zero)."""
    config = eagle.config_for(target.config)
    rng = np.random.default_rng(seed)
    params = jax.tree_util.tree_map(
        lambda x: x * scale + jnp.asarray(0.05 * rng.normal(size=x.shape), x.dtype),
        eagle.init_params(config, seed),
    )
    return Model("head", config, params, "random")


@pytest.fixture(scope="module")
def head(target):
    return random_head(target, 1)


def test_the_targets_step_returns_the_features_of_its_uncached_pass(target):
    tokens = jnp.asarray([5, 9, 1, 44, 3, 3, 70], jnp.int32)
    cache = gpt2.init_cache(TARGET, 32)
    logits, cache, first = gpt2.step(target.params, cache, tokens[:4], 0, TARGET, hidden=True)
    _, _, rest = gpt2.step(target.params, cache, tokens[4:], 4, TARGET, hidden=True)
    whole = gpt2.transformer(target.params, tokens, TARGET, features=True)
    np.testing.assert_allclose(jnp.concatenate([first, rest]), whole, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(logits, gpt2.gpt2(target.params, tokens[:4], TARGET), rtol=2e-5, atol=2e-5)


def test_the_cached_head_equals_its_uncached_forward(target, head):
    params = eagle.attach(head.params, target.params, target.config)
    config, tokens = head.config, jnp.asarray([5, 9, 1, 44, 3, 3, 70, 12], jnp.int32)
    feats = gpt2.transformer(target.params, tokens, TARGET, features=True)
    logits, h = eagle.forward(params, feats, tokens, config)
    # the prompt's 5 rows in one step, then the rest one at a time, each reading f_{j-1}
    cache = gpt2.init_cache(config, 32)
    got_logits, got_h, cache = eagle.step(params, cache, eagle.shifted(feats)[:5], tokens[:5], 0, config)
    rows_l, rows_h = [got_logits], [got_h]
    for j in range(5, 8):
        lj, hj, cache = eagle.step(params, cache, feats[j - 1 : j], tokens[j : j + 1], j, config)
        rows_l.append(lj), rows_h.append(hj)
    np.testing.assert_allclose(jnp.concatenate(rows_h), h, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(jnp.concatenate(rows_l), logits, rtol=1e-4, atol=1e-4)
    # the window a round re-reads: the rows up to position n - 1, from 0 near the start
    s, window, before, row = eagle.window(jnp.pad(feats, ((0, 8), (0, 0))), jnp.pad(tokens, (0, 8)), 6, 4)
    assert (int(s), int(row)) == (2, 3)
    np.testing.assert_array_equal(window, tokens[2:6])
    np.testing.assert_allclose(before, feats[1:5])
    s, _, before, row = eagle.window(feats, tokens, 2, 4)
    assert (int(s), int(row)) == (0, 1) and not np.any(before[0])


def test_the_head_holds_the_targets_true_features_and_its_own_cache_after_every_round(target, head):
    """After any rounds, the features kept for the committed tokens are the target's own (its
    uncached pass over them), and the head's cache there is what reading them afresh writes: the
    window re-read leaves nothing of its own predictions behind."""
    chain = drafters.eagle_drafter(TARGET)
    params = generate.draft_params_for(chain, head, target)
    prompt = [5, 9, 1, 44, 3]
    buf = jnp.asarray(prompt + [0] * 11, jnp.int32)
    tree = dataclasses.replace(chain, tree=Tree.branching((2, 2, 1)))
    for drafter, warp in ((chain, Warp(0.0)), (chain, Warp(1.0)), (tree, Warp(1.0))):
        # the tool's compiled start and round (run eagerly, each took hundreds of small programs)
        kw = dict(drafter=drafter, target_config=TARGET, warp=warp)
        state = decoding.spec_start_jit(
            params, target.params, buf, jnp.int32(5), jax.random.PRNGKey(2), **kw, max_len=64, K=3
        )
        for _ in range(4):
            state, _ = decoding.spec_round_jit(params, target.params, state, **kw, K=3)
        n = int(state.n)
        committed = state.tokens[: n - 1]  # tokens[n-1] is pending: no feature yet
        true = gpt2.transformer(target.params, committed, TARGET, features=True)
        np.testing.assert_allclose(state.draft.feats[: n - 1], true, rtol=1e-4, atol=1e-4)
        fresh = gpt2.init_cache(head.config, 64)
        _, _, fresh = eagle.step(params, fresh, eagle.shifted(true), committed, 0, head.config)
        for name, axis in (("k", -1), ("v", 1)):
            got = jnp.take(state.draft.cache[name], jnp.arange(n - 1), axis=axis)
            want = jnp.take(fresh[name], jnp.arange(n - 1), axis=axis)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{warp} cache {name}")


rng = np.random.default_rng(11)
PROMPTS = [list(rng.integers(0, 97, 1 + 3 * i)) for i in range(4)] + [[5, 6, 7, 5, 6, 7, 5, 6]]
GREEDY = {
    "token": {},
    "block": dict(verify="block"),
    "drafts-3": dict(drafts=3),
    "dynamic-K": dict(confidence=0.5),
    "vocab-40": dict(vocab=40),
}


@pytest.mark.parametrize(
    "tree", [Tree.branching((2, 2, 1)), Tree.branching((3, 1)), Dynamic(3, 3, 8)], ids=str
)
def test_greedy_eagle_trees_equal_autoregressive(target, head, tree):
    drafter = dataclasses.replace(drafters.eagle_drafter(TARGET), tree=tree)
    for prompt in PROMPTS:
        ar, _ = autoregressive(target, prompt, 20, max_len=64)
        sd, _ = speculative(head, target, prompt, 20, tree.depth, max_len=64, drafter=drafter)
        np.testing.assert_array_equal(sd, ar, err_msg=f"prompt {prompt}")


@pytest.mark.parametrize("case", GREEDY)
def test_greedy_eagle_equals_autoregressive(target, head, case):
    drafter = dataclasses.replace(drafters.eagle_drafter(TARGET), **GREEDY[case])
    for prompt in PROMPTS:
        ar, _ = autoregressive(target, prompt, 20, max_len=64)
        for K in (1, 4):
            sd, st = speculative(head, target, prompt, 20, K, max_len=64, drafter=drafter)
            np.testing.assert_array_equal(sd, ar, err_msg=f"{case}, prompt {prompt}, K={K}")
    if case == "token":  # and a batch of them, and the CPU kernel's layout
        batch, _ = speculative(head, target, PROMPTS, 20, 3, max_len=64, drafter=drafter)
        for row, prompt in zip(batch, PROMPTS):
            np.testing.assert_array_equal(row, autoregressive(target, prompt, 20, max_len=64)[0])
        (k_target,) = with_kernel(target)  # the head is joined to the target in its layout (attach)
        sd, _ = speculative(head, k_target, PROMPTS[1], 20, 4, max_len=64, drafter=drafter)
        np.testing.assert_array_equal(sd, autoregressive(target, PROMPTS[1], 20, max_len=64)[0])


def test_the_heads_drafts_depend_on_the_features_it_is_handed(target, head):
    drafter = drafters.eagle_drafter(TARGET)
    params = generate.draft_params_for(drafter, head, target)
    buf = jnp.asarray([5, 9, 1, 44, 3, 0, 0, 0], jnp.int32)
    state = decoding.spec_start(
        params, target.params, buf, jnp.int32(5), jax.random.PRNGKey(0), drafter, TARGET, Warp(1.0), 64, 3
    )
    propose = lambda dstate: drafters.propose(
        drafter, params, dstate, state.tokens, state.n, jax.random.PRNGKey(1), Warp(1.0), 3, TARGET.n_vocab
    )
    _, _, p, _ = propose(state.draft)
    _, _, p_blind, _ = propose(state.draft._replace(feats=jnp.zeros_like(state.draft.feats)))
    assert np.abs(np.asarray(p[0]) - np.asarray(p_blind[0])).sum() > 0.1


# ---------------------------------------------------------------------------------------------
# T = 1: every role follows the target; a head whose p is read one feature row off does not


def wrong_row_propose(drafter, params, dstate, tokens, n, key, warp, K, n_vocab):
    """Negative control: the drafts are the head's, the p reported with them the head's when every
    feature it reads is one row off (the feature of the token before)."""
    real = dataclasses.replace(drafter, kind=drafters.KINDS["eagle"])
    out, drafts, _, n_drafted = draft_chains.eagle_propose(
        real, params, dstate, tokens, n, key, warp, K, n_vocab
    )
    off = dstate._replace(feats=jnp.roll(dstate.feats, 1, axis=0))
    _, _, p, _ = draft_chains.eagle_propose(real, params, off, tokens, n, key, warp, K, n_vocab)
    return out, drafts, p, n_drafted


def wrong_row_tree_propose(drafter, params, dstate, tokens, n, key, warp, n_vocab):
    """The same negative control for a tree: its nodes the head's, p read one feature row off."""
    real = dataclasses.replace(drafter, kind=drafters.KINDS["eagle"])
    out, nodes, _ = draft_trees.eagle_tree_propose(real, params, dstate, tokens, n, key, warp, n_vocab)
    off = dstate._replace(feats=jnp.roll(dstate.feats, 1, axis=0))
    _, _, p = draft_trees.eagle_tree_propose(real, params, off, tokens, n, key, warp, n_vocab)
    return out, nodes, p


ROLE_CASES = {  # name: (kind, tree, exact?)
    "chain": ("eagle", None, True),
    "chain-wrong-row": ("eagle-wrong-row", None, False),
    "tree-2x1x1": ("eagle", (2, 1, 1), True),
    "tree-2x1x1-wrong-row": ("eagle-wrong-row", (2, 1, 1), False),
    "dynamic-3x2x5": ("eagle", Dynamic(3, 2, 5), True),
}


def draws_by_case(target, head, config) -> dict:
    """One set of round samples for each of ROLE_CASES, the head's (its config `config`) and the
    wrong-row control's, over the small target: what the role tests judge."""
    broken = dataclasses.replace(
        drafters.KINDS["eagle"],
        name="eagle-wrong-row",
        propose=wrong_row_propose,
        propose_tree=wrong_row_tree_propose,
    )
    draws = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(drafters, "KINDS", {**drafters.KINDS, broken.name: broken})
        for case, (kind, shape, _) in ROLE_CASES.items():
            tree = Tree.branching(shape) if isinstance(shape, tuple) else shape
            drafter = drafters.Drafter(
                broken if kind == broken.name else drafters.KINDS[kind], config, tree=tree
            )
            params = generate.draft_params_for(drafter, head, target)
            draws[case] = round_samples(params, target, [3, 7, 1], Warp(1.0), 3, drafter)[0]
    return draws


@pytest.fixture(scope="module")
def role_draws(shared):
    def make():
        target = make_small_target()
        return target, draws_by_case(target, random_head(target, 5, scale=2.0), eagle.config_for(SMALL_T))

    return shared("eagle-roles", make)


@pytest.mark.slow
@pytest.mark.parametrize("case", ROLE_CASES)
def test_every_role_of_an_eagle_round_follows_the_target(role_draws, case, record_property):
    target, draws = role_draws
    tokens, accepted, drafted = draws[case]
    p_values = role_p_values(target, [3, 7, 1], Warp(1.0), tokens, accepted, drafted, 3)
    record_property("p_values", p_values)
    print(f"\n{case}: " + ", ".join(f"{role} {p:.2g}" for role, p in sorted(p_values.items())))
    # the random head's most likely tokens (a dynamic tree's) rarely make a whole path: no bonus there
    roles = {"draft 1", "draft 2", "draft 3", "after rejection"}
    assert roles | ({"bonus", "after bonus"} if "dynamic" not in case else set()) <= set(p_values)
    assert 0.05 < accepted.mean() / 3 < 0.95  # drafts both accepted and rejected: every role is tested
    if ROLE_CASES[case][2]:
        assert min(p_values.values()) > P_THRESHOLD
    else:
        assert min(p_values.values()) < P_THRESHOLD


# ---------------------------------------------------------------------------------------------
# On disk, training and the command line


def test_a_head_saved_loads_the_same_and_damage_is_named(tmp_path, target, head):
    eagle_files.save(tmp_path / "h", head.params, head.config, "target")
    assert eagle_files.is_head_dir(tmp_path / "h") and not eagle_files.is_head_dir(tmp_path)
    config, params, trained_on = eagle_files.load(tmp_path / "h")
    assert config == head.config and trained_on == "target"
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(head.params)):
        np.testing.assert_allclose(a, np.asarray(b, np.float16).astype(np.float32))
    from safetensors.numpy import load_file, save_file

    from specbench.errors import WeightsError

    flat = load_file(str(tmp_path / "h" / eagle_files.WEIGHTS_FILE))
    flat["fc.weight"] = flat["fc.weight"][:-1]
    save_file(flat, str(tmp_path / "h" / eagle_files.WEIGHTS_FILE))
    with pytest.raises(WeightsError, match=r"fc.weight is shaped \(63, 32\), expected \(64, 32\)"):
        eagle_files.load(tmp_path / "h")
    del flat["blocks.attn.c_attn.bias"]
    save_file(flat, str(tmp_path / "h" / eagle_files.WEIGHTS_FILE))
    with pytest.raises(WeightsError, match="blocks.attn.c_attn.bias is missing"):
        eagle_files.load(tmp_path / "h")


def test_training_lowers_the_heads_losses(tmp_path, target):
    pytest.importorskip("optax")
    from specbench.train.eagle import EagleLoss, eagle_task, validate
    from specbench.train.loop import TrainConfig, train

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 97, 4000).astype(np.uint16)
    tc = TrainConfig(steps=30, batch=4, ctx=32, lr=3e-3, warmup=2, eval_batches=2)
    how, vocab = EagleLoss(), np.arange(97)
    task = eagle_task(target, tc, how, vocab, tokens, tokens)
    before = validate(task.init(), target, vocab, tokens, tc, how)
    params, record = train(
        head_config := eagle.config_for(TARGET),
        tokens,
        tokens,
        tc,
        log=lambda *a: None,
        task=task,
        progress_interval=1e9,
    )
    after = validate(params, target, vocab, tokens, tc, how)
    assert after["loss"] < 0.95 * before["loss"] and after["regression"] < before["regression"]
    assert record["config"]["n_layer"] == head_config.n_layer == 1


def test_run_drafts_with_a_head_and_refuses_what_does_not_fit(env, tmp_path):
    from specbench.model.checkpoints import weights

    target = env[3]
    t = weights.load_model(target)
    h = random_head(t, 3)
    eagle_files.save(tmp_path / "head", h.params, h.config, "t")
    result = invoke(
        "run",
        "--drafter",
        "eagle",
        "--eagle-head",
        str(tmp_path / "head"),
        "--target",
        target,
        "-n",
        "8",
        "--K",
        "2",
        "--repeats",
        "1",
        "--warmup",
        "1",
        "--no-save",
    )
    assert result.exit_code == 0, result.output
    assert "EAGLE head" in result.output and "head: one block over the target's features" in result.output
    # the default head is the target's name + "-eagle" in the weights folder: absent here
    result = invoke("run", "--drafter", "eagle", "--target", target, "-n", "8", "--no-save")
    assert_one_line_error(result, "--eagle-head", "t has no EAGLE head", "python -m specbench.train eagle")
    wide = random_head(Model("w", dataclasses.replace(t.config, n_embd=t.config.n_embd * 2), {}, "random"), 1)
    eagle_files.save(tmp_path / "wide", wide.params, wide.config, "w")
    result = invoke(
        "run", "--drafter", "eagle", "--eagle-head", str(tmp_path / "wide"), "--target", target, "--no-save"
    )
    assert_one_line_error(result, "--eagle-head", "width")
    result = invoke("run", "--drafter", "model", "--eagle-head", str(tmp_path / "head"), "--no-save")
    assert_one_line_error(result, "--eagle-head", "only the eagle drafter uses it")
    (tmp_path / "nothead").mkdir()
    (tmp_path / "nothead" / "config.json").write_text(json.dumps({"n_layer": 2}))
    result = invoke(
        "run",
        "--drafter",
        "eagle",
        "--eagle-head",
        str(tmp_path / "nothead"),
        "--target",
        target,
        "--no-save",
    )
    assert_one_line_error(result, "--eagle-head", "is not an EAGLE head")


def test_models_lists_a_head_as_what_it_is(env, tmp_path, monkeypatch):
    from specbench.model.checkpoints import weights

    t = weights.load_model(env[3])
    h = random_head(t, 3)
    eagle_files.save(tmp_path / "gpt2_weights" / "t-eagle", h.params, h.config, "t")
    rows = {r["name"]: r for r in weights.list_models()}
    assert rows["t-eagle"]["kind"] == "EAGLE head (--drafter eagle)"
    assert rows["t-eagle"]["layers_x_width"] == f"1x{t.config.n_embd}" and rows["t-eagle"]["present"]
    # and the default head of a target named t is that folder
    result = invoke(
        "run", "--drafter", "eagle", "--target", env[3], "-n", "6", "--K", "2", "--repeats", "1", "--no-save"
    )
    assert result.exit_code == 0, result.output
