"""MTP heads read from a target's own folder (nets/mtp.py, checkpoints/mtp_files.py): for each
format, a tiny target whose folder carries an MTP layer in that format's key names, and a NumPy
reference written from the engine's definition (vLLM's deepseek_mtp.py, mimo_mtp.py,
qwen3_next_mtp.py and EagleProposer; speculators' MTPLayerMixin), not from specbench's code: the
first draft and the K-token greedy chain equal the reference's. A control read with the wrong norm
placement or the wrong order loses the reference's chain; SD = AR at T = 0 for chains, trees and
batches; chi-square per role at T = 1 with a broken control; the command line."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_eagle3 import SHAPES, rms, rotate

from specbench.model import generate
from specbench.model.checkpoints import hf_layout, mtp_files, weights
from specbench.model.decode import decoding, drafters
from specbench.model.decode.sampling import Warp
from specbench.model.decode.tree import Tree
from specbench.model.generate import autoregressive, speculative
from specbench.model.nets import mtp
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.network import Model

from conftest import assert_one_line_error, invoke, tiny_tokenizer_json
from exactness import P_THRESHOLD, role_p_values, with_kernel

TARGET = LlamaConfig(
    n_layer=3, n_head=4, n_kv_head=2, n_embd=32, n_inner=48, n_vocab=97, n_ctx=128,
    family="qwen3", qk_norm=True, explicit_head_dim=16, tied=False,
)  # fmt: skip
SMALL = LlamaConfig(
    n_layer=2, n_head=2, n_kv_head=1, n_embd=16, n_inner=24, n_vocab=12, n_ctx=16
)  # chi-square's
PROMPT = [5, 17, 2, 88, 40, 3, 5, 17, 60, 1]
K = 4


def target_model(seed: int = 0, config: LlamaConfig = TARGET) -> Model:
    from test_llama import llama_model

    return llama_model(config, seed, "llama-target", scale=8.0)


def random_head(fmt, seed: int, scale: float = 5.0, config=TARGET) -> Model:
    """Random weights of the format's layer, the matrices scaled up (sharp, varied drafts)."""
    head_config = mtp.config_for(config, fmt)
    params = mtp.init_params(head_config, seed, own_head=fmt.own_head is not None)
    params = jax.tree_util.tree_map(lambda x: x * scale if x.ndim >= 2 else x, params)
    return Model("mtp-head", head_config, params, "random")


@pytest.fixture(scope="module")
def target():
    return target_model()


# ---------------------------------------------------------------------------------------------
# The engines' definitions in NumPy


def decoder_layer(t: dict, b: str, x, config: LlamaConfig):
    """HF's Llama decoder layer (Qwen3's q/k norms over each head where it has them, rotary,
    grouped queries, causal, SwiGLU) over x [n, H] at positions 0..n-1, from the tensors under
    prefix b."""
    eps, hd, n = config.rms_norm_eps, config.head_dim, x.shape[0]
    pos = np.arange(n, dtype=np.float64)
    a = rms(x, t[f"{b}input_layernorm.weight"], eps)
    q = (a @ t[f"{b}self_attn.q_proj.weight"].T).reshape(n, -1, hd)
    k = (a @ t[f"{b}self_attn.k_proj.weight"].T).reshape(n, -1, hd)
    v = (a @ t[f"{b}self_attn.v_proj.weight"].T).reshape(n, -1, hd)
    if f"{b}self_attn.q_norm.weight" in t:  # Qwen3's
        q, k = rms(q, t[f"{b}self_attn.q_norm.weight"], eps), rms(k, t[f"{b}self_attn.k_norm.weight"], eps)
    q, k = rotate(q, pos, config.rope_theta), rotate(k, pos, config.rope_theta)
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + np.triu(np.full((n, n), -np.inf), 1)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    attn = np.einsum("hqk,khd->qhd", w / w.sum(-1, keepdims=True), v).reshape(n, -1)
    r = x + attn @ t[f"{b}self_attn.o_proj.weight"].T
    m = rms(r, t[f"{b}post_attention_layernorm.weight"], eps)
    gate, up = m @ t[f"{b}mlp.gate_proj.weight"].T, m @ t[f"{b}mlp.up_proj.weight"].T
    return r + (gate / (1 + np.exp(-gate)) * up) @ t[f"{b}mlp.down_proj.weight"].T


