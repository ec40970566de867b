"""int8 weights (--dtype int8): llama.cpp's Q8_0 blocks (kernels/q8_0.py) against a reference
written from ggml's C definition; the CPU kernel's Q8_0 product against NumPy's dequantize-then-
multiply and, bit for bit, the float32 kernel on the dequantized weights; a quantized model's
step logits against the pure-JAX path on the same quantized model, cached and uncached; SD = AR
of the quantized target at T = 0 over every method; every role at T = 1 follows the quantized
target (chi-square) and a broken verdict fails; the bytes a step reads; the command line."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model.decode import drafters
from specbench.model.decode.sampling import Warp
from specbench.model.decode.tree import Tree
from specbench.model.generate import autoregressive, speculative
from specbench.model.kernels import cpu, q8_0
from specbench.model.nets import gpt2, layouts, llama, network, quantized
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.layouts import Layout
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.network import Model

from conftest import TINY, assert_one_line_error, invoke, random_model
from exactness import DRAFTING, P_THRESHOLD, broken_accept_reject, noisy_copy, role_p_values, round_samples

PROMPT = [5, 17, 2, 88, 40, 3, 5, 17]


@pytest.fixture(scope="module")
def kernel():
    if why := cpu.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {why}")


def ggml_q8_0_row(row: np.ndarray) -> tuple[list[float], list[int]]:
    """ggml's quantize_row_q8_0_ref, block by block as its C loop does: amax, d = amax / 127,
    id = d ? 1 / d : 0, each code roundf(x id) (halves away from zero), d stored as float16."""
    scales, codes = [], []
    for b in range(0, len(row), 32):
        block = row[b : b + 32].astype(np.float32)
        amax = np.float32(max(abs(float(v)) for v in block))
        d = np.float32(amax / np.float32(127))
        inverse = np.float32(1) / d if d else np.float32(0)
        for v in block:
            x = float(np.float32(v * inverse))  # C's float product; roundf in double is exact here
            codes.append(int(math.copysign(math.floor(abs(x) + 0.5), x)))
        scales.append(float(np.float16(d)))
    return scales, codes


def test_q8_0_blocks_are_ggml_s():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((96, 5)) * rng.uniform(0.1, 3, (96, 1))).astype(np.float32)
    w[:32, 1] = 0  # a block of zeros: d = 0, codes 0
    w[32:64, 2] = np.r_[127, np.arange(31) - 15.5]  # d = 1: codes of halves, away from zero
    q = q8_0.quantize(w)
    assert q.codes.dtype == np.int8 and q.codes.shape == (96, 5) and q.scales.shape == (3, 5)
    for j in range(5):  # a column of w is a row of llama.cpp's [n_out, n_in] tensor
        scales, codes = ggml_q8_0_row(w[:, j])
        np.testing.assert_array_equal(q.scales[:, j], scales)
        np.testing.assert_array_equal(q.codes[:, j], codes)
    np.testing.assert_array_equal(q.codes[33:37, 2], [-16, -15, -14, -13])  # not to even: -16, -14, -14, -12
    np.testing.assert_array_equal(
        q8_0.dequantize(q), (q.codes.reshape(3, 32, 5) * q.scales[:, None]).reshape(96, 5)
    )
    assert np.abs(q8_0.dequantize(q) - w).max() <= np.abs(w).max() / 127  # half a step, and d's rounding
    with pytest.raises(ValueError, match="multiple of 32"):
        q8_0.quantize(np.ones((48, 2), np.float32))


SHAPES = [(1, 64, 192), (2, 96, 1030), (5, 768, 96), (17, 32, 33), (3, 64, 8200), (16, 256, 1030)]


@pytest.mark.parametrize("rows, n_in, n_out", SHAPES, ids=[f"{r}x{i}x{o}" for r, i, o in SHAPES])
def test_q8_0_products_are_the_dequantized_products(kernel, rows, n_in, n_out):
    rng = np.random.default_rng(rows + n_in + n_out)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    q = q8_0.quantize(rng.standard_normal((3, n_in, n_out)).astype(np.float32))
    b = rng.standard_normal((3, n_out)).astype(np.float32)
    w = q8_0.dequantize(q)
    got = np.asarray(cpu.matmul(x, cpu.pack_q8(q), n_out, b, 2))
    np.testing.assert_allclose(got, x.astype(np.float64) @ w[2] + b[2], rtol=1e-5, atol=np.sqrt(n_in) * 1e-5)
    # the same sums in the same order as the float32 kernel over the dequantized weights
    np.testing.assert_array_equal(got, np.asarray(cpu.matmul(x, cpu.pack(w), n_out, b, 2)))
    traced = jax.jit(lambda x, i: cpu.matmul(x, cpu.pack_q8(q), n_out, b, i))(x, jnp.int32(2))
    np.testing.assert_array_equal(traced, got)
    batch = jax.jit(jax.vmap(lambda x: cpu.matmul(x, cpu.pack_q8(q), n_out, b, 2)))(np.stack([x, x]))
    np.testing.assert_array_equal(batch[1], got)


LLAMA = LlamaConfig(
    n_layer=2, n_head=4, n_kv_head=2, n_embd=32, n_inner=64, n_vocab=97, n_ctx=128, tied=False
)


def llama_model(seed: int, scale: float = 8.0) -> Model:
    params = llama.init_params(LLAMA, seed)
    rng = np.random.default_rng(seed)
    params = jax.tree_util.tree_map(
        lambda x: x * scale if x.ndim >= 2 else x + 0.1 * rng.standard_normal(x.shape), params
    )
    return Model("llama", LLAMA, params, "random")


def int8(model: Model, kernel: bool = True) -> Model:
    """The model in Q8_0, in the CPU kernel's layout (or the plain one)."""
    params = quantized.quantize(model.params)
    return Model(model.name, model.config, layouts.kernel_layout(params) if kernel else params, model.source)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_quantized_step_is_the_quantized_model(kernel, family):
    model = random_model(TINY, 0, "t", scale=8) if family == "gpt2" else llama_model(0)
    forward = gpt2.gpt2 if family == "gpt2" else llama.llama  # uncached, XLA's products
    uncached = lambda m, t: np.asarray(forward(m.params, jnp.asarray(t), m.config))
    q, plain = int8(model), int8(model, kernel=False)
    assert quantized.format_of(q.params) == "q8_0" and layouts.as_weights(q.params).layout is Layout.KERNEL
    want = uncached(plain, PROMPT)  # XLA's products on the dequantized weights: the oracle
    cache = network.init_cache(model.config, 32, jnp.float32)
    logits, cache = network.step(q.params, cache, jnp.asarray(PROMPT[:5]), 0, model.config)
    np.testing.assert_allclose(logits, want[:5], rtol=1e-4, atol=1e-4)
    logits, _ = network.step(q.params, cache, jnp.asarray(PROMPT[5:]), 5, model.config)  # a 3-row verify step
    np.testing.assert_allclose(logits, want[5:], rtol=1e-4, atol=1e-4)
    # and it is not the float32 model: the quantization shows in the logits
    assert np.abs(uncached(model, PROMPT) - want).max() > 1e-3


