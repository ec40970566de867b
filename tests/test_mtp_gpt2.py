"""An MTP layer over a GPT-2 target (the bundled tiny-target's kind: `python -m specbench.train
mtp`): DeepSeek's layout (vLLM's DeepSeekMultiTokenPredictorLayer) over a GPT-2 block, its norms
GPT-2's layer norms, its position the target's learned one. A NumPy reference written from those
definitions (HF's GPT2Block, not specbench's code) gives the first draft and the K-token greedy
chain; a control read with the wrong norm placement loses it; SD = AR at T = 0 for chains, trees,
batches and the CPU kernel's layout; chi-square per role at T = 1 with a broken control; on disk,
the target's loader leaves the layer to the head; the command line; and training lowers its loss."""

import dataclasses
import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_eagle3 import SHAPES

from specbench.model import generate
from specbench.model.checkpoints import hf_layout, mtp_files, weights
from specbench.model.decode import decoding, drafters
from specbench.model.decode.sampling import Warp
from specbench.model.decode.tree import Tree
from specbench.model.generate import autoregressive, speculative
from specbench.model.nets import gpt2, mtp
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.network import Model

from conftest import assert_one_line_error, invoke, random_model
from exactness import P_THRESHOLD, role_p_values, with_kernel

TARGET = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=64, n_vocab=97)
SMALL = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=32, n_vocab=12)  # chi-square's
PROMPT = [5, 17, 2, 88, 40, 3, 5, 17, 60, 1]
K = 4


def random_head(target_config, seed: int, scale: float = 4.0, fmt=mtp.DEEPSEEK) -> Model:
    """Random weights of the layer over a GPT-2 block, the matrices scaled up (sharp drafts), its
    norms' biases not zero (so where a norm sits shows)."""
    config = mtp.config_for(target_config, fmt)
    params, rng = mtp.init_params(config, seed), np.random.default_rng(seed)
    params = jax.tree_util.tree_map(lambda x: x * scale if x.ndim >= 2 else x, params)
    for name in ("embed_norm", "hidden_norm", "ln_f"):
        params[name] = params[name] | {"bias": jnp.asarray(rng.normal(0, 0.5, config.n_embd), jnp.float32)}
    return Model("mtp-head", config, params, "random")


@pytest.fixture(scope="module")
def target():
    return random_model(TARGET, 0, "gpt2-target", scale=8.0)


