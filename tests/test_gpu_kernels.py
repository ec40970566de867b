"""The fused Pallas kernels of a GPU step (pallas.py), run here in Pallas's interpret mode:
the step through them equals the uncached forward, SD equals AR at T = 0, the tokens follow the
target at T = 1 (chi-square, with a broken control), each kernel lowers for CUDA through the Triton
lowering, and --kernels chooses them only where they can run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from specbench.errors import SpecbenchError
from specbench.model.decode.sampling import Warp, accept_reject
from specbench.model.decode.tree import Tree
from specbench.model.generate import autoregressive, speculative
from specbench.model.kernels import cpu, pallas, pallas_layers, pallas_tiles
from specbench.model.nets import gpt2, layouts
from specbench.model.nets.gpt2 import GPT2Config

from conftest import assert_one_line_error, invoke, random_model
from exactness import (
    P_THRESHOLD,
    SMALL_D,
    broken_accept_reject,
    chi_square_p,
    noisy_copy,
    sampled_tokens,
    target_marginals,
    with_pallas,
)

CONFIG = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=64, n_vocab=97)
TRITON = "__gpu$xla.gpu.triton"


@pytest.fixture(scope="module")
def model():
    return random_model(CONFIG, 3, "pallas", scale=5)


def steps(params, tokens, sizes, max_len=64, dtype=jnp.float32):
    """Logits of consecutive steps of the given sizes from an empty cache, and the final cache."""
    cache, pos, out = gpt2.init_cache(CONFIG, max_len, dtype), 0, []
    for n in sizes:
        logits, cache = gpt2.step_jit(params, cache, tokens[pos : pos + n], jnp.int32(pos), CONFIG)
        out.append(logits)
        pos += n
    return jnp.concatenate(out), cache


def test_a_step_through_the_kernels_equals_the_uncached_forward(model):
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 97, 60), jnp.int32)
    uncached = gpt2.gpt2(model.params, tokens, CONFIG)
    marked = layouts.pallas_layout(model.params)
    # a prefill of 20 (XLA's path), then steps of 1, 5, 16 (the kernels' largest), 1 and 17 (XLA's)
    sizes = (20, 1, 5, 16, 1, 17)
    logits, cache = steps(marked, tokens, sizes)
    np.testing.assert_allclose(logits, uncached, rtol=1e-5, atol=1e-5)
    _, xla_cache = steps(model.params, tokens, sizes)
    for name in ("k", "v"):
        np.testing.assert_allclose(cache[name], xla_cache[name], rtol=1e-5, atol=1e-5)
    # and a prefill of a few tokens through the kernels, from pos 0
    np.testing.assert_allclose(steps(marked, tokens, (7, 1))[0], uncached[:8], rtol=1e-5, atol=1e-5)


def test_a_token_tree_through_the_kernels_equals_its_xla_step(model):
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 97, 40), jnp.int32)
    tree = Tree.branching((2, 2, 1))
    cache = gpt2.step_jit(model.params, gpt2.init_cache(CONFIG, 64), tokens[:20], jnp.int32(0), CONFIG)[1]
    nodes = tokens[20 : 20 + tree.size]
    want, _ = gpt2.step_jit(
        model.params, jax.tree_util.tree_map(jnp.copy, cache), nodes, jnp.int32(20), CONFIG, tree=tree
    )
    got, _ = gpt2.step_jit(
        layouts.pallas_layout(model.params), cache, nodes, jnp.int32(20), CONFIG, tree=tree
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bfloat16_steps_stay_close_to_xlas(model):
    params16 = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), model.params)
    tokens = jnp.asarray(np.random.default_rng(2).integers(0, 97, 30), jnp.int32)
    sizes = (20, 1, 5)
    got = steps(layouts.pallas_layout(params16), tokens, sizes, dtype=jnp.bfloat16)[0]
    want = steps(params16, tokens, sizes, dtype=jnp.bfloat16)[0]
    scale = float(jnp.abs(want).max())
    assert float(jnp.abs(got - want).max()) < 0.03 * scale
    assert (got[20:].argmax(-1) == want[20:].argmax(-1)).mean() >= 0.8


def test_greedy_speculative_equals_autoregressive_through_the_kernels(model):
    draft, target = with_pallas(noisy_copy(model, 0.05, 4), model)
    assert (
        layouts.as_weights(target.params).layout
        is layouts.as_weights(draft.params).layout
        is layouts.Layout.PALLAS
    )
    for seed in range(3):
        prompt = list(np.random.default_rng(seed).integers(0, 97, 2 + 3 * seed))
        ar, _ = autoregressive(target, prompt, 20, max_len=64)
        for K in (1, 4):
            sd, _ = speculative(draft, target, prompt, 20, K, max_len=64)
            np.testing.assert_array_equal(sd, ar, err_msg=f"prompt {prompt}, K={K}")


EXACT = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=16, n_vocab=12)
"""The chi-square tests' target (exactness.SMALL_T) at the kernels' smallest head, 16 wide."""


@pytest.fixture(scope="module")
def draws(shared):
    def make():
        draft = random_model(SMALL_D, 11, "small-draft", scale=30)
        (target,) = with_pallas(random_model(EXACT, 12, "small-target", scale=30))
        assert layouts.as_weights(target.params).layout is layouts.Layout.PALLAS
        prompt, warp = [3, 7, 1], Warp(1.0)
        exact = target_marginals(target, prompt, warp, 3)
        verdicts = (accept_reject, broken_accept_reject)
        return exact, sampled_tokens(draft, target, prompt, warp, K=2, verdicts=verdicts)

    return shared("pallas-draws", make)


@pytest.mark.slow
def test_speculative_sampling_through_the_kernels_follows_the_target(draws):
    exact, (tokens, broken) = draws
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]
    assert min(p_values) > P_THRESHOLD, p_values
    broken_p = [chi_square_p(broken[:, i], exact[i]) for i in (1, 2)]
    assert max(broken_p) < P_THRESHOLD, broken_p  # the broken control fails on the same path


def cuda_step(config: GPT2Config, dtype, n_rows: int, batch: int = 0):
    """The step's StableHLO for CUDA through the kernels' Triton lowering, from shapes alone."""
    sds = lambda a: jax.ShapeDtypeStruct(a.shape, dtype if a.dtype.kind == "f" else a.dtype)
    params = jax.tree_util.tree_map(
        sds, jax.eval_shape(lambda: layouts.pallas_layout(gpt2.init_params(config)))
    )
    cache = jax.tree_util.tree_map(sds, jax.eval_shape(lambda: gpt2.init_cache(config, 128)))
    tokens, pos = jax.ShapeDtypeStruct((n_rows,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32)
    fn = lambda p, c, t, s: gpt2.step(p, c, t, s, config)
    if batch:
        lead = lambda a: jax.ShapeDtypeStruct((batch, *a.shape), a.dtype)
        cache, tokens, pos = jax.tree_util.tree_map(lead, cache), lead(tokens), lead(pos)
        fn = jax.vmap(fn, in_axes=(None, 0, 0, 0))
    checks = [export.DisabledSafetyCheck.custom_call(TRITON)]
    with pallas.lowering_for("cuda"):
        return export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=checks)(
            params, cache, tokens, pos
        )


@pytest.mark.parametrize(
    "n_embd, n_head, dtype, n_rows, batch",
    [
        (32, 2, jnp.float32, 5, 0),
        (768, 12, jnp.bfloat16, 1, 0),
        (1600, 25, jnp.bfloat16, 5, 0),
        (32, 2, jnp.float32, 5, 4),
    ],
    ids=["tiny-f32-5", "124M-bf16-1", "1558M-bf16-5", "tiny-f32-batch4"],
)
def test_every_kernel_lowers_for_cuda_through_triton(n_embd, n_head, dtype, n_rows, batch):
    config = GPT2Config(n_layer=1, n_head=n_head, n_embd=n_embd)
    module = cuda_step(config, dtype, n_rows, batch).mlir_module()
    assert module.count(f"@{TRITON}") == 5  # five kernels for the one layer


def test_the_self_check_passes_and_fails_a_kernel_with_tf32_like_products(monkeypatch):
    assert pallas.self_check() is None
    exact = pallas.dot
    rounded = lambda a, b, trans_b=False: exact(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), trans_b)
    monkeypatch.setattr(pallas, "dot", rounded)
    assert "off by" in pallas.self_check()


def test_tiles_divide_every_gpt2_width_and_refuse_what_triton_cannot_take():
    for n in (768, 1024, 1280, 1600, 2304, 3072, 4800, 6400):
        assert pallas_tiles.tile(n) >= 16 and n % pallas_tiles.tile(n) == 0
        assert n % pallas_tiles.column_block(n) == 0
    assert pallas.unsupported(1600, 25, 128) is None
    assert "head_dim" in pallas.unsupported(16, 2, 128)
    assert "cache length" in pallas.unsupported(32, 2, 72)
    assert not pallas.fits(17, 64) and not pallas.fits(5, 72) and pallas.fits(16, 64)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="what a CPU is told; a GPU runs the kernels")
def test_kernels_pallas_is_refused_off_a_gpu_and_auto_takes_it_where_it_runs(monkeypatch, model, env):
    params = model.params
    with pytest.raises(SpecbenchError, match="the device is cpu") as e:
        cpu.choose(params, CONFIG.n_head, "pallas")
    assert e.value.setting == "kernels"
    assert cpu.choose(params, CONFIG.n_head, "auto") in ("cpu", "xla")
    assert_one_line_error(invoke("run", *env, "--kernels", "pallas", "--dry-run"), "--kernels", "Pallas")
    monkeypatch.setattr(cpu, "unavailable", lambda: "not a CPU (test)")
    monkeypatch.setattr(pallas, "unavailable", lambda: None)  # as on a Hopper GPU that passed
    assert cpu.choose(params, CONFIG.n_head, "auto") == "pallas"
    assert cpu.choose(params, 32, "auto") == "xla"  # head_dim 1: shapes the kernels cannot tile
    marked = layouts.for_decoding(params, "pallas")
    assert layouts.kernels_used(marked) == "pallas" and marked.layout is layouts.Layout.PALLAS
    assert jax.tree_util.tree_structure(layouts.as_loaded(marked)) == jax.tree_util.tree_structure(params)


def test_the_roofline_times_each_kernel_alone_with_the_bytes_it_moves(model):
    from rich.console import Console

    from specbench.cli.views import tables
    from specbench.measure import roofline
    from specbench.model.nets.network import Model

    marked = Model(model.name, CONFIG, layouts.pallas_layout(model.params), "random")
    rows = roofline.kernel_parts(marked, 64, iters=2, bound_gbps=100.0)
    assert [(r["part"], r["n_tokens_per_step"]) for r in rows] == [
        (p, n) for n in (1, 5) for p in roofline.PARTS
    ]
    e, item = CONFIG.n_embd, 4
    by = {(r["part"], r["n_tokens_per_step"]): r for r in rows}
    # a product moves its weights once (and its rows); attention the cache before pos = 64 - n
    assert by["ln+fc+gelu", 1]["bytes_per_step"] == item * (e * 4 * e + 4 * e + 2 * e + 16 * 5 * e)
    assert by["attention", 5]["bytes_per_step"] == item * (2 * 59 * e + 16 * 4 * e)
    for r in rows:
        assert r["t_step_s"] > 0 and r["achieved_gbps"] == pytest.approx(
            r["bytes_per_step"] / r["t_step_s"] / 1e9
        )
        assert r["t_over_limit"] == pytest.approx(r["t_step_s"] / (r["bytes_per_step"] / 100e9))
    assert all(by[p, 1]["t_over_t1"] == 1.0 for p in roofline.PARTS)
    console = Console(record=True, width=200)
    step = {**rows[0], "part": "step", "weights": "random", "device": "cpu", "peak_gbps": None}
    step |= {"measured_gbps": 1.0, "bound_source": "measured", "matmul_gflops": 1.0}
    tables.roofline_table([step, *rows], 64, console)
    text = console.export_text()
    assert "fused Pallas kernels" in text and "fc proj+residual" in text


def test_every_layer_runs_the_same_five_kernels_unrolled_or_scanned(model, monkeypatch):
    import re

    monkeypatch.delenv("SPECBENCH_PALLAS_LAYERS", raising=False)  # unrolled, whatever the caller set
    config = GPT2Config(n_layer=3, n_head=2, n_embd=32)
    module = cuda_step(config, jnp.float32, 5).mlir_module()
    configs = re.findall(rf"custom_call @{re.escape(TRITON)}\(.*?\) \{{(.*?)\}}\s*:", module, re.S)
    assert len(configs) == 15 and len(set(configs)) == 5  # the layer is an input: compiled once each
    tokens = jnp.asarray(np.random.default_rng(3).integers(0, 97, 30), jnp.int32)
    marked = layouts.pallas_layout(model.params)

    def decoder():  # a new function each time: JAX caches a trace by the function traced
        def decode(params):
            cache = gpt2.step(params, gpt2.init_cache(CONFIG, 64), tokens[:20], 0, CONFIG)[1]
            return gpt2.step(params, cache, tokens[20:25], jnp.int32(20), CONFIG)[0]

        return decode

    # calls at the top of the program: the kernels (interpreted, each wrapped by one_at_a_time's
    # custom_vmap) and the two cache writes; unrolled, 5 kernels a layer; scanned, none outside the loop
    kernel = ("pallas_call", "custom_vmap_call")
    calls = lambda: sum(e.primitive.name in kernel for e in jax.make_jaxpr(decoder())(marked).eqns)
    unrolled, unrolled_calls = jax.jit(decoder())(marked), calls()
    monkeypatch.setenv("SPECBENCH_PALLAS_LAYERS", "scan")
    scanned = jax.jit(decoder())(marked)
    assert unrolled_calls - calls() == 5 * CONFIG.n_layer
    np.testing.assert_allclose(scanned, unrolled, rtol=1e-6, atol=1e-6)
    monkeypatch.setenv("SPECBENCH_PALLAS_LAYERS", "rolled")
    with pytest.raises(SpecbenchError, match="unrolled, scan"):
        pallas_layers.layer_loop()
