"""The Llama family (nets/llama.py, checkpoints/llama_layout.py): logits equal transformers'
LlamaForCausalLM and Qwen2ForCausalLM on checkpoints transformers saved, cached = uncached,
greedy decoding equals transformers' generate, and speculative decoding stays exact through
every drafter and verdict (T = 0 identity with drafts accepted and rejected; χ² at T = 1 with
a broken control that fails)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.errors import WeightsError
from specbench.model.checkpoints import llama_layout, weights
from specbench.model.nets import llama, network, rotary
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.network import Model
from specbench.model.nets.rotary import RopeScaling

from conftest import tiny_tokenizer_json

# (name, transformers class, its config's fields): GQA, MQA, Qwen2's biases, tied and untied
# heads, Llama 3's and linear rope scaling
HF_CASES = {
    "llama-gqa-untied": (
        "LlamaForCausalLM",
        dict(num_key_value_heads=2, tie_word_embeddings=False, rope_theta=500.0),
    ),
    "llama3-scaled-mqa-tied": (
        "LlamaForCausalLM",
        dict(
            num_key_value_heads=1,
            tie_word_embeddings=True,
            rope_theta=10000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
    ),
    "llama-linear-scaled": (
        "LlamaForCausalLM",
        dict(num_key_value_heads=4, rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    ),
    "qwen2-biases-tied": ("Qwen2ForCausalLM", dict(num_key_value_heads=2, tie_word_embeddings=True)),
    # Qwen3: q_norm and k_norm over each head, a head_dim that is not hidden / heads (64 / 4 = 16)
    "qwen3-gqa-head-dim-tied": (
        "Qwen3ForCausalLM",
        dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, rope_theta=1e6),
    ),
    "qwen3-head-dim-untied": (
        "Qwen3ForCausalLM",
        dict(num_key_value_heads=4, head_dim=24, tie_word_embeddings=False),
    ),
    # Mistral without its sliding window: the record's recipe for a Llama-shaped model_type (docs/models.md)
    "mistral-gqa-untied": ("MistralForCausalLM", dict(num_key_value_heads=2, sliding_window=None)),
}


def hf_model(kind: str, fields: dict, seed: int = 0, scale: float = 4.0, vocab: int = 101):
    """A small random transformers model of this class, its norms and biases perturbed so that a
    mix-up of any tensor shows."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config_class = {
        "LlamaForCausalLM": transformers.LlamaConfig,
        "Qwen2ForCausalLM": transformers.Qwen2Config,
        "Qwen3ForCausalLM": transformers.Qwen3Config,
        "MistralForCausalLM": transformers.MistralConfig,
    }
    config = config_class[kind](
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        **fields,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, kind)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norms' gains (1) and biases (0) as initialised
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.mul_(scale)  # sharper predictions: greedy text that does not repeat one token
    return model


def saved(tmp_path, name: str, seed: int = 0, scale: float = 4.0, **save):
    model = hf_model(*HF_CASES[name], seed=seed, scale=scale)
    model.save_pretrained(str(tmp_path / name), **save)
    return model, tmp_path / name


@pytest.mark.parametrize("name", list(HF_CASES))
def test_logits_equal_transformers_and_cached_equals_uncached(tmp_path, name):
    import torch

    hf, path = saved(tmp_path, name)
    config, params = weights.read_dir(path)
    assert (
        isinstance(config, LlamaConfig) and config.family == HF_CASES[name][0][: -len("ForCausalLM")].lower()
    )
    tokens = np.random.default_rng(1).integers(0, config.n_vocab, 24)
    with torch.no_grad():
        reference = hf(torch.tensor(tokens)[None]).logits[0].numpy()
    ours = np.asarray(llama.llama(params, jnp.asarray(tokens), config))
    np.testing.assert_allclose(ours, reference, atol=1e-4)
    # cached: a prefill of 9, then steps of 1, 3 and the rest, each reading the cache before it
    cache, out, pos = llama.init_cache(config, 32), [], 0
    for n in (9, 1, 3, len(tokens) - 13):
        logits, cache = llama.step(params, cache, jnp.asarray(tokens[pos : pos + n]), jnp.int32(pos), config)
        out.append(np.asarray(logits))
        pos += n
    np.testing.assert_allclose(np.concatenate(out), ours, atol=1e-5)