# ---------------------------------------------------------------------------------------------
# The definitions in NumPy


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def gpt2_block(t: dict, b: str, x, n_head: int):
    """HF's GPT2Block (Conv1D weights [in, out], causal attention, gelu_new) over x [n, H]."""
    n, H = x.shape
    ln = lambda name, y: layer_norm(y, t[f"{b}{name}.weight"], t[f"{b}{name}.bias"])
    qkv = ln("ln_1", x) @ t[f"{b}attn.c_attn.weight"] + t[f"{b}attn.c_attn.bias"]
    q, k, v = (a.reshape(n, n_head, H // n_head) for a in np.split(qkv, 3, axis=-1))
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(H // n_head) + np.triu(np.full((n, n), -np.inf), 1)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    attn = np.einsum("hqk,khd->qhd", w / w.sum(-1, keepdims=True), v).reshape(n, H)
    r = x + attn @ t[f"{b}attn.c_proj.weight"] + t[f"{b}attn.c_proj.bias"]
    m = ln("ln_2", r) @ t[f"{b}mlp.c_fc.weight"] + t[f"{b}mlp.c_fc.bias"]
    gelu = 0.5 * m * (1 + np.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m**3)))
    return r + gelu @ t[f"{b}mlp.c_proj.weight"] + t[f"{b}mlp.c_proj.bias"]


def engine_layer(t: dict, hidden, tokens, config: GPT2Config, swap: bool = False):
    """DeepSeek's MTP layer over a GPT-2 block, over vLLM's rows: row i reads the feature hidden[i]
    and token tokens[i] (the token after position i), its position embedding that of position
    i + 1, the token's. Returns (what the layer returns, before shared_head.norm; the logits).
    `swap`: the control's reading, shared_head.norm applied inside the layer (MiMo's place) and the
    target's feature taken before its final norm."""
    p, n = f"h.{config.n_layer}.", len(tokens)
    ln = lambda name, y: layer_norm(y, t[f"{p}{name}.weight"], t[f"{p}{name}.bias"])
    e = t["wte.weight"][tokens].copy()
    e[0] = 0.0  # inputs_embeds[positions == 0] = 0
    x = np.concatenate([ln("enorm", e), ln("hnorm", hidden)], -1) @ t[f"{p}eh_proj.weight"].T
    out = gpt2_block(t, p, x + t["wpe.weight"][1 : n + 1], config.n_head)
    if swap:
        out = ln("shared_head.norm", out)
        return out, out @ t["wte.weight"].T
    return out, ln("shared_head.norm", out) @ t["wte.weight"].T


def engine_chain(t: dict, target_hidden, ids, config: GPT2Config, k: int, swap: bool = False) -> list[int]:
    """vLLM's proposer at T = 0: draft j + 1 reads what the layer returned for draft j's row."""
    hidden, tokens, drafts = list(target_hidden[:-1]), list(ids[1:]), []
    for _ in range(k):
        out, logits = engine_layer(t, np.asarray(hidden), np.asarray(tokens), config, swap)
        drafts.append(int(np.argmax(logits[-1])))
        hidden.append(out[-1])
        tokens.append(drafts[-1])
    return drafts


def target_features(target: Model, tensors: dict, ids, normed: bool = True):
    """The target's last hidden state after ln_f (DeepSeek's target hands it normed), or before."""
    _, _, h = gpt2.step(target.params, gpt2.init_cache(TARGET, 32), jnp.asarray(ids), 0, TARGET, hidden=True)
    h = np.asarray(h, np.float64)
    return layer_norm(h, tensors["ln_f.weight"], tensors["ln_f.bias"]) if normed else h


def specbench_chain(target: Model, head: Model, k: int) -> list[int]:
    drafter = drafters.mtp_drafter(target.config, head=head.config)
    params = generate.draft_params_for(drafter, head, target)
    buf = jnp.asarray(PROMPT + [0] * 12, jnp.int32)
    key, warp = jax.random.PRNGKey(0), Warp(0.0)
    state = decoding.spec_start(params, target.params, buf, jnp.int32(len(PROMPT)), key, drafter,
                                TARGET, warp, 64, k)  # fmt: skip
    _, drafts, _, _ = drafters.propose(drafter, params, state.draft, state.tokens, state.n, key, warp, k,
                                       TARGET.n_vocab)  # fmt: skip
    return [int(d) for d in drafts]


@pytest.fixture(scope="module")
def written(tmp_path_factory, target):
    """The target's folder with a DeepSeek-layout MTP layer beside its blocks (h.2.*), its
    tensors as float64, and the head as specbench reads it back."""
    from safetensors.numpy import load_file

    head = random_head(TARGET, 1)
    folder = tmp_path_factory.mktemp("mtp") / "target"
    mtp_files.save_with_target(folder, target.params, TARGET, head.params, head.config)
    tensors = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    config, params = mtp_files.load(folder, TARGET)
    return folder, tensors, Model("mtp", config, params, str(folder))


def test_the_chain_is_deepseeks_layer_over_a_gpt2_block(target, written):
    _, tensors, head = written
    assert "h.2.eh_proj.weight" in tensors and "h.2.attn.c_attn.weight" in tensors
    assert head.config.mtp is mtp.DEEPSEEK and isinstance(head.config, GPT2Config)
    ids = PROMPT + [int(autoregressive(target, PROMPT, 1)[0][-1])]
    reference = engine_chain(tensors, target_features(target, tensors, ids), ids, TARGET, K)
    assert specbench_chain(target, head, K) == reference
    assert len(set(reference)) > 1
    before = target_features(target, tensors, ids, normed=False)
    assert engine_chain(tensors, before, ids, TARGET, K, swap=True) != reference  # the reference can tell


def test_a_head_read_with_the_wrong_norm_placement_loses_the_chain(target, written):
    _, tensors, head = written
    ids = PROMPT + [int(autoregressive(target, PROMPT, 1)[0][-1])]
    reference = engine_chain(tensors, target_features(target, tensors, ids), ids, TARGET, K)
    wrong_fmt = dataclasses.replace(
        mtp.DEEPSEEK, out_norm="shared_head.norm", head_norm=None, target_normed=False
    )
    params = dict(head.params)
    params["out_norm"] = params.pop("ln_f")
    control = Model("control", dataclasses.replace(head.config, mtp=wrong_fmt), params, "random")
    ours = specbench_chain(target, control, K)
    assert ours != reference


def test_the_targets_loader_leaves_the_layer_to_the_head(target, written):
    config, params = weights.read_dir(written[0])
    assert config == TARGET and hf_layout.mtp_layers(written[0]) == 1
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(target.params)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", SHAPES)
def test_greedy_gpt2_mtp_equals_autoregressive(target, shape):
    head = random_head(TARGET, 2)
    drafter = dataclasses.replace(drafters.mtp_drafter(TARGET, head=head.config), **SHAPES[shape])
    k = drafter.tree.depth if drafter.tree is not None else 3
    ar, _ = autoregressive(target, PROMPT, 20)
    sd, _ = speculative(head, target, PROMPT, 20, k, drafter=drafter)
    np.testing.assert_array_equal(sd, ar, err_msg=shape)
    if shape == "chain":  # a batch, and the CPU kernel's layout
        batch, _ = speculative(head, target, [PROMPT, PROMPT[:5]], 20, k, drafter=drafter)
        np.testing.assert_array_equal(batch[0], ar)
        (k_target,) = with_kernel(target)
        np.testing.assert_array_equal(speculative(head, k_target, PROMPT, 20, k, drafter=drafter)[0], ar)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["chain", "chain-wrong-row", "tree-2x1x1", "tree-2x1x1-wrong-row"])