@pytest.fixture(scope="module")
def int8_pair():
    target = random_model(TINY, 0, "t", scale=8)
    return int8(noisy_copy(target, 0.3, 1)), int8(target), target


METHODS = DRAFTING


@pytest.mark.parametrize("method", METHODS)
def test_greedy_int8_speculative_equals_int8_autoregressive(kernel, int8_pair, method):
    draft, target, float_target = int8_pair
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), **METHODS[method])
    ar, _ = autoregressive(target, PROMPT, 24)
    for K in (1, 4):
        sd, stats = speculative(draft, target, PROMPT, 24, K, drafter=drafter)
        np.testing.assert_array_equal(sd, ar, err_msg=f"{method} K={K}")
    if method == "chain":  # the plain path's AR of the same quantized model; a float draft; a batch; a tree
        np.testing.assert_array_equal(autoregressive(int8(float_target, kernel=False), PROMPT, 24)[0], ar)
        float_draft = Model(
            "d", draft.config, layouts.kernel_layout(noisy_copy(float_target, 0.3, 1).params), "r"
        )
        np.testing.assert_array_equal(speculative(float_draft, target, PROMPT, 24, 4, drafter=drafter)[0], ar)
        batch, _ = speculative(draft, target, [PROMPT, PROMPT[:5]], 24, 4, drafter=drafter)
        np.testing.assert_array_equal(batch[0], ar)
        tree = dataclasses.replace(drafter, tree=Tree.branching((2, 2, 1)))
        np.testing.assert_array_equal(speculative(draft, target, PROMPT, 24, 3, drafter=tree)[0], ar)
        assert 0 < stats.accepted.sum() < stats.evaluated.sum()