def engine_layer(fmt, t: dict, hidden, tokens, config: LlamaConfig):
    """The format's MTP layer as its engine defines it, over vLLM's rows: row i at position i reads
    the feature `hidden[i]` and token `tokens[i]` (the token after position i). Returns (what the
    layer returns [n, H], the logits [n, V])."""
    eps, L = config.rms_norm_eps, config.n_layer
    g = (lambda w: w + 1.0) if fmt is mtp.QWEN3_NEXT else (lambda w: w)  # Qwen3NextRMSNorm: 1 + w
    if fmt is mtp.DEEPSEEK:  # DeepSeekMultiTokenPredictorLayer
        p = f"model.layers.{L}."
        e = t[f"{p}embed_tokens.weight"][tokens].copy()
        e[0] = 0.0  # inputs_embeds[positions == 0] = 0
        x = np.concatenate([rms(e, t[f"{p}enorm.weight"], eps), rms(hidden, t[f"{p}hnorm.weight"], eps)], -1)
        out = decoder_layer(t, p, x @ t[f"{p}eh_proj.weight"].T, config)  # residual + hidden_states
        head = t[f"{p}shared_head.head.weight"]
        return out, rms(out, t[f"{p}shared_head.norm.weight"], eps) @ head.T
    embed, head = t["model.embed_tokens.weight"][tokens].copy(), t["lm_head.weight"]
    if fmt is mtp.MIMO:  # MiMoMultiTokenPredictorLayer
        p = "model.mtp_layers.0."
        embed[0] = 0.0
        x = [
            rms(hidden, t[f"{p}hidden_layernorm.weight"], eps),
            rms(embed, t[f"{p}token_layernorm.weight"], eps),
        ]
        out = rms(decoder_layer(t, p, np.concatenate(x, -1) @ t[f"{p}input_proj.weight"].T, config),
                  t[f"{p}final_layernorm.weight"], eps)  # fmt: skip
    elif fmt is mtp.QWEN3_NEXT:  # Qwen3NextMultiTokenPredictor
        x = [rms(embed, g(t["mtp.pre_fc_norm_embedding.weight"]), eps),
             rms(hidden, g(t["mtp.pre_fc_norm_hidden.weight"]), eps)]  # fmt: skip
        out = decoder_layer(t, "mtp.layers.0.", np.concatenate(x, -1) @ t["mtp.fc.weight"].T, config)
        out = rms(out, g(t["mtp.norm.weight"]), eps)
    else:  # speculators' MTPLayerMixin
        p = "mtp_layers.0."
        x = [
            rms(embed, t[f"{p}token_layernorm.weight"], eps),
            rms(hidden, t[f"{p}hidden_layernorm.weight"], eps),
        ]
        out = decoder_layer(t, p, np.concatenate(x, -1) @ t[f"{p}input_proj.weight"].T, config)
        out = rms(out, t[f"{p}final_layernorm.weight"], eps)
    return out, out @ head.T


def engine_chain(fmt, t: dict, target_hidden, ids, config: LlamaConfig, k: int) -> list[int]:
    """vLLM's EagleProposer at T = 0: the prompt's rows read (hidden_i, ids_{i+1}), the last one's
    logits give draft 1; draft j + 1 comes from one more row reading the feature the layer returned
    for the row before (the proposer's carried hidden state) and draft j."""
    hidden, tokens, drafts = list(target_hidden[:-1]), list(ids[1:]), []
    for _ in range(k):
        out, logits = engine_layer(fmt, t, np.asarray(hidden), np.asarray(tokens), config)
        drafts.append(int(np.argmax(logits[-1])))
        hidden.append(out[-1])
        tokens.append(drafts[-1])
    return drafts


