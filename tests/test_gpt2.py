import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model.kernels import cpu
from specbench.model.nets import layouts
from specbench.model.nets.gpt2 import GPT2Config, gpt2, init_cache, step, step_jit
from specbench.model.nets.layouts import decode_layout, decode_pieces, kernel_layout
from specbench.model.nets.network import Model

from conftest import numpy_gpt2, random_model

CONFIGS = [
    GPT2Config(n_layer=1, n_head=1, n_embd=8, n_ctx=40, n_vocab=11),
    GPT2Config(n_layer=2, n_head=4, n_embd=32, n_ctx=64, n_vocab=97),
    GPT2Config(n_layer=3, n_head=3, n_embd=48, n_ctx=48, n_vocab=300),
]


@pytest.mark.parametrize("layout", ["hf", "decode", "decode-pieces", "kernel"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.n_layer}x{c.n_embd}h{c.n_head}v{c.n_vocab}")
def test_cached_logits_match_full_forward(config, layout, monkeypatch):
    if layout == "decode-pieces":  # cut every n_in into pieces of under 8 floats, as 4,096 and wider are
        monkeypatch.setattr(layouts, "FUSED_VECTOR_BYTES", 32)
    if layout == "kernel" and cpu.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {cpu.unavailable()}")
    if layout.startswith("decode") and jax.devices()[0].platform != "cpu":
        pytest.skip("the decode layout's [n_out, n_in] copies are made on the CPU only")
    model = random_model(config, seed=config.n_embd)
    rng = np.random.default_rng(config.n_vocab)
    tokens = jnp.asarray(rng.integers(0, config.n_vocab, 30), jnp.int32)
    full = np.asarray(gpt2(model.params, tokens, config))  # uncached, in the HF layout
    if layout == "kernel":  # every step shape below (up to 16 rows) through the CPU kernel
        model = Model(model.name, config, kernel_layout(model.params), model.source)
    elif layout != "hf":  # every step shape below, 1-token steps through the [n_out, n_in] copies
        model = Model(model.name, config, decode_layout(model.params), model.source)
        _, pieces, n_out, piece = model.params["blocks"]["mlp"]["c_proj"]["weight_t"].shape
        assert (n_out, pieces * piece) == (config.n_embd, 4 * config.n_embd)
        assert pieces == 1 if layout == "decode" else pieces > 1 and piece < 8
    cache = init_cache(config, config.n_ctx)
    # prefill 7 (padded to a bucket of 8), then decode, verify, decode, verify at arbitrary positions
    padded = jnp.concatenate([tokens[:7], jnp.zeros(1, jnp.int32)])
    logits, cache = step_jit(model.params, cache, padded, jnp.int32(0), config=config)
    np.testing.assert_allclose(logits[:7], full[:7], atol=1e-5, rtol=1e-5)
    pos = 7
    for n in [1, 5, 1, 3, 4, 1, 2]:
        logits, cache = step_jit(model.params, cache, tokens[pos : pos + n], jnp.int32(pos), config=config)
        np.testing.assert_allclose(logits, full[pos : pos + n], atol=1e-5, rtol=1e-5)
        pos += n


@pytest.mark.parametrize("limit", [None, 8], ids=["prefill-within-limit", "prefill-over-limit"])
@pytest.mark.parametrize("layout", ["hf", "kernel"])
def test_a_long_prefill_matches_full_forward(layout, limit, monkeypatch):
    # a prompt of 30 tokens (a bucket of 32): within cpu.ROWS_MAX, its products run the kernel
    # (kernel layout) and its attention few_token_attention; over the limit, XLA's GEMM and the
    # batched products over the heads
    if layout == "kernel" and cpu.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {cpu.unavailable()}")
    if limit:
        monkeypatch.setattr(cpu, "ROWS_MAX", limit)
    config = CONFIGS[1]
    model = random_model(config, seed=5)
    tokens = jnp.asarray(np.random.default_rng(4).integers(0, config.n_vocab, 34), jnp.int32)
    full = np.asarray(gpt2(model.params, tokens, config))  # uncached, in the HF layout
    if layout == "kernel":
        model = Model(model.name, config, kernel_layout(model.params), model.source)
    padded = jnp.concatenate([tokens[:30], jnp.zeros(2, jnp.int32)])
    cache = init_cache(config, config.n_ctx)
    # traced here, under this test's limit; position 0 a Python int, as decoding.start passes it (a
    # prefill at 0 reads no cache entry), then a verify step at a traced position
    prefill = jax.jit(lambda params, cache, tokens: step(params, cache, tokens, 0, config))
    assert (cpu.TARGET in prefill.lower(model.params, cache, padded).as_text()) == (
        layout == "kernel" and not limit
    )
    logits, cache = prefill(model.params, cache, padded)
    np.testing.assert_allclose(logits[:30], full[:30], atol=1e-5, rtol=1e-5)
    verify = jax.jit(lambda *a: step(*a, config))
    logits, _ = verify(model.params, cache, tokens[30:34], jnp.int32(30))
    np.testing.assert_allclose(logits, full[30:34], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["decode", "kernel"])
@pytest.mark.parametrize("n_after", [4, 1])  # 1: the 1-token attention, stale entries right after pos
def test_rollback_then_overwrite_matches_full_forward(n_after, layout):
    if layout == "kernel" and cpu.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {cpu.unavailable()}")
    config = CONFIGS[1]
    model = random_model(config, seed=3)
    to_layout = kernel_layout if layout == "kernel" else decode_layout
    model = Model(model.name, config, to_layout(model.params), model.source)
    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.integers(0, config.n_vocab, 20), jnp.int32)
    b = jnp.asarray(rng.integers(0, config.n_vocab, 20), jnp.int32)
    cache = init_cache(config, config.n_ctx)
    _, cache = step_jit(model.params, cache, a[:10], jnp.int32(0), config=config)
    _, cache = step_jit(model.params, cache, a[10:15], jnp.int32(10), config=config)  # 5 speculative tokens
    # reject all but two of them: go back to position 12 and continue with other tokens
    seq = jnp.concatenate([a[:12], b[:n_after]])
    logits, cache = step_jit(model.params, cache, b[:n_after], jnp.int32(12), config=config)
    np.testing.assert_allclose(logits, gpt2(model.params, seq, config)[12:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("config", CONFIGS[:2], ids=["1x8", "2x32"])
def test_forward_matches_independent_numpy_reference(config):
    model = random_model(config, seed=7)
    tokens = np.random.default_rng(2).integers(0, config.n_vocab, 17)
    ref = numpy_gpt2(model.params, tokens, config)
    np.testing.assert_allclose(gpt2(model.params, jnp.asarray(tokens), config), ref, atol=2e-5, rtol=1e-4)
    cache = init_cache(config, 32)
    logits, _ = step_jit(model.params, cache, jnp.asarray(tokens, jnp.int32), jnp.int32(0), config=config)
    np.testing.assert_allclose(logits, ref, atol=2e-5, rtol=1e-4)


def test_bfloat16_forward_is_close_to_float32():
    config = CONFIGS[1]
    model = random_model(config, seed=5)
    params16 = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), model.params)
    tokens = jnp.arange(12, dtype=jnp.int32)
    l32, c32 = step_jit(model.params, init_cache(config, 16), tokens, jnp.int32(0), config=config)
    l16, c16 = step_jit(params16, init_cache(config, 16, jnp.bfloat16), tokens, jnp.int32(0), config=config)
    assert l16.dtype == jnp.float32 and c16["k"].dtype == jnp.bfloat16
    assert np.abs(np.asarray(l16) - np.asarray(l32)).max() < 0.05 * np.abs(np.asarray(l32)).max() + 0.02
    one = jnp.array([3], jnp.int32)  # a 1-token step over the bfloat16 cache
    l32, _ = step_jit(model.params, c32, one, jnp.int32(12), config=config)
    l16, _ = step_jit(params16, c16, one, jnp.int32(12), config=config)
    assert np.abs(np.asarray(l16) - np.asarray(l32)).max() < 0.05 * np.abs(np.asarray(l32)).max() + 0.02


