"""The Mosaic GPU products (model/kernels/mosaic.py), run here in GPU interpret mode: each equals
its plain-JAX product, alone and batched; a bfloat16 step through them equals XLA's within
bfloat16's rounding and SD equals AR at T = 0; each lowers for CUDA (jax.export, no device);
SPECBENCH_PALLAS_BACKEND chooses them, and they refuse what they do not multiply."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from specbench import environment
from specbench.model.generate import autoregressive, speculative
from specbench.model.kernels import mosaic, pallas
from specbench.model.nets import gpt2, layouts
from specbench.model.nets.gpt2 import GPT2Config

from conftest import random_model
from exactness import noisy_copy

CONFIG = GPT2Config(n_layer=2, n_head=2, n_embd=64, n_ctx=64, n_vocab=97)  # every product's n_out % 64 == 0
f32 = lambda a: jnp.asarray(a, jnp.float32)


def bf16(*shape, scale=1.0, seed=0):
    return jnp.asarray(scale * np.random.default_rng(seed).standard_normal(shape), jnp.bfloat16)


def reference(x, w, b, layer, norm=None, activation=None, residual=None):
    """The product in float32 from the bfloat16 operands, as gpt2's blocks compute it."""
    x = f32(x)
    if norm is not None:
        mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
        x = (x - mean) / jnp.sqrt(var + 1e-5) * f32(norm["weight"][layer]) + f32(norm["bias"][layer])
    y = x @ f32(w[layer]) + f32(b[layer])
    y = y if activation is None else activation(y)
    return y if residual is None else f32(residual) + y


def test_a_product_equals_its_plain_jax_one_alone_batched_and_at_a_traced_layer():
    n_in, n_out = 192, 128
    x, w, b, r = (
        bf16(16, n_in),
        bf16(2, n_in, n_out, scale=0.05, seed=1),
        bf16(2, n_out, seed=2),
        bf16(16, n_out),
    )
    norm = {"weight": 1 + bf16(2, n_in, scale=0.1, seed=3), "bias": bf16(2, n_in, scale=0.1, seed=4)}
    tol = dict(atol=0.03, rtol=0.02)  # the output's bfloat16 rounding (one part in 256)
    got = mosaic.linear(x, w, b, 1, norm=norm, activation=jnp.tanh, residual=r)
    np.testing.assert_allclose(f32(got), reference(x, w, b, 1, norm, jnp.tanh, r), **tol)
    np.testing.assert_allclose(f32(mosaic.linear(x, w, b, jnp.int32(0))), reference(x, w, b, 0), **tol)
    xs = bf16(3, 16, n_in, seed=5)  # a batch of three steps: one product, their columns side by side
    batched = jax.vmap(lambda one: mosaic.linear(one, w, b, 0, weight_t=jnp.swapaxes(w, 1, 2)))(xs)
    for one, got in zip(xs, batched):
        np.testing.assert_allclose(f32(got), reference(one, w, b, 0), **tol)


def test_what_the_kernel_does_not_multiply_is_named():
    assert "bfloat16" in mosaic.unsupported(64, 64, jnp.float32)
    assert "multiple of 64" in mosaic.unsupported(64, 96, jnp.bfloat16)
    assert mosaic.unsupported(1600, 4800, jnp.bfloat16) is None  # 1558M's widths
    with pytest.raises(environment.EnvironmentSettingError, match="triton, mosaic"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SPECBENCH_PALLAS_BACKEND", "cutlass")
            environment.check()


@pytest.fixture
def mosaic_backend(monkeypatch):
    monkeypatch.setenv("SPECBENCH_PALLAS_BACKEND", "mosaic")


@pytest.fixture(scope="module")
def model():
    m = random_model(CONFIG, 3, "mosaic", scale=5)
    return dataclasses.replace(m, params=jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), m.params))


@pytest.mark.slow
def test_a_bfloat16_step_through_the_kernels_equals_xlas_and_sd_equals_ar(model, mosaic_backend):
    marked = layouts.pallas_layout(model.params)
    assert marked["blocks"]["attn"]["c_attn"]["weight_t"].shape == (2, 192, 64)
    tokens = jnp.asarray([5, 9, 1, 44, 3, 3, 70], jnp.int32)
    step = lambda params: gpt2.step(params, gpt2.init_cache(CONFIG, 32, jnp.bfloat16), tokens, 0, CONFIG)[0]
    np.testing.assert_allclose(step(marked), step(model.params), atol=0.15, rtol=0.05)
    target = dataclasses.replace(model, params=marked)
    draft = noisy_copy(model, 0.5, 4)
    ar, _ = autoregressive(target, [5, 9, 1], 8, max_len=32)
    sd, stats = speculative(draft, target, [5, 9, 1], 8, 3, max_len=32)
    np.testing.assert_array_equal(sd, ar)  # each token's column is computed alone: rows do not mix


def test_every_product_lowers_for_cuda_as_a_mosaic_kernel(mosaic_backend):
    config = GPT2Config(n_layer=1, n_head=12, n_embd=768)  # 124M's widths, one layer
    params = jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(a.shape, jnp.bfloat16), gpt2.init_params(config, 0)
    )
    params = jax.eval_shape(layouts.pallas_layout, params)
    cache = jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(a.shape, jnp.bfloat16), gpt2.init_cache(config, 64)
    )
    fn = lambda p, c, t, s: gpt2.step(p, c, t, s, config)
    checks = [export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton"), *mosaic.lowering_checks()]
    with pallas.lowering_for("cuda"):
        module = export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=checks)(
            params, cache, jax.ShapeDtypeStruct((5,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32)
        ).mlir_module()
    assert module.count("@mosaic_gpu_v2") == 4  # the four products; attention stays Triton's
    assert module.count("@__gpu$xla.gpu.triton") == 1


def test_the_private_interpret_parameters_are_read_only_in_the_jax_releases_tested(monkeypatch):
    """mosaic.py's one jax._src import (GPU interpret mode's parameters, public in no release yet)
    is read within mosaic.INTERPRET_JAX, the releases tested; another release is one clear error."""
    monkeypatch.setattr(mosaic, "traced_for", lambda: "cpu")
    lo, hi = mosaic.INTERPRET_JAX
    if lo <= tuple(int(v) for v in jax.__version__.split(".")[:2]) < hi:
        assert mosaic.interpret_params() is not None
    monkeypatch.setattr(jax, "__version__", f"{hi[0]}.{hi[1]}.0")
    with pytest.raises(RuntimeError, match="tested with JAX"):
        mosaic.interpret_params()
