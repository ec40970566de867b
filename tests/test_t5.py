"""T5 in JAX (t5.py) and its Hugging Face layout (t5_layout.py): the logits equal transformers'
T5ForConditionalGeneration's on the same weights, the cached decoder step equals the uncached
forward, and a checkpoint with a missing or misshapen tensor is refused naming it."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.errors import WeightsError
from specbench.model import hf_layout, t5, t5_layout
from specbench.model.t5 import T5Config

CONFIG = T5Config(
    n_vocab=97,
    d_model=32,
    d_kv=8,
    d_ff=48,
    n_layer=2,
    n_decoder_layer=3,
    n_head=4,
    num_buckets=8,
    max_distance=20,
)


def hf_model(tmp_path, gated: bool, tied: bool):
    """A random transformers T5, saved as safetensors in tmp_path: (the torch model, its folder)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=97,
        d_model=32,
        d_kv=8,
        d_ff=48,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        feed_forward_proj="gated-gelu" if gated else "relu",
        tie_word_embeddings=tied,
        dropout_rate=0.0,
        decoder_start_token_id=0,
    )
    model = transformers.T5ForConditionalGeneration(config).eval()
    if not tied:  # transformers 5 ties every T5's head to the embedding; v1.1 and Flan were saved untied
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(0.2 * torch.randn(97, 32))
    with torch.no_grad():  # norms away from 1, so that a norm read from the wrong place shows
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.mul_(1 + 0.3 * torch.randn_like(p))
    folder = tmp_path / f"t5-{gated}-{tied}"
    model.save_pretrained(folder, safe_serialization=True)
    return model, folder


@pytest.mark.parametrize(
    "gated, tied", [(True, False), (False, True)], ids=["v1.1-gated-untied", "original-relu-tied"]
)
def test_logits_equal_transformers_on_the_same_weights(tmp_path, gated, tied):
    import torch

    model, folder = hf_model(tmp_path, gated, tied)
    config, params = t5_layout.load_dir(folder)
    assert config.gated == gated and config.scale_decoder_outputs == tied, config
    assert ("lm_head" in params) == (not tied)
    rng = np.random.default_rng(1)
    src, tgt = (
        rng.integers(0, 97, 30),
        np.concatenate([[0], rng.integers(0, 97, 24)]),
    )  # offsets past max_distance
    with torch.no_grad():
        want = (
            model(input_ids=torch.tensor(src[None]), decoder_input_ids=torch.tensor(tgt[None]))
            .logits[0]
            .numpy()
        )
    got = np.asarray(
        jax.jit(t5.t5, static_argnames="config")(params, jnp.asarray(src), jnp.asarray(tgt), config)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_relative_buckets_equal_transformers():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    bucket = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    offsets = np.arange(-300, 301)
    for bidirectional in (True, False):
        for buckets, distance in ((32, 128), (8, 20)):
            want = bucket(torch.tensor(offsets), bidirectional, buckets, distance).numpy()
            got = np.asarray(t5.relative_bucket(jnp.asarray(offsets), bidirectional, buckets, distance))
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("gated", [True, False])
def test_the_cached_decoder_step_equals_the_uncached_forward(gated):
    config = T5Config(**{**CONFIG.__dict__, "gated": gated, "scale_decoder_outputs": not gated})
    params = t5.init_params(config, seed=3)
    rng = np.random.default_rng(2)
    src, tgt = jnp.asarray(rng.integers(0, 97, 12)), jnp.asarray(rng.integers(0, 97, 20))
    want = t5.t5(params, src, tgt, config)
    # the source padded to 16: its padding must change nothing
    padded = jnp.concatenate([src, jnp.zeros(4, src.dtype)])
    cross = t5.cross_kv(params, t5.encode(params, padded, 12, config), config)
    step = jax.jit(t5.step, static_argnames="config")
    cache, pos, got = t5.init_cache(config, 32), 0, []
    for n in (1, 1, 5, 3, 1, 9):  # a decode step, a verify step, a longer one
        logits, cache = step(params, cache, cross, 12, tgt[pos : pos + n], jnp.int32(pos), config)
        got.append(logits)
        pos += n
    np.testing.assert_allclose(jnp.concatenate(got), want, rtol=1e-5, atol=1e-5)


def test_a_missing_or_misshapen_tensor_is_refused_naming_it(tmp_path):
    from safetensors.numpy import load_file, save_file

    _, folder = hf_model(tmp_path, True, False)
    tensors = load_file(str(folder / hf_layout.SAFETENSORS_FILE))
    config = t5_layout.config_from_hf(json.loads((folder / "config.json").read_text()))
    key = "decoder.block.1.layer.1.EncDecAttention.k.weight"
    for broken, fragment in (
        ({k: v for k, v in tensors.items() if k != key}, f"missing ['{key}']"),
        (tensors | {key: tensors[key][:, :-1].copy()}, f"tensor {key} has shape (32, 31), expected (32, 32)"),
    ):
        with pytest.raises(WeightsError) as e:
            t5_layout.params_from_hf(broken, config)
        assert fragment in str(e.value)
        assert "\n" not in str(e.value)
    save_file({k: v for k, v in tensors.items() if k != key}, str(folder / hf_layout.SAFETENSORS_FILE))
    with pytest.raises(WeightsError, match="missing"):
        t5_layout.load_dir(folder)
    with pytest.raises(WeightsError, match="'d_kv'"):
        t5_layout.config_from_hf({"vocab_size": 9, "d_model": 8, "d_ff": 8, "num_layers": 1, "num_heads": 1})