@pytest.mark.parametrize("name", ["qwen2-biases-tied", "qwen3-gqa-head-dim-tied"])
def test_greedy_decoding_equals_transformers_generate_and_the_cpu_kernel_agrees(tmp_path, name):
    import torch

    from specbench.model.generate import autoregressive

    hf, path = saved(tmp_path, name, seed=4, scale=8.0)
    model = weights.load_model(str(path), decoding=False)
    prompt = [5, 17, 2, 88, 40, 3]
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, pad_token_id=0)
    theirs = theirs[0, len(prompt) :].tolist()
    assert len(set(theirs)) > 3  # text, not one token repeated
    for kernels in ("xla", "auto"):  # auto: the CPU kernel's products where it is built
        ours, _ = autoregressive(weights.for_decoding_model(model, kernels), prompt, 16)
        assert list(ours) == theirs, kernels


def test_a_sharded_checkpoint_loads_and_every_missing_or_misshapen_tensor_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    _, path = saved(tmp_path, "llama-gqa-untied", max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").is_file()
    config, params = weights.read_dir(path)
    assert config.n_kv_head == 2 and not config.tied
    _, whole = saved(tmp_path / "whole", "llama-gqa-untied")
    tensors = load_file(str(whole / "model.safetensors"))
    for key, bad in (("model.layers.1.self_attn.k_proj.weight", None), ("model.norm.weight", np.zeros(3))):
        broken = {k: v for k, v in tensors.items() if k != key} | ({} if bad is None else {key: bad})
        save_file(broken, str(whole / "model.safetensors"))
        with pytest.raises(WeightsError, match=key.replace(".", r"\.")):
            weights.read_dir(whole)


def test_what_specbench_does_not_compute_is_refused_by_name():
    base = json.loads(json.dumps(llama_layout.config_to_hf(weights.REGISTRY["smollm2-135m"].config)))
    assert llama_layout.config_from_hf(base) == weights.REGISTRY["smollm2-135m"].config  # round trip
    for field, value, words in (
        ("rope_scaling", {"rope_type": "yarn", "factor": 4.0}, "yarn"),
        ("use_sliding_window", True, "use_sliding_window"),
        ("hidden_act", "gelu", "hidden_act"),
        ("attention_bias", True, "attention_bias"),
        ("model_type", "gemma", "gemma"),
    ):
        with pytest.raises(WeightsError, match=words):
            llama_layout.config_from_hf(base | {field: value})
    mistral = base | {"model_type": "mistral", "sliding_window": 4096}  # Mistral v0.1's window
    with pytest.raises(WeightsError, match="sliding_window"):
        llama_layout.config_from_hf(mistral)
    assert llama_layout.config_from_hf(mistral | {"sliding_window": None}).family == "mistral"
    own = llama_layout.config_from_hf(base | {"head_dim": 32})  # 576 / 9 heads is 64: honoured
    assert own.head_dim == 32 and own.attn_width == 9 * 32
    del base["hidden_size"]
    with pytest.raises(WeightsError, match="hidden_size"):
        llama_layout.config_from_hf(base)


def test_transformers_5_rope_parameters_are_read_as_4_s_rope_theta_and_scaling():
    fields = llama_layout.config_to_hf(weights.REGISTRY["llama-3.2-1b"].config)
    scaling = fields.pop("rope_scaling")
    v5 = fields | {"rope_parameters": scaling | {"rope_theta": fields.pop("rope_theta")}}
    assert llama_layout.config_from_hf(v5) == weights.REGISTRY["llama-3.2-1b"].config


def test_the_registry_holds_the_family_at_its_published_sizes():
    published = {  # parameters as the checkpoints' Hugging Face pages count them
        "smollm2-135m": 134_515_008,
        "smollm2-360m": 361_821_120,
        "smollm2-1.7b": 1_711_376_384,
        "qwen2.5-0.5b": 494_032_768,
        "qwen2.5-1.5b": 1_543_714_304,
        "qwen2.5-3b": 3_085_938_688,
        "qwen2.5-7b": 7_615_616_512,
        "tinyllama-1.1b": 1_100_048_384,
        "llama-3.2-1b": 1_235_814_400,
        "llama-3.2-3b": 3_212_749_824,
        # the Qwen3 cards' "0.6B (0.44B non-embedding)" and so on count the tied head once; their
        # safetensors hold a copy of it (751,632,384 for 0.6B, 2,031,739,904 for 1.7B)
        "qwen3-0.6b": 596_049_920,
        "qwen3-1.7b": 1_720_574_976,
        "qwen3-4b": 4_022_468_096,
        "qwen3-8b": 8_190_735_360,
        "llama-3.1-8b": 8_030_261_248,
        "mistral-7b-v0.3": 7_248_023_552,
    }
    for name, count in published.items():
        assert weights.REGISTRY[name].config.n_params == count, name
    for name in ("qwen2.5-0.5b", "qwen3-0.6b"):
        small = dataclasses.replace(weights.REGISTRY[name].config, n_layer=1, n_vocab=50)
        counted = sum(x.size for x in jax.tree_util.tree_leaves(llama.init_params(small)))
        assert counted == small.n_params, name  # the formula counts what init_params makes


# ---------------------------------------------------------------------------------------------
# Speculative decoding over the family


SMALL = LlamaConfig(
    n_layer=2,
    n_head=4,
    n_kv_head=2,
    n_embd=32,
    n_inner=48,
    n_vocab=97,
    n_ctx=128,
    qkv_bias=True,
    family="qwen2",
)


def llama_model(config: LlamaConfig, seed: int, name: str, scale: float) -> Model:
    """Random weights, the matrices scaled (sharper predictions), norms and biases perturbed."""
    rng = np.random.default_rng(seed + 100)

    def perturb(path, x):
        matrix = x.ndim >= 2 and getattr(path[-1], "key", "") != "bias"
        return x * scale if matrix else x + jnp.asarray(0.05 * rng.normal(size=x.shape), x.dtype)

    params = jax.tree_util.tree_map_with_path(perturb, llama.init_params(config, seed))
    return Model(name, config, params, "random")


@pytest.fixture(scope="module")
def llama_pair():
    target = llama_model(SMALL, 0, "llama-target", scale=8.0)
    rng = np.random.default_rng(5)  # a draft that agrees often, not always: the target, perturbed
    noisy = lambda a: a + 0.05 * jnp.std(a) * jnp.asarray(rng.normal(size=a.shape), a.dtype)
    return Model("llama-draft", SMALL, jax.tree_util.tree_map(noisy, target.params), "random"), target


def test_every_drafter_and_verdict_gives_ar_s_tokens_at_t0_with_drafts_accepted_and_rejected(llama_pair):
    from specbench.model.decode import drafters
    from specbench.model.decode.tree import Tree
    from specbench.model.generate import autoregressive, speculative

    draft, target = llama_pair
    prompt, n = [5, 17, 2, 88, 40, 3, 5, 17], 20
    ar, _ = autoregressive(target, prompt, n)
    model = drafters.model_drafter(draft.config)
    cases = {
        "model": (draft, model),
        "block": (draft, dataclasses.replace(model, verify="block")),
        "2 drafts": (draft, dataclasses.replace(model, drafts=2)),
        "tree": (draft, dataclasses.replace(model, tree=Tree.branching((2, 2, 1)))),
        "layerskip": (None, drafters.layerskip_drafter(target.config, 1)),
        "dial": (None, drafters.dial_drafter(0.5)),
    }
    for name, (d, drafter) in cases.items():
        K = 3
        sd, stats = speculative(d, target, prompt, n, K, drafter=drafter)
        np.testing.assert_array_equal(sd, ar, err_msg=name)
        assert 0 < stats.alpha < 1, (name, stats.alpha)  # drafts both accepted and rejected
    lookup, _ = speculative(None, target, prompt + prompt, n, 3, drafter=drafters.lookup_drafter(ngram=2))
    np.testing.assert_array_equal(lookup, autoregressive(target, prompt + prompt, n)[0])
    batch_ar, _ = autoregressive(target, [prompt, prompt[:5]], n)  # a batch, each at its own length
    batch_sd, _ = speculative(draft, target, [prompt, prompt[:5]], n, 3)
    np.testing.assert_array_equal(batch_sd, batch_ar)
    np.testing.assert_array_equal(batch_ar[0], ar)


TINY = LlamaConfig(n_layer=1, n_head=2, n_kv_head=1, n_embd=16, n_inner=24, n_vocab=12, n_ctx=16)


@pytest.mark.slow
def test_speculative_sampling_follows_the_llama_target_and_a_broken_verdict_fails(shared):
    from exactness import assert_follows_target

    target = llama_model(dataclasses.replace(TINY, n_layer=2), 11, "small-llama-target", scale=30.0)
    draft = llama_model(TINY, 12, "small-llama-draft", scale=30.0)
    assert_follows_target(draft, target, [3, 7, 1])


def test_rope_scaling_changes_only_the_rates_it_should():
    plain = LlamaConfig(n_layer=1, n_head=1, n_kv_head=1, n_embd=64, n_inner=8, n_vocab=8, rope_theta=5e5)
    scaled = dataclasses.replace(plain, rope_scaling=RopeScaling("llama3", 32.0, 1.0, 4.0, 8192))
    base, llama3 = rotary.inv_frequencies(plain), rotary.inv_frequencies(scaled)
    wavelength = 2 * np.pi / base
    short, long = wavelength < 8192 / 4, wavelength > 8192
    np.testing.assert_array_equal(llama3[short], base[short])  # high frequencies kept
    np.testing.assert_allclose(llama3[long], base[long] / 32.0, rtol=1e-6)  # low ones slowed by factor
    between = ~short & ~long
    assert between.any() and np.all(
        (llama3[between] <= base[between]) & (llama3[between] >= base[between] / 32)
    )


def test_network_interface_reports_the_architecture_and_the_grouped_cache():
    config = weights.REGISTRY["qwen2.5-0.5b"].config
    assert network.architecture(config) == "qwen2" and network.kv_width(config) == 2 * 64
    assert network.cache_elements(config, 10) == 2 * 24 * 10 * 128
    cache = network.init_cache(SMALL, 8, jnp.float32)
    assert cache["k"].shape == (2, 2, 8, 8) and cache["v"].shape == (2, 8, 2, 8)


# ---------------------------------------------------------------------------------------------
# Downloads and the command line


def test_a_gated_sharded_checkpoint_downloads_with_a_token_and_is_refused_without(tmp_path, monkeypatch):
    """llama-3.2-1b as a tiny stand-in: gated, in shards, with its tokenizer.json, served on loopback."""
    import huggingface_hub
    from test_weights import served_download

    from specbench.model.checkpoints import tokenizer
    from specbench.model.checkpoints.hub import download

    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "gpt2_weights"))
    (tmp_path / "gpt2_weights").mkdir()
    hf, path = saved(tmp_path, "llama3-scaled-mqa-tied", max_shard_size="40KB")
    config = weights.read_dir(path)[0]
    repo = "meta-llama/Llama-3.2-1B"
    monkeypatch.setitem(
        weights.REGISTRY, "llama-3.2-1b", weights.ModelSpec("llama-3.2-1b", "", config, repo, gated=True)
    )
    (path / "tokenizer.json").write_text(tiny_tokenizer_json(config.n_vocab))
    files = {
        f"{repo}/{f.name}": f.read_bytes() for f in path.iterdir() if f.suffix in (".json", ".safetensors")
    }
    assert any("index" in name for name in files)  # served in shards
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(WeightsError, match="gated.*HF_TOKEN"):
        download("llama-3.2-1b", endpoint="http://127.0.0.1:9", progress=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test")
    where = served_download(files, "llama-3.2-1b")
    model = weights.load_model("llama-3.2-1b", decoding=False)
    assert model.config == config and model.source == str(where)
    text = tokenizer.for_model(model)
    assert text.name.startswith("sha256:") and text.decode(text.encode("the old house")) == "the old house"


@pytest.fixture
def tiny_names(monkeypatch):
    """Two registry names of the family at a tiny shape (a target and its draft, one tokenizer)."""
    target = dataclasses.replace(SMALL, n_ctx=256)
    for name, config in (("smollm2-1.7b", target), ("smollm2-135m", dataclasses.replace(target, n_layer=1))):
        monkeypatch.setitem(weights.REGISTRY, name, weights.ModelSpec(name, "tiny stand-in", config, "x/y"))


def test_run_with_random_init_decodes_a_family_pair_offline_and_records_its_architecture(
    tiny_names, tmp_path
):
    from conftest import invoke

    out = tmp_path / "row.json"
    args = (
        "--target",
        "smollm2-1.7b",
        "--draft",
        "smollm2-135m",
        "--random-init",
        "-n",
        "12",
        "--repeats",
        "1",
    )
    result = invoke("run", *args, "--no-save", "--export-json", out)
    assert result.exit_code == 0, result.output
    assert "T=0: the two generations are identical" in result.output
    (row,) = json.loads(out.read_text())
    assert row["architecture"] == "qwen2" and row["target"] == "smollm2-1.7b" and row["kernels"] == "cpu"


def test_the_family_s_limits_on_the_command_line_are_one_line_each(tiny_names, tmp_path):
    from conftest import assert_one_line_error, invoke

    pair = ("--target", "smollm2-1.7b", "--draft", "smollm2-135m", "--random-init")
    assert_one_line_error(
        invoke("run", *pair, "--kernels", "pallas", "--dry-run"), "--kernels", "GPT-2's blocks only"
    )
    eagle = invoke("run", *pair[:2], "--random-init", "--drafter", "eagle", "--dry-run")
    assert_one_line_error(eagle, "--eagle-head", "has no EAGLE head")
    assert_one_line_error(
        invoke("run", "--target", str(tmp_path), "--random-init"), "--random-init", "registry names"
    )
    listed = invoke("models")
    assert listed.exit_code == 0 and "qwen2.5-0.5b" in listed.output and "494.0M" in listed.output


QWEN3_SMALL = dataclasses.replace(
    SMALL, qkv_bias=False, family="qwen3", qk_norm=True, explicit_head_dim=16
)  # norms over each head's queries and keys, a head_dim that is not 32 / 4


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_transformers_peer_decodes_the_family_s_random_weights_as_specbench_at_t0(llama_pair, family):
    """The peer loads random Llama-family weights saved in HF's layout (formats.py: llama_layout)
    with AutoModelForCausalLM, and its generate and assisted generation give specbench's tokens:
    Qwen2's (biases) and Qwen3's (q/k norms, its own head_dim)."""
    pytest.importorskip("transformers")
    from specbench.measure import peers
    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.generate import autoregressive

    from exactness import noisy_copy

    draft, target = llama_pair
    if family == "qwen3":
        target = llama_model(QWEN3_SMALL, 0, "qwen3-target", scale=8.0)
        draft = noisy_copy(target, 0.05, 4)
    (hf,) = peers.make_peers(
        ["transformers"], drafters.model_drafter(draft.config), draft, target, 1, on_gpu=False
    )
    try:
        prompt = [5, 17, 2, 88, 40, 3, 5, 17]
        ar, _ = autoregressive(target, prompt, 12)
        assert hf.autoregressive(prompt, 12, Warp(), 0)[0] == ar.tolist()
        assert hf.speculative(prompt, 12, 3, Warp(), 0)[0] == ar.tolist()
    finally:
        hf.close()
    with pytest.raises(peers.PeerError, match="numpy runs the papers' algorithm on GPT-2s"):
        peers.make_peers(["numpy"], drafters.model_drafter(draft.config), draft, target, 1, on_gpu=False)


# ---------------------------------------------------------------------------------------------
# EAGLE's head for the family: one Llama block over the target's features (nets/eagle.py)


def llama_head(target: Model, seed: int, scale: float = 3.0) -> Model:
    """A head of random weights with a Llama block of the target's width, scaled up so that its
    drafts depend on the features it reads."""
    from specbench.model.nets import eagle

    config = eagle.config_for(target.config)
    rng = np.random.default_rng(seed)
    scaled = lambda x: x * scale + jnp.asarray(0.05 * rng.normal(size=x.shape), x.dtype)
    return Model(
        "llama-head", config, jax.tree_util.tree_map(scaled, eagle.init_params(config, seed)), "random"
    )


def test_the_family_s_eagle_head_caches_as_its_uncached_forward_and_keeps_ar_s_tokens(llama_pair, tmp_path):
    from specbench.model.checkpoints import eagle_files
    from specbench.model.decode import drafters
    from specbench.model.decode.tree import Tree
    from specbench.model.generate import autoregressive, speculative
    from specbench.model.nets import eagle

    _, target = llama_pair
    head = llama_head(target, 2)
    params = eagle.attach(head.params, target.params, target.config)
    tokens = jnp.asarray([5, 9, 1, 44, 3, 3, 70, 12], jnp.int32)
    _, _, feats = llama.step(target.params, llama.init_cache(SMALL, 16), tokens, 0, SMALL, hidden=True)
    logits, h = eagle.forward(params, feats, tokens, head.config)
    cache = llama.init_cache(head.config, 16)
    got, got_h, cache = eagle.step(params, cache, eagle.shifted(feats)[:5], tokens[:5], 0, head.config)
    rows, rows_h = [got], [got_h]
    for j in range(5, 8):
        lj, hj, cache = eagle.step(params, cache, feats[j - 1 : j], tokens[j : j + 1], j, head.config)
        rows.append(lj), rows_h.append(hj)
    np.testing.assert_allclose(np.concatenate(rows_h), h, atol=1e-4)
    np.testing.assert_allclose(np.concatenate(rows), logits, atol=1e-4)
    # on disk and back: the block's config travels with it
    eagle_files.save(tmp_path / "head", head.params, head.config, target.name)
    config, loaded, trained_on = eagle_files.load(tmp_path / "head")
    assert config == head.config and trained_on == target.name
    prompt, n = [5, 17, 2, 88, 40, 3, 5, 17], 20
    ar, _ = autoregressive(target, prompt, n)
    chain = drafters.eagle_drafter(target.config)
    for name, drafter, K in (
        ("chain", chain, 3),
        ("tree", dataclasses.replace(chain, tree=Tree.branching((2, 2, 1))), 3),
    ):
        sd, stats = speculative(head, target, prompt, n, K, drafter=drafter)
        np.testing.assert_array_equal(sd, ar, err_msg=name)
        assert 0 < stats.alpha < 1, (name, stats.alpha)


def test_a_family_step_s_flops_are_its_traced_matrix_products():
    """step_costs.step_flops for a step of 1 and 5 tokens equals twice the multiply-adds of the
    traced step's matrix products (GQA's narrower k and v, SwiGLU's three, the head) and the
    attention over the cache of every query head, and step_bytes counts the key/value heads' cache."""
    from test_t5 import multiply_adds

    from specbench.measure import step_costs, timing

    for config in (SMALL, dataclasses.replace(SMALL, tied=False, qkv_bias=False, family="llama")):
        m = llama_model(config, 0, "m", 1.0)
        step = lambda p, cache, tokens: llama.step(p, cache, tokens, jnp.int32(10), config)[0]
        for n in (1, 5):
            traced = jax.make_jaxpr(step)(m.params, timing.step_cache(m, 64), jnp.zeros(n, jnp.int32))
            # a step of up to a few tokens attends by multiply-and-sum over the cache (attention.py),
            # not by a matrix product: its 2 max_len n_embd a layer and token is added beside them
            attention = 2 * n * config.n_layer * 2 * 64 * config.n_embd
            assert step_costs.step_flops(m, n, 64) == 2 * multiply_adds(traced.jaxpr) + attention
        weights_bytes = sum(x.size * 4 for x in jax.tree_util.tree_leaves(m.params))
        assert step_costs.step_bytes(m, 64) == weights_bytes + 2 * config.n_layer * 64 * 2 * 8 * 4


def test_a_report_plans_every_section_for_a_family_pair_and_the_draft_vocabulary_needs_gpt2_s_ids(
    tiny_names, tmp_path
):
    from conftest import assert_one_line_error, invoke

    pair = ("--target", "smollm2-1.7b", "--draft", "smollm2-135m", "--random-init")
    result = invoke("report", *pair, "--quick", "--dry-run", "-o", tmp_path / "r")
    assert result.exit_code == 0, result.output
    for section in ("tree 2,2,1", "dial(a=0.5)", "batch 4", "lookup(n=3)"):  # trees, dial, batches, drafters
        assert section in result.output, section
    _, folder = saved(tmp_path, "qwen2-biases-tied")  # a checkpoint with its own tokenizer.json
    (folder / "tokenizer.json").write_text(tiny_tokenizer_json(101))
    own = invoke("run", "--target", folder, "--drafter", "layerskip", "--draft-vocab", "50", "--dry-run")
    assert_one_line_error(own, "--draft-vocab", "own tokenizer")
    random = invoke("run", *pair, "--draft-vocab", "64", "--dry-run")  # GPT-2's ids, folded: ranked
    assert random.exit_code == 0, random.output


def test_a_qwen3_pair_saved_by_transformers_runs_through_specbench_run_with_sd_equal_to_ar(tmp_path):
    """A Qwen3 target and its draft (the same shape, its weights noisy: drafts accepted and
    rejected), each saved by transformers with one tokenizer.json, decode through the command line."""
    import torch

    from conftest import invoke

    for noise, name in ((0.0, "target"), (0.1, "draft")):  # the draft: the target with noise on every weight
        model = hf_model(*HF_CASES["qwen3-gqa-head-dim-tied"], seed=0, scale=6.0, vocab=320)
        with torch.no_grad():
            torch.manual_seed(1)
            for p in model.parameters():
                p.add_(noise * p.std() * torch.randn_like(p))
        model.save_pretrained(str(tmp_path / name))
        (tmp_path / name / "tokenizer.json").write_text(tiny_tokenizer_json(320))  # byte-level: >= 256
    out = tmp_path / "row.json"
    pair = ("--target", tmp_path / "target", "--draft", tmp_path / "draft")
    result = invoke("run", *pair, "-n", "16", "--repeats", "1", "--no-save", "--export-json", out)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["architecture"] == "qwen3" and row["identical"] is True
    assert 0 < row["alpha"] < 1, row["alpha"]  # drafts both accepted and rejected (0.1 of noise)