def test_logits_at_one_row_equals_that_row_of_all():
    config = CONFIGS[1]
    model = random_model(config, seed=9)
    tokens = jnp.arange(10, dtype=jnp.int32) % config.n_vocab
    full, _ = step_jit(model.params, init_cache(config, 16), tokens, jnp.int32(0), config=config)
    one, _ = step_jit(
        model.params, init_cache(config, 16), tokens, jnp.int32(0), config=config, logits_at=jnp.int32(6)
    )
    assert one.shape == (1, config.n_vocab)
    np.testing.assert_allclose(one[0], full[6], atol=1e-6)


@pytest.mark.parametrize("layout", ["hf", "kernel"])
def test_a_head_over_some_tokens_gives_the_full_heads_columns_for_them(layout):
    """A draft vocabulary (layouts.restrict_head): the step's logits are those of its tokens, for
    every step shape the drafter runs (1 token, the first draft's 2, a prompt)."""
    if layout == "kernel" and cpu.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {cpu.unavailable()}")
    config = CONFIGS[2]
    model = random_model(config, seed=5)
    params = kernel_layout(model.params) if layout == "kernel" else model.params
    ids = np.sort(np.random.default_rng(0).choice(config.n_vocab, 37, replace=False))
    restricted = layouts.restrict_head(params, ids)
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, config.n_vocab, 8), jnp.int32)
    for n_seq in (1, 2, 8):
        full, _ = step(params, init_cache(config, 16), tokens[:n_seq], 0, config)
        some, _ = step(restricted, init_cache(config, 16), tokens[:n_seq], 0, config)
        assert some.shape == (n_seq, ids.size)
        np.testing.assert_allclose(np.asarray(some), np.asarray(full)[:, ids], rtol=1e-6, atol=1e-6)


