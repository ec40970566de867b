"""EAGLE-3 heads read from their published layouts (nets/eagle3.py, checkpoints/eagle3_files.py):
the target's taps against transformers, the head's forward against a NumPy reference written from
vLLM's definition, SD = AR at T = 0 for chains, trees and dynamic trees, a chi-square per role at
T = 1 with a control that fails, and the command line over folders these tests write as a
stranger would."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model import generate
from specbench.model.checkpoints import eagle3_files, eagle_files, weights
from specbench.model.decode import decoding, drafters
from specbench.model.decode.sampling import Warp
from specbench.model.decode.tree import Dynamic, Tree
from specbench.model.generate import autoregressive, speculative
from specbench.model.nets import eagle, eagle3, gpt2, llama
from specbench.model.nets.eagle3 import Eagle3Config
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.network import Model

from conftest import assert_one_line_error, invoke, make_small_target, random_model
from exactness import P_THRESHOLD, SMALL_T, role_p_values, with_kernel

QWEN3 = LlamaConfig(
    n_layer=8, n_head=4, n_kv_head=2, n_embd=32, n_inner=48, n_vocab=97, n_ctx=128,
    family="qwen3", qk_norm=True, explicit_head_dim=16, tied=False,
)  # fmt: skip


def head_config(target, draft_vocab: int = 0, **kw) -> Eagle3Config:
    """An EAGLE-3 head's config for a target: a Llama block as wide as `width`, joined (its taps)."""
    width = kw.pop("width", target.width)
    block = dict(n_layer=1, n_head=4, n_kv_head=2, n_embd=width, n_inner=2 * width, n_vocab=target.n_vocab)
    config = Eagle3Config(**block, n_ctx=128, draft_vocab=draft_vocab, **kw)
    return eagle3.for_target(config, target)


def random_head(config: Eagle3Config, seed: int, scale: float = 4.0, embedding: bool = True) -> Model:
    """Random weights in the published layout, the matrices scaled up and the gains perturbed."""
    rng = np.random.default_rng(seed + 50)
    params = eagle3.init_params(config, seed, embedding=embedding)

    def perturb(path, x):
        if getattr(path[-1], "key", "") == "d2t":
            return x
        return x * scale if x.ndim >= 2 else x + jnp.asarray(0.1 * rng.normal(size=x.shape), x.dtype)

    return Model("eagle3-head", config, jax.tree_util.tree_map_with_path(perturb, params), "random")


def qwen3_target(seed: int = 0) -> Model:
    from test_llama import llama_model

    return llama_model(QWEN3, seed, "qwen3-target", scale=8.0)


@pytest.fixture(scope="module")
def target():
    return qwen3_target()


@pytest.fixture(scope="module")
def head(target):
    return random_head(head_config(target.config, draft_vocab=60), 1)


# ---------------------------------------------------------------------------------------------
# The target's taps, and the head against vLLM's definition