def test_every_role_of_a_gpt2_mtp_round_follows_the_target(case, record_property):
    from test_eagle import ROLE_CASES, wrong_row_propose, wrong_row_tree_propose

    from exactness import round_samples

    target = random_model(SMALL, 3, "small", scale=6.0)
    head = random_head(SMALL, 5, scale=2.0)
    kind, shape, exact = ROLE_CASES[case]
    spec = drafters.KINDS["mtp"]
    if kind == "eagle-wrong-row":
        spec = dataclasses.replace(spec, name="mtp-wrong-row", propose=wrong_row_propose,
                                   propose_tree=wrong_row_tree_propose)  # fmt: skip
    tree = Tree.branching(shape) if shape else None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(drafters, "KINDS", {**drafters.KINDS, spec.name: spec})
        drafter = drafters.Drafter(spec, head.config, tree=tree)
        params = generate.draft_params_for(drafter, head, target)
        tokens, accepted, drafted = round_samples(params, target, [3, 7, 1], Warp(1.0), 3, drafter)[0]
    p_values = role_p_values(target, [3, 7, 1], Warp(1.0), tokens, accepted, drafted, 3)
    record_property("p_values", p_values)
    assert {"draft 1", "draft 2", "after rejection"} <= set(p_values)
    assert 0.05 < accepted.mean() / 3 < 0.95
    if exact:
        assert min(p_values.values()) > P_THRESHOLD, p_values
    else:
        assert min(p_values.values()) < P_THRESHOLD, p_values


# ---------------------------------------------------------------------------------------------
# The command line


def test_run_finds_the_layer_beside_the_target_or_in_name_mtp_and_refuses_none(env, tmp_path):
    target = weights.load_model(env[3])
    head = random_head(target.config, 4)
    folder = tmp_path / "withmtp"
    mtp_files.save_with_target(folder, target.params, target.config, head.params, head.config)
    out = tmp_path / "row.json"
    args = ("--drafter", "mtp", "--K", "3", "-n", "12", "--repeats", "1", "--no-save", "--export-json", out)
    result = invoke("run", "--target", folder, *args)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["identical"] is True and (row["mtp_format"], row["mtp_layers"]) == ("deepseek", 1)
    # the layer alone, in gpt2_weights/<target>-mtp, is the default for a target without one
    mtp_files.save_head(tmp_path / "gpt2_weights" / "t-mtp", head.params, head.config, target.config, "t")
    result = invoke("run", "--target", env[3], *args)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["identical"] is True and row["mtp_format"] == "deepseek"
    (listed,) = [r for r in weights.list_models() if r["name"] == "t-mtp"]
    assert (
        listed["kind"] == "MTP layer (--drafter mtp)"
        and "drafts for t, deepseek's layout" in listed["description"]
    )
    shutil.rmtree(tmp_path / "gpt2_weights" / "t-mtp")
    result = invoke("run", "--target", env[3], "--drafter", "mtp", "-n", "4", "--dry-run")
    assert_one_line_error(result, "--drafter", "has no MTP layers", "python -m specbench.train mtp")
    narrow = random_head(dataclasses.replace(target.config, n_embd=16), 1)
    mtp_files.save_head(tmp_path / "narrow", narrow.params, narrow.config, target.config, "t")
    result = invoke(
        "run", "--target", env[3], "--drafter", "mtp", "--mtp-head", tmp_path / "narrow", "--dry-run"
    )
    assert_one_line_error(result, "--mtp-head")


def test_training_lowers_the_layers_loss_and_what_it_saves_reads_back(tmp_path, target):
    pytest.importorskip("optax")
    from specbench.train.loop import TrainConfig, train
    from specbench.train.mtp import MtpLoss, mtp_task, validate

    tokens = np.random.default_rng(0).integers(0, 97, 4000).astype(np.uint16)
    tc = TrainConfig(steps=30, batch=4, ctx=32, lr=3e-3, warmup=2, eval_batches=2)
    how, vocab = MtpLoss(depth=2), np.arange(97)
    task = mtp_task(target, tc, how, vocab, tokens, tokens)
    before = validate(task.init(), target, vocab, tokens, tc, how)
    params, _ = train(TARGET, tokens, tokens, tc, log=lambda *a: None, task=task, progress_interval=1e9)
    after = validate(params, target, vocab, tokens, tc, how)
    assert after["loss"] < before["loss"] - 0.1  # a cross-entropy onto q: its floor is q's entropy
    config = mtp.config_for(TARGET, mtp.DEEPSEEK)
    mtp_files.save_head(tmp_path / "head", params, config, TARGET, "t")
    read_config, read = mtp_files.load(tmp_path / "head", TARGET)
    assert read_config == config and mtp_files.target_of(tmp_path / "head") == "t"
    for a, b in zip(jax.tree_util.tree_leaves(read), jax.tree_util.tree_leaves(params)):
        np.testing.assert_array_equal(a, b)