def target_features(target: Model, tensors: dict, ids, fmt):
    """The target's last hidden state over ids, as the format's engine hands it: before model.norm
    (MiMo, speculators) or after it (DeepSeek, Qwen3-Next)."""
    from specbench.model.nets import llama

    cache = llama.init_cache(TARGET, 32)
    _, _, h = llama.step(target.params, cache, jnp.asarray(ids), 0, TARGET, hidden=True)
    h = np.asarray(h, np.float64)
    return rms(h, tensors["model.norm.weight"], TARGET.rms_norm_eps) if fmt.target_normed else h


def specbench_chain(target: Model, head: Model, k: int) -> list[int]:
    """specbench's first k greedy drafts after the prompt, the target's first token pending."""
    drafter = drafters.mtp_drafter(target.config, head=head.config)
    params = generate.draft_params_for(drafter, head, target)
    buf = jnp.asarray(PROMPT + [0] * 12, jnp.int32)
    key, warp = jax.random.PRNGKey(0), Warp(0.0)
    state = decoding.spec_start(params, target.params, buf, jnp.int32(len(PROMPT)), key, drafter,
                                TARGET, warp, 64, k)  # fmt: skip
    _, drafts, _, _ = drafters.propose(drafter, params, state.draft, state.tokens, state.n, key, warp, k,
                                       TARGET.n_vocab)  # fmt: skip
    return [int(d) for d in drafts]


def read_back(tmp_path, target: Model, fmt, seed: int = 1):
    """A target folder (speculators: a folder of the head's own) with one MTP layer in fmt's key
    names; its tensors as float64, and the head as specbench reads it."""
    from safetensors.numpy import load_file

    config = target.config
    head = random_head(fmt, seed, config=config)
    folder = tmp_path / fmt.name
    mtp_files.save_with_target(folder, target.params, config, head.params, head.config)
    tensors = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    if fmt is mtp.SPECULATORS:  # embed_tokens and lm_head are the verifier's
        from specbench.model.checkpoints import llama_layout

        shared = llama_layout.params_to_hf(target.params, config)
        tensors |= {k: shared[k].astype(np.float64) for k in ("model.embed_tokens.weight", "lm_head.weight")}
    head_config, params = mtp_files.load(folder, config)
    return folder, tensors, Model(fmt.name, head_config, params, str(folder))


@pytest.mark.parametrize("fmt", mtp.FORMATS, ids=lambda f: f.name)
def test_the_chain_of_each_format_is_its_engines(tmp_path, target, fmt):
    _, tensors, head = read_back(tmp_path, target, fmt)
    assert head.config.mtp is fmt and mtp_files.format_in(tensors, TARGET) is fmt
    first = int(autoregressive(target, PROMPT, 1)[0][-1])
    ids = PROMPT + [first]
    reference = engine_chain(fmt, tensors, target_features(target, tensors, ids, fmt), ids, TARGET, K)
    assert specbench_chain(target, head, K) == reference
    assert len(set(reference)) > 1  # the chain varies: position 2 on tests what is carried


def swapped(fmt):
    """The control: the same tensors read with the wrong norm placement (DeepSeek's head norm read
    as MiMo's inner norm and the target's feature taken on the other side of its final norm) or the
    wrong concatenation order."""
    if fmt is mtp.DEEPSEEK:
        return dataclasses.replace(fmt, out_norm=fmt.head_norm, head_norm=None, target_normed=False)
    return dataclasses.replace(fmt, embed_first=not fmt.embed_first)


@pytest.mark.parametrize("fmt", [mtp.DEEPSEEK, mtp.MIMO], ids=lambda f: f.name)
def test_a_head_read_with_the_wrong_norms_or_order_loses_the_chain(tmp_path, target, fmt):
    """Position 0 reads only the first row; from position 1 on the control's drafts part from the
    engine's, as GLM-5's did through DeepSeek's path (vLLM PR #46075)."""
    _, tensors, head = read_back(tmp_path, target, fmt)
    first = int(autoregressive(target, PROMPT, 1)[0][-1])
    ids = PROMPT + [first]
    reference = engine_chain(fmt, tensors, target_features(target, tensors, ids, fmt), ids, TARGET, K)
    wrong = dataclasses.replace(head.config, mtp=swapped(fmt))
    params = dict(head.params)
    if fmt is mtp.DEEPSEEK:  # shared_head.norm's tensor, read inside the layer
        params["out_norm"] = params.pop("ln_f")
    ours = specbench_chain(target, Model("control", wrong, params, "random"), K)
    assert ours[1:] != reference[1:]