@pytest.mark.slow
def test_every_role_follows_the_quantized_target_and_a_broken_verdict_does_not(kernel, record_property):
    small = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=16, n_vocab=12)
    float_target = random_model(small, 12, "small-target", scale=30)
    target, draft = int8(float_target), int8(noisy_copy(float_target, 1.0, 3))
    drafter = drafters.model_drafter(draft.config)
    prompt, warp, K = [3, 7, 1], Warp(1.0), 3
    samples = round_samples(
        draft.params, target, prompt, warp, K, drafter, verdicts=(None, broken_accept_reject)
    )
    oracle = int8(float_target, kernel=False)  # the quantized target's exact distribution, on XLA
    p = [role_p_values(oracle, prompt, warp, *s, K) for s in samples]
    record_property("p_values", p)
    assert min(p[0].values()) > P_THRESHOLD, p[0]
    assert min(p[1].values()) < P_THRESHOLD, p[1]


def test_a_step_reads_the_codes_and_scales_not_the_floats():
    model = random_model(TINY, 0)
    q = layouts.kernel_layout(quantized.quantize(model.params))
    arrays = layouts.as_loaded(q)
    codes = [arrays["blocks"][p][n][layouts.Q8_KEY] for p, n in layouts.MATRICES] + [arrays[layouts.HEAD_Q8]]
    floats = sum(x.nbytes for x in jax.tree_util.tree_leaves(layouts.as_loaded(model.params)))
    matrices = (
        sum(arrays["blocks"][p][n]["weight"].nbytes for p, n in layouts.MATRICES) + arrays["wte"].nbytes
    )
    assert layouts.param_bytes(q) == floats - matrices + sum(q8_0.nbytes(c) for c in codes)
    assert sum(q8_0.nbytes(c) for c in codes) == matrices * 1.125 / 4  # a byte a weight, 4 a scale of 32


def test_a_width_that_is_not_whole_blocks_is_refused():
    narrow = random_model(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=16, n_vocab=12), 0)
    assert "multiple of 32" in quantized.problem(narrow.params)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantized.quantize(narrow.params)


def test_run_with_int8_records_each_models_weights(kernel, env, tmp_path):
    out = tmp_path / "rows.json"
    base = ("run", "-n", "8", "--K", "3", "--repeats", "1", "--no-save")
    result = invoke(*base, "--dtype", "int8", "--export-json", out)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert (row["dtype"], row["target_weights"], row["draft_weights"]) == ("int8", "q8_0", "q8_0")
    assert row["identical"] is True and row["kernels"] == "cpu"
    result = invoke(*base, "--target-dtype", "int8", "--export-json", tmp_path / "mixed.json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads((tmp_path / "mixed.json").read_text())
    assert (row["target_weights"], row["draft_weights"]) == ("q8_0", "float32")
    assert_one_line_error(
        invoke("run", "--dtype", "int8", "--kernels", "xla", "--dry-run"), "--kernels", "CPU kernel"
    )
    assert_one_line_error(invoke("run", "--dtype", "int4", "--dry-run"), "--dtype", "int8")
    assert_one_line_error(
        invoke("run", *env, "--dtype", "int8", "--dry-run"),
        "--dtype/--draft-dtype",
        "d cannot be int8",
        "multiple of 32",
    )


def test_the_header_names_each_models_weights_where_they_differ():
    from specbench.cli.views.render import weights_text

    mixed = {"dtype": "float32", "target_weights": "q8_0", "draft_weights": "float32"}
    assert weights_text(mixed) == "target q8_0, draft float32"
    assert weights_text({"dtype": "int8", "target_weights": "q8_0", "draft_weights": "q8_0"}) == "int8"
    assert weights_text({"dtype": "int8", "target_weights": "q8_0", "draft_weights": None}) == "int8"