def test_the_targets_taps_are_its_layers_inputs_as_transformers_gives_them(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.Qwen3Config(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=7, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=128, rms_norm_eps=1e-5,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(hf_config).eval()
    model.save_pretrained(str(tmp_path / "q3"))
    config, params = weights.read_dir(tmp_path / "q3")
    taps = eagle3.default_taps(config.n_layer)
    assert taps == (2, 3, 4)
    tokens = np.random.default_rng(1).integers(0, 101, 12)
    with torch.no_grad():
        hidden = model(torch.tensor(tokens)[None], output_hidden_states=True).hidden_states
    expected = np.concatenate(
        [hidden[i][0].numpy() for i in taps], axis=-1
    )  # hidden_states[i]: layer i's input
    cache = llama.init_cache(config, 32)
    _, cache, first = llama.step(params, cache, jnp.asarray(tokens[:7]), 0, config, hidden=taps)
    _, _, rest = llama.step(params, cache, jnp.asarray(tokens[7:]), jnp.int32(7), config, hidden=taps)
    np.testing.assert_allclose(np.concatenate([first, rest]), expected, atol=1e-4)
    _, _, last = gpt2.step(*make_gpt2_case(), hidden=(0, 1))  # GPT-2's blocks tap the same way
    assert last.shape == (3, 2 * SMALL_T.n_embd)


def make_gpt2_case():
    target = make_small_target()
    return target.params, gpt2.init_cache(SMALL_T, 8), jnp.asarray([1, 2, 3]), 0, SMALL_T


def rms(x, gain, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def rotate(x, positions, theta: float):
    """HF's rotate_half rotary embedding of x [n, heads, hd] at positions [n]."""
    hd = x.shape[-1]
    angles = positions[:, None] * (1.0 / theta ** (np.arange(0, hd, 2) / hd))[None]
    cos, sin = (
        np.cos(np.concatenate([angles] * 2, -1))[:, None],
        np.sin(np.concatenate([angles] * 2, -1))[:, None],
    )
    return x * cos + np.concatenate([-x[..., hd // 2 :], x[..., : hd // 2]], -1) * sin


def vllm_eagle3(t: dict, config: Eagle3Config, taps, tokens, b: str = "midlayer"):
    """vLLM's Eagle3LlamaForCausalLM over one sequence, from the published tensors: row j reads
    the target's taps of position j and the token after it, at position j (llama_eagle3.py: fc,
    then midlayer's input_layernorm(embeds) | hidden_norm(hidden) into q/k/v, the residual the
    fc output, or the normed one with norm_before_residual, post_attention_layernorm and the MLP,
    norm, lm_head; the block's weights under `b`: midlayer, or speculators' layers.0). Returns the
    logits over the draft vocabulary [n, V']."""
    eps, hd = config.rms_norm_eps, config.head_dim
    g = taps @ t["fc.weight"].T
    e = rms(t["embed_tokens.weight"][tokens], t[f"{b}.input_layernorm.weight"], eps)
    h = rms(g, t[f"{b}.hidden_norm.weight"], eps)
    x = np.concatenate([e, h], -1)
    n, pos = len(tokens), np.arange(len(tokens), dtype=np.float64)
    q = rotate((x @ t[f"{b}.self_attn.q_proj.weight"].T).reshape(n, -1, hd), pos, config.rope_theta)
    k = rotate((x @ t[f"{b}.self_attn.k_proj.weight"].T).reshape(n, -1, hd), pos, config.rope_theta)
    v = (x @ t[f"{b}.self_attn.v_proj.weight"].T).reshape(n, -1, hd)
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + np.triu(np.full((n, n), -np.inf), 1)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    attn = np.einsum("hqk,khd->qhd", w / w.sum(-1, keepdims=True), v).reshape(n, -1)
    r = (h if config.norm_before_residual else g) + attn @ t[f"{b}.self_attn.o_proj.weight"].T
    m = rms(r, t[f"{b}.post_attention_layernorm.weight"], eps)
    gate, up = m @ t[f"{b}.mlp.gate_proj.weight"].T, m @ t[f"{b}.mlp.up_proj.weight"].T
    r = r + (gate / (1 + np.exp(-gate)) * up) @ t[f"{b}.mlp.down_proj.weight"].T
    for i in range(1, config.n_layer):  # vLLM's layers past the first: Llama's own, over r
        from test_mtp import decoder_layer

        r = decoder_layer(t, f"layers.{i}.", r, config)
    return rms(r, t["norm.weight"], eps) @ t["lm_head.weight"].T


@pytest.mark.parametrize("layout", ["eagle3", "speculators"])
def test_the_heads_first_draft_is_vllms_and_its_logits_equal_a_numpy_reference(
    tmp_path, target, head, layout
):
    """EAGLE's layout, the head as wide as the target; speculators', a head half as wide (fc maps
    the taps down) whose residual is the normed feature (norm_before_residual)."""
    from safetensors.numpy import load_file

    if layout == "speculators":
        narrow = head_config(target.config, draft_vocab=60, width=16, norm_before_residual=True)
        head = random_head(narrow, 7)
    eagle3_files.save(tmp_path / "h", head.params, head.config, layout)
    tensors = {
        k: v.astype(np.float64) for k, v in load_file(str(tmp_path / "h" / "model.safetensors")).items()
    }
    config, params, _ = eagle_files.load(tmp_path / "h")
    config = eagle.drafting_config(config, target.config)
    prompt = [5, 17, 2, 88, 40, 3, 5, 17, 60, 1]
    first = int(autoregressive(target, prompt, 1)[0][-1])  # the target's token after the prompt
    tokens = np.asarray(prompt + [first])
    _, _, taps = llama.step(
        target.params, llama.init_cache(QWEN3, 16), jnp.asarray(tokens), 0, QWEN3, hidden=config.taps
    )
    assert config.norm_before_residual == (layout == "speculators")
    block = eagle3_files.BLOCK[layout]
    reference = vllm_eagle3(tensors, config, np.asarray(taps, np.float64)[:-1], tokens[1:], block)
    attached = eagle.attach(params, target.params, config)
    ours, _ = eagle.forward(attached, taps, jnp.asarray(tokens), config)  # row j + 1 is vLLM's row j
    np.testing.assert_allclose(np.asarray(ours)[1:], reference, atol=1e-4, rtol=1e-4)
    drafter = drafters.eagle_drafter(QWEN3, head=config)
    draft_params = generate.draft_params_for(drafter, Model("h", config, params, "random"), target)
    buf = jnp.asarray(prompt + [0] * 6, jnp.int32)
    state = decoding.spec_start(
        draft_params,
        target.params,
        buf,
        jnp.int32(len(prompt)),
        jax.random.PRNGKey(0),
        drafter,
        QWEN3,
        Warp(0.0),
        64,
        3,
    )
    assert int(state.tokens[len(prompt)]) == first
    _, drafts, _, _ = drafters.propose(
        drafter,
        draft_params,
        state.draft,
        state.tokens,
        state.n,
        jax.random.PRNGKey(1),
        Warp(0.0),
        3,
        QWEN3.n_vocab,
    )
    draft_id = int(np.argmax(reference[-1]))
    assert int(drafts[0]) == draft_id + int(tensors["d2t"][draft_id])  # target id = draft id + d2t


# ---------------------------------------------------------------------------------------------
# T = 0: SD = AR for every shape, on a Qwen3 and a GPT-2 target

SHAPES = {
    "chain": {},
    "block": dict(verify="block"),
    "2 drafts": dict(drafts=2),
    "dynamic K": dict(confidence=0.3),
    "tree 2x2x1": dict(tree=Tree.branching((2, 2, 1))),
    "dynamic tree": dict(tree=Dynamic(3, 2, 5)),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_greedy_eagle3_equals_autoregressive(target, head, shape):
    drafter = dataclasses.replace(drafters.eagle_drafter(QWEN3, head=head.config), **SHAPES[shape])
    K = drafter.tree.depth if drafter.tree is not None else 3
    prompt = [5, 17, 2, 88, 40, 3, 5, 17]
    ar, _ = autoregressive(target, prompt, 20)
    sd, _ = speculative(head, target, prompt, 20, K, drafter=drafter)
    np.testing.assert_array_equal(sd, ar, err_msg=shape)
    if shape == "chain":  # a batch, and the CPU kernel's layout
        batch, _ = speculative(head, target, [prompt, prompt[:5]], 20, K, drafter=drafter)
        np.testing.assert_array_equal(batch[0], ar)
        (k_target,) = with_kernel(target)
        np.testing.assert_array_equal(speculative(head, k_target, prompt, 20, K, drafter=drafter)[0], ar)


@pytest.mark.slow
def test_an_eagle3_head_drafts_for_a_gpt2_target_with_the_targets_embedding():
    target = random_model(
        gpt2.GPT2Config(n_layer=6, n_head=4, n_embd=32, n_ctx=128, n_vocab=97), 3, "g", scale=5
    )
    config = head_config(target.config, draft_vocab=50)
    assert config.taps == (2, 3, 3)
    head = random_head(config, 4, embedding=False)  # reads the target's wte
    drafter = drafters.eagle_drafter(target.config, head=config)
    prompt = [5, 17, 2, 88, 40, 3]
    for shape in ("chain", "tree 2x2x1", "dynamic tree"):
        d = dataclasses.replace(drafter, **SHAPES[shape])
        K = d.tree.depth if d.tree is not None else 4
        ar, _ = autoregressive(target, prompt, 16)
        np.testing.assert_array_equal(
            speculative(head, target, prompt, 16, K, drafter=d)[0], ar, err_msg=shape
        )


# ---------------------------------------------------------------------------------------------
# T = 1: every role follows the target; a head whose p is read a feature row off does not


@pytest.fixture(scope="module")
def role_draws(shared):
    from test_eagle import draws_by_case

    def make():
        small = make_small_target()
        config = head_config(small.config, draft_vocab=9, width=16)
        return small, draws_by_case(small, random_head(config, 5, scale=3.0), config)

    return shared("eagle3-roles", make)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", ["chain", "chain-wrong-row", "tree-2x1x1", "tree-2x1x1-wrong-row", "dynamic-3x2x5"]
)
def test_every_role_of_an_eagle3_round_follows_the_target(role_draws, case, record_property):
    from test_eagle import ROLE_CASES

    target, draws = role_draws
    tokens, accepted, drafted = draws[case]
    p_values = role_p_values(target, [3, 7, 1], Warp(1.0), tokens, accepted, drafted, 3)
    record_property("p_values", p_values)
    assert {"draft 1", "draft 2", "after rejection"} <= set(p_values)
    assert 0.05 < accepted.mean() / 3 < 0.95  # drafts both accepted and rejected
    if ROLE_CASES[case][2]:
        assert min(p_values.values()) > P_THRESHOLD, p_values
    else:
        assert min(p_values.values()) < P_THRESHOLD, p_values


# ---------------------------------------------------------------------------------------------
# On disk and on the command line


@pytest.mark.parametrize("layout", ["eagle3", "speculators"])
def test_a_published_head_reads_back_the_same_and_damage_is_named(tmp_path, head, layout):
    eagle3_files.save(tmp_path / layout, head.params, head.config, layout)
    assert eagle_files.is_head_dir(tmp_path / layout)
    meta = json.loads((tmp_path / layout / "config.json").read_text())
    assert eagle3_files.layout_of(meta) == layout
    config, params, _ = eagle_files.load(tmp_path / layout)
    assert config.taps == (head.config.taps if layout == "speculators" else ())  # EAGLE's own names none
    assert config.norm_before_residual is False and config.draft_vocab == 60
    for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(head.params), jax.tree_util.tree_leaves(params)
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, err_msg=str(path))
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(tmp_path / layout / "model.safetensors"))
    del tensors["fc.weight"]
    save_file(tensors, str(tmp_path / layout / "model.safetensors"))
    with pytest.raises(Exception, match="fc.weight is missing"):
        eagle_files.load(tmp_path / layout)


def test_run_drafts_with_a_published_head_and_refuses_one_that_does_not_fit(tmp_path):
    """A Qwen3 target saved by transformers and an EAGLE-3 head in speculators' layout, neither seen
    before: specbench run gives AR's tokens, and the row records the head's format and taps."""
    from test_llama import HF_CASES, hf_model

    from conftest import tiny_tokenizer_json

    model = hf_model(*HF_CASES["qwen3-gqa-head-dim-tied"], seed=0, scale=6.0, vocab=320)
    model.save_pretrained(str(tmp_path / "target"))
    (tmp_path / "target" / "tokenizer.json").write_text(tiny_tokenizer_json(320))
    config, _ = weights.read_dir(tmp_path / "target")
    head_cfg = dataclasses.replace(head_config(config, draft_vocab=200), taps=(1, 0))  # read in layer order
    eagle3_files.save(tmp_path / "head", random_head(head_cfg, 2).params, head_cfg, "speculators")
    out = tmp_path / "row.json"
    args = ("--target", tmp_path / "target", "--drafter", "eagle", "--eagle-head", tmp_path / "head")
    result = invoke("run", *args, "-n", "16", "--repeats", "1", "--no-save", "--export-json", out)
    assert result.exit_code == 0, result.output
    assert "EAGLE-3" in result.output
    (row,) = json.loads(out.read_text())
    assert row["identical"] is True and row["eagle_format"] == "eagle3" and row["eagle_taps"] == "0,1"
    wide = dataclasses.replace(head_cfg, taps=(0, 1, 5))  # the target has 2 layers
    eagle3_files.save(tmp_path / "wide", random_head(wide, 2).params, wide, "speculators")
    result = invoke("run", *args[:4], "--eagle-head", tmp_path / "wide", "-n", "4", "--dry-run")
    assert_one_line_error(result, "--eagle-head", "taps layers [0, 1, 5]; the target has 2")


def test_a_head_published_as_a_torch_file_reads_as_its_safetensors_do(tmp_path, head):
    """yuhuili's EAGLE-3 heads ship pytorch_model.bin (bfloat16 there; float32 here)."""
    torch = pytest.importorskip("torch")
    from safetensors.numpy import load_file

    eagle3_files.save(tmp_path / "h", head.params, head.config)
    tensors = load_file(str(tmp_path / "h" / "model.safetensors"))
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, tmp_path / "h" / "pytorch_model.bin")
    (tmp_path / "h" / "model.safetensors").unlink()
    _, params, _ = eagle_files.load(tmp_path / "h")
    for a, b in zip(jax.tree_util.tree_leaves(head.params), jax.tree_util.tree_leaves(params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_the_training_time_test_s_passes_are_the_drafts_chain_and_training_lowers_the_loss():
    """Pass d of train/eagle3.py at row j equals the head's d-th cached draft step there (teacher
    forced); 30 steps of training lower the loss and raise the agreement with the target."""
    pytest.importorskip("optax")
    from specbench.model.nets import network
    from specbench.train import eagle3 as ttt
    from specbench.train.loop import TrainConfig, train

    config = gpt2.GPT2Config(n_layer=6, n_head=4, n_embd=32, n_ctx=64, n_vocab=97)
    target = random_model(config, 1, "g", scale=5)
    head = ttt.head_config(config, 40)
    params = jax.tree_util.tree_map(lambda a: a * 4 if a.ndim >= 2 else a, eagle3.init_params(head, 3))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 97, 12), jnp.int32)
    taps, _ = ttt.target_view(target, tokens[None], jnp.arange(40), head.taps)
    trained = {k: v for k, v in params.items() if k != "d2t"} | {"wte": target.params["wte"]}
    logits = ttt.passes(trained, taps[0], tokens, head, 3)
    joined, n = eagle.attach(params, target.params, head), 7
    cache = network.init_cache(head, 32, jnp.float32)
    _, h, cache = eagle.step(joined, cache, eagle.shifted(taps[0])[:n], tokens[:n], 0, head)
    for d in (1, 2):  # the d-th draft after the window reads the step before's x
        step, h, cache = eagle.step(joined, cache, h[-1:], tokens[n + d - 1 : n + d], n + d - 1, head)
        np.testing.assert_allclose(step[0], logits[d][n + d - 1], atol=1e-5)
    data = np.random.default_rng(0).integers(0, 97, 4000).astype(np.uint16)
    tc = TrainConfig(steps=30, batch=2, ctx=32, lr=3e-3, warmup=2, eval_batches=2)
    task = ttt.eagle3_task(target, tc, ttt.TTT(2), np.arange(40), data, data)
    before = ttt.validate(task.init(), target, np.arange(40), data, tc, ttt.TTT(2))
    params, _ = train(head, data, data, tc, log=lambda *a: None, task=task, progress_interval=1e9)
    after = ttt.validate(params, target, np.arange(40), data, tc, ttt.TTT(2))
    # a random target's q is nearly flat over 40 tokens: its entropy bounds the cross-entropy from
    # below, so the loss falls little while the agreement on its top token rises from chance
    assert after["loss"] < before["loss"] and after["agreement"] > before["agreement"] + 0.05, (before, after)


@pytest.mark.parametrize("layout", ["eagle3", "speculators"])
def test_a_head_of_several_layers_is_vllms_and_exact(tmp_path, target, layout):
    """A head of three layers (vLLM's llama_eagle3.py since PR #26164: the first reads 2H, the
    others are Llama's blocks): its logits equal the NumPy reference over the published tensors,
    its cache holds the three layers, and SD = AR for a chain, a tree and the CPU kernel."""
    from safetensors.numpy import load_file

    config = dataclasses.replace(head_config(target.config, draft_vocab=60), n_layer=3)
    eagle3_files.save(tmp_path / "h", random_head(config, 9, scale=3.0).params, config, layout)
    tensors = {
        k: v.astype(np.float64) for k, v in load_file(str(tmp_path / "h" / "model.safetensors")).items()
    }
    assert "layers.2.self_attn.q_proj.weight" in tensors
    read, params, _ = eagle_files.load(tmp_path / "h")
    read = eagle.drafting_config(read, target.config)
    assert read.n_layer == 3 and params["later"]["attn"]["c_attn"]["weight"].shape[0] == 2
    tokens = np.asarray([5, 17, 2, 88, 40, 3, 5, 17, 60, 1])
    _, _, taps = llama.step(
        target.params, llama.init_cache(QWEN3, 16), jnp.asarray(tokens), 0, QWEN3, hidden=read.taps
    )
    reference = vllm_eagle3(
        tensors, read, np.asarray(taps, np.float64)[:-1], tokens[1:], eagle3_files.BLOCK[layout]
    )
    ours, _ = eagle.forward(eagle.attach(params, target.params, read), taps, jnp.asarray(tokens), read)
    np.testing.assert_allclose(np.asarray(ours)[1:], reference, atol=1e-4, rtol=1e-4)
    head = Model("h", read, params, str(tmp_path / "h"))
    prompt = [5, 17, 2, 88, 40, 3, 5, 17]
    ar, _ = autoregressive(target, prompt, 16)
    for shape in ("chain", "tree 2x2x1"):
        drafter = dataclasses.replace(drafters.eagle_drafter(QWEN3, head=read), **SHAPES[shape])
        K = drafter.tree.depth if drafter.tree is not None else 3
        np.testing.assert_array_equal(speculative(head, target, prompt, 16, K, drafter=drafter)[0], ar, shape)
    (k_target,) = with_kernel(target)
    drafter = drafters.eagle_drafter(QWEN3, head=read)
    np.testing.assert_array_equal(speculative(head, k_target, prompt, 16, 3, drafter=drafter)[0], ar)