def test_the_decode_layout_reads_as_many_bytes_and_batches_use_the_hf_layout():
    from specbench.model.nets.layouts import Layout, batch_layout, param_bytes, resident_bytes

    params = random_model(CONFIGS[1], seed=1).params
    both = decode_layout(params)
    assert param_bytes(both) == param_bytes(params) < resident_bytes(both)
    batch = batch_layout(both)
    assert batch.layout is Layout.HF and both.layout is Layout.DECODE
    assert jax.tree_util.tree_structure(batch.arrays) == jax.tree_util.tree_structure(params)


def test_decode_pieces_are_the_fewest_that_divide_n_in_under_the_fusion_threshold():
    # GPT-2's widths in float32: every matrix whole up to 124M's 3,072; the MLP's c_proj of
    # 355M, 774M and 1558M (4 x n_embd) in two; bfloat16 halves the bytes
    assert [decode_pieces(n, 4) for n in (768, 2304, 3072, 4095)] == [1, 1, 1, 1]
    assert [decode_pieces(n, 4) for n in (4096, 5120, 6400)] == [2, 2, 2]
    assert decode_pieces(4097, 4) == 17 and decode_pieces(6400, 2) == 1


def test_float32_steps_multiply_in_float32():
    """Every product of a float32 step asks for float32 arithmetic: on a GPU with TF32 matrix
    units XLA's default rounds the operands to 10-bit mantissas, and a verify step and a 1-token
    step then disagree: cached logits differ and greedy SD != AR (docs/gpu.md)."""
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=32, n_vocab=37)
    model = random_model(config, seed=3)
    cache = init_cache(config, config.n_ctx)
    hlo = step_jit.lower(model.params, cache, jnp.arange(5, dtype=jnp.int32), jnp.int32(0), config=config)
    dots = [line for line in hlo.as_text(dialect="hlo").splitlines() if " dot(" in line]
    assert dots and all("operand_precision={highest,highest}" in line for line in dots), dots