# ---------------------------------------------------------------------------------------------
# T = 0: SD = AR


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt", [mtp.DEEPSEEK, mtp.MIMO], ids=lambda f: f.name)
def test_greedy_mtp_equals_autoregressive(target, fmt, shape):
    head = random_head(fmt, 2)
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


# ---------------------------------------------------------------------------------------------
# T = 1: every role follows the target; a head whose p is read a feature row off does not


@pytest.mark.slow
@pytest.mark.parametrize("case", ["chain", "chain-wrong-row", "tree-2x1x1", "tree-2x1x1-wrong-row"])
def test_every_role_of_an_mtp_round_follows_the_target(case, record_property):
    from test_eagle import ROLE_CASES, wrong_row_propose, wrong_row_tree_propose

    from exactness import round_samples

    target = target_model(3, SMALL)
    head = random_head(mtp.DEEPSEEK, 5, scale=2.0, config=SMALL)
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
    assert 0.05 < accepted.mean() / 3 < 0.95  # drafts both accepted and rejected
    if exact:
        assert min(p_values.values()) > P_THRESHOLD, p_values
    else:
        assert min(p_values.values()) < P_THRESHOLD, p_values


# ---------------------------------------------------------------------------------------------
# On disk and on the command line


def test_the_targets_loader_leaves_the_mtp_layer_to_the_head(tmp_path, target):
    folder, _, _ = read_back(tmp_path, target, mtp.DEEPSEEK)
    config, params = weights.read_dir(folder)
    assert config == TARGET
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(target.params)):
        np.testing.assert_array_equal(a, b)


def test_run_drafts_with_the_targets_own_mtp_layer_and_refuses_a_folder_without_one(tmp_path, target):
    """A MiMo target (Qwen2's shape, model_type mimo) with its MTP layer: run gives AR's tokens."""
    mimo = dataclasses.replace(  # the tokenizer's byte-level ids need 320 tokens
        TARGET, family="mimo", qk_norm=False, qkv_bias=True, explicit_head_dim=None, n_vocab=320
    )
    folder, _, _ = read_back(tmp_path, target_model(4, mimo), mtp.MIMO)
    assert json.loads((folder / hf_layout.CONFIG_FILE).read_text())["model_type"] == "mimo"
    (folder / "tokenizer.json").write_text(tiny_tokenizer_json(mimo.n_vocab))
    out = tmp_path / "row.json"
    args = ("--target", folder, "--drafter", "mtp", "--K", "3")
    result = invoke("run", *args, "-n", "16", "--repeats", "1", "--no-save", "--export-json", out)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["identical"] is True and row["drafter"] == "mtp"
    assert (row["mtp_format"], row["mtp_layers"], row["eagle_format"]) == ("mimo", 1, "mtp")
    head, _, _ = read_back(tmp_path, target_model(4, mimo), mtp.SPECULATORS)  # a folder of its own
    result = invoke("run", *args, "--mtp-head", head, "-n", "16", "--repeats", "1", "--no-save",
                    "--export-json", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["identical"] is True and row["mtp_format"] == "speculators"
    result = invoke("run", "--target", folder, "--mtp-head", head, "-n", "4", "--dry-run")
    assert_one_line_error(result, "--mtp-head")
    from specbench.model.checkpoints import llama_layout

    plain = tmp_path / "plain"
    llama_layout.save(plain, target_model(4, mimo).params, mimo)
    (plain / "tokenizer.json").write_text(tiny_tokenizer_json(mimo.n_vocab))
    result = invoke("run", "--target", plain, "--drafter", "mtp", "-n", "4", "--dry-run")
    assert_one_line_error(result, "--drafter", "has no MTP layers")
