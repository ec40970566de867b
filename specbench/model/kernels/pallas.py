"""specbench's fused Pallas kernels for a GPU decode step: five kernels a layer, for steps of up to
ROWS rows (a decode step, a verify step of K+1 or a token tree's nodes).

    qkv = ln_1(x) @ W_attn + b_attn                     linear(norm=ln_1)
    a   = attention(q, the cache and the new k, v)      attention
    x   = x + a @ W_proj + b_proj                       linear(residual=x)
    h   = gelu(ln_2(x) @ W_fc + b_fc)                   linear(norm=ln_2, activation=gelu)
    x   = x + h @ W_mproj + b_mproj                     linear(residual=x)

Why: XLA ran GPT-2's decode step as a dozen small kernels a layer, 5.8x the 1558M bf16 step's HBM
bound (docs/gpu.md, issue 48); a memory-bound step should cost one read of every weight.

How:
- Every kernel pads its rows to ROWS = 16 (Triton's product needs 16; a step of 16 reads what 1 does).
- A product's grid runs over blocks of output columns; each program walks its column panel down
  n_in in chunks of `tile(n_in)` rows, every weight read once, the norm before it per chunk.
- The weights stay stacked [n_layer, ...] as loaded, and the layer's index is an input each kernel
  reads: nothing is sliced or copied, and every layer runs the same five kernels (compiled once
  per step shape). The layers are unrolled, or scanned (pallas_layers.py).
- Attention runs a program per head over the cache in blocks of `tile(max_len)` keys, only those
  before pos (an online softmax, Milakov and Gimelshein 2018), then over the step's own keys under
  `sees` (causal, or a token tree's ancestors).

Backends: Pallas's Triton lowering (deprecated since JAX 0.11), or for the products mosaic.py's
swap-AB Mosaic GPU kernels (SPECBENCH_PALLAS_BACKEND=mosaic, pallas_layers.product). On the CPU
every kernel runs in interpret mode, checked against gpt2.gpt2; the tests also lower each for CUDA
(lowering_for).
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from specbench.model.kernels.pallas_tiles import column_block, tile, tiles

ROWS = 16
"""Rows of every kernel's step: a step of n <= ROWS tokens is padded to ROWS (Triton's dot needs at
least 16 rows; on a memory-bound GPU 16 rows cost what 1 costs). Longer steps (a prefill) run XLA."""


def unsupported(n_embd: int, n_head: int, max_len: int | None = None) -> str | None:
    """None when the kernels tile a GPT-2 of this width (and a cache of max_len, where given; a
    step over another cache length falls back to XLA's path, `fits`); else why not."""
    hd = n_embd // n_head
    if not (tile(n_embd) and tile(hd, hd) == hd):
        return f"n_embd {n_embd} and head_dim {hd} must be multiples of 16, head_dim a power of two"
    if max_len is not None and not tile(max_len):
        return f"the cache length {max_len} must be a multiple of 16"
    return None


def fits(n_rows: int, max_len: int) -> bool:
    """Whether a step of n_rows tokens over a cache of max_len runs the kernels (else XLA's path)."""
    return n_rows <= ROWS and tile(max_len) > 0


@functools.cache
def unavailable() -> str | None:
    """None where the kernels can run on this machine's device and pass self_check(); else one line
    saying why not. They run on a Hopper GPU (compute capability 9.x), the one they were written for."""
    device = jax.devices()[0]
    if device.platform != "gpu":
        return f"the device is {device.platform} (they are for a GPU; a CPU runs them interpreted, in tests)"
    capability = str(getattr(device, "compute_capability", ""))
    if not capability.startswith("9."):
        return f"{device.device_kind} is not a Hopper GPU (compute capability {capability or 'unknown'})"
    try:
        error = self_check()
    except Exception as e:  # noqa: BLE001 -- any failure to lower, compile or run means: do not use them
        return f"their self-check failed ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    return f"their self-check gave {error}" if error else None


def self_check(dtype=jnp.float32) -> str | None:
    """Each kernel on random inputs of odd sizes against plain JAX: the two products (with a norm and
    gelu-like activation, and with a residual) and attention at pos 37 of a cache of 64 over 5 of the
    16 rows. None when every result is within 1e-3 of its reference; else what differed."""
    rng = np.random.default_rng(0)
    normal = lambda *s: jnp.asarray(rng.standard_normal(s), dtype)
    n_in, n_out, n_head, hd, max_len, pos = 96, 48, 2, 16, 64, 37
    x, w, b, g, beta, r = (
        normal(ROWS, n_in),
        normal(2, n_in, n_out),
        normal(2, n_out),
        normal(2, n_in),
        normal(2, n_in),
        normal(ROWS, n_out),
    )
    act = jnp.tanh
    mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    normed = (x - mean) / jnp.sqrt(var + 1e-5) * g[1] + beta[1]
    products = {
        "a normed product": (
            linear(x, w, b, 1, norm={"weight": g, "bias": beta}, activation=act),
            act(normed @ w[1] + b[1]),
        ),
        "a product with a residual": (linear(x, w, b, 0, residual=r), r + x @ w[0] + b[0]),
    }
    qkv, kc, vc = (
        normal(ROWS, 3 * n_head * hd),
        normal(2, n_head, hd, max_len),
        normal(2, max_len, n_head, hd),
    )
    sees = padded_sees(np.tril(np.ones((5, 5), bool)))
    q, k, v = (qkv[:, i * n_head * hd : (i + 1) * n_head * hd].reshape(ROWS, n_head, hd) for i in range(3))
    keys = jnp.concatenate([jnp.transpose(kc[1], (2, 0, 1))[:pos], k])  # [pos + ROWS, n_head, hd]
    values = jnp.concatenate([vc[1][:pos], v])
    seen = np.concatenate([np.ones((ROWS, pos), bool), sees.astype(bool)], axis=1)
    scores = jnp.where(seen[:, None], jnp.einsum("qhd,khd->qhk", q, keys) / np.sqrt(hd), -jnp.inf)
    expected = jnp.einsum("qhk,khd->qhd", jax.nn.softmax(scores, -1), values).reshape(ROWS, -1)
    products["attention"] = (attention(qkv, kc, vc, 1, jnp.int32(pos), jnp.asarray(sees), n_head), expected)
    for name, (got, want) in products.items():
        err = float(jnp.abs(jnp.asarray(got, jnp.float32) - jnp.asarray(want, jnp.float32)).max())
        if not err <= 1e-3:
            return f"{name} off by {err:.2g}"
    return None


_platform: list[str] = []  # set by lowering_for: the platform a program is traced for, if not this one's


@contextlib.contextmanager
def lowering_for(platform: str):
    """Trace the kernels for `platform` ("cuda") instead of the default backend's: how the tests
    lower them for CUDA on a machine without a GPU (jax.export)."""
    _platform.append(platform)
    try:
        yield
    finally:
        _platform.pop()


def traced_for() -> str:
    """The platform the kernels are traced for: lowering_for's, else the default backend's."""
    return _platform[-1] if _platform else jax.default_backend()


def call(kernel, **kwargs):
    """pl.pallas_call for the platform traced for: interpreted on the CPU, through Triton on a GPU.
    Interpreted, a batch (vmap) runs its calls one after another: Pallas's own batching of an
    interpreted kernel copied the whole batch's output at each program, so that 20,000 sequences
    took minutes (a GPU keeps Pallas's batching: the batch becomes a grid axis)."""
    if traced_for() == "cpu":
        return one_at_a_time(pl.pallas_call(kernel, interpret=True, **kwargs))
    return pl.pallas_call(
        kernel,
        compiler_params=pltriton.CompilerParams(num_warps=tiles().warps, num_stages=tiles().stages),
        **kwargs,
    )


def one_at_a_time(fn):
    """fn (arrays -> one array), whose vmap is lax.map over the batched arguments."""
    wrapped = jax.custom_batching.custom_vmap(fn)

    @wrapped.def_vmap
    def batched(axis_size, in_batched, *args):
        def one(items):
            it = iter(items)
            return wrapped(*[next(it) if b else a for a, b in zip(args, in_batched)])

        return lax.map(one, [a for a, b in zip(args, in_batched) if b]), True

    return wrapped


def dot(a, b, trans_b: bool = False):
    """a @ b (or a @ b.T) in float32, exact float32 products for float32 operands (a GPU's TF32
    default broke cached == uncached: docs/gpu.md)."""
    precision = lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
    dims = (((1,), (1,)), ((), ())) if trans_b else (((1,), (0,)), ((), ()))
    return lax.dot_general(a, b, dims, precision=precision, preferred_element_type=jnp.float32)


# ---------------------------------------------------------------------------------------------
# The products: x [ROWS, n_in] @ w[layer] [n_in, n_out] + b[layer], with what is fused around them.


def _linear_kernel(*refs, n_in, norm, activation, residual, eps):
    it = iter(refs)
    layer, x_ref = next(it)[0], next(it)
    g_ref, beta_ref = (next(it), next(it)) if norm else (None, None)
    w_ref, b_ref = next(it), next(it)
    r_ref = next(it) if residual else None
    o_ref = next(it)
    bk = tile(n_in)
    chunks = n_in // bk
    f32 = lambda a: a.astype(jnp.float32)
    x_chunk = lambda c: f32(x_ref[:, pl.ds(c * bk, bk)])  # [ROWS, bk]
    if norm:  # layer norm's statistics in float32, two passes (as gpt2.layer_norm's jnp.var)
        mean = (
            lax.fori_loop(0, chunks, lambda c, s: s + x_chunk(c).sum(1), jnp.zeros(ROWS, jnp.float32)) / n_in
        )
        sq = lambda c, s: s + ((x_chunk(c) - mean[:, None]) ** 2).sum(1)
        rstd = lax.rsqrt(lax.fori_loop(0, chunks, sq, jnp.zeros(ROWS, jnp.float32)) / n_in + eps)

    def accumulate(c, acc):
        x = x_chunk(c)
        if norm:  # as gpt2.layer_norm: normalised in float32, rounded to x's dtype, then scaled
            x = ((x - mean[:, None]) * rstd[:, None]).astype(x_ref.dtype).astype(jnp.float32)
            x = (
                x * f32(g_ref[layer, pl.ds(c * bk, bk)])[None, :]
                + f32(beta_ref[layer, pl.ds(c * bk, bk)])[None, :]
            )
        w = w_ref[layer, pl.ds(c * bk, bk), :]  # [bk, BN]
        return acc + dot(x.astype(w.dtype), w)

    # the epilogue in float32 (Triton's lowering has no bfloat16 arithmetic), rounded once at the end
    acc = lax.fori_loop(0, chunks, accumulate, jnp.zeros(o_ref.shape, jnp.float32))
    y = acc + f32(b_ref[layer, :])[None, :]
    if activation is not None:
        y = activation(y)
    if residual:
        y = f32(r_ref[...]) + y
    o_ref[...] = y.astype(o_ref.dtype)


def layer_index(layer) -> jax.Array:
    """A layer's index as the kernels take it: an int32 [1] input, read in the kernel, so that every
    layer runs the same kernel (compiled once per shape, not once per layer)."""
    return jnp.reshape(jnp.asarray(layer, jnp.int32), (1,))


def linear(x, weight, bias, layer, norm=None, activation=None, residual=None, eps: float = 1e-5):
    """activation(layer_norm(x) @ weight[layer] + bias[layer]) + residual, one kernel.

    x [ROWS, n_in]; weight [n_layer, n_in, n_out], bias [n_layer, n_out] (HF's Conv1D orientation,
    stacked); layer an int (may be traced); norm {"weight", "bias"} [n_layer, n_in] or None;
    activation an elementwise function (gpt2.gelu) or None; residual [ROWS, n_out] or None.
    Returns [ROWS, n_out] in x's dtype. Each program's blocks span every layer, and the kernel
    reads its layer's rows of them: blocks are where a program's pointers start, nothing is
    loaded until read."""
    n_layer, n_in, n_out = weight.shape
    bn = column_block(n_out)
    whole = lambda *shape: pl.BlockSpec(shape, lambda j: (0,) * len(shape))
    specs, args = [whole(1), whole(ROWS, n_in)], [layer_index(layer), x]
    if norm is not None:
        specs += [whole(n_layer, n_in), whole(n_layer, n_in)]
        args += [norm["weight"], norm["bias"]]
    specs += [
        pl.BlockSpec((n_layer, n_in, bn), lambda j: (0, 0, j)),
        pl.BlockSpec((n_layer, bn), lambda j: (0, j)),
    ]
    args += [weight, bias]
    if residual is not None:
        specs.append(pl.BlockSpec((ROWS, bn), lambda j: (0, j)))
        args.append(residual)
    kernel = functools.partial(
        _linear_kernel,
        n_in=n_in,
        norm=norm is not None,
        activation=activation,
        residual=residual is not None,
        eps=eps,
    )
    return call(
        kernel,
        grid=(n_out // bn,),
        in_specs=specs,
        out_specs=pl.BlockSpec((ROWS, bn), lambda j: (0, j)),
        out_shape=jax.ShapeDtypeStruct((ROWS, n_out), x.dtype),
    )(*args)


# ---------------------------------------------------------------------------------------------
# Attention over the cache: a program per head.


def _attention_kernel(layer_ref, pos_ref, sees_ref, q_ref, k_ref, v_ref, kc_ref, vc_ref, o_ref, *, bs, scale):
    f32 = lambda a: a.astype(jnp.float32)
    q = f32(q_ref[...])  # [ROWS, hd]
    pos, layer = pos_ref[0], layer_ref[0]

    def block(s, carry):  # keys s bs .. s bs + bs - 1 of the cache, an online softmax
        m, total, acc = carry
        keys = f32(kc_ref[layer, :, pl.ds(s * bs, bs)])  # [hd, bs] (the cache keeps K^T per head)
        scores = dot(q, keys) * scale  # [ROWS, bs]
        scores = jnp.where(
            (s * bs + lax.broadcasted_iota(jnp.int32, scores.shape, 1)) < pos, scores, -jnp.inf
        )
        m_new = jnp.maximum(m, scores.max(1))
        m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # no key yet: keep every weight at 0
        w = jnp.exp(scores - m_safe[:, None])
        rescale = jnp.exp(m - m_safe)
        acc = acc * rescale[:, None] + dot(w, f32(vc_ref[layer, pl.ds(s * bs, bs), :]))
        return m_new, total * rescale + w.sum(1), acc

    start = (
        jnp.full(ROWS, -jnp.inf, jnp.float32),
        jnp.zeros(ROWS, jnp.float32),
        jnp.zeros(q.shape, jnp.float32),
    )
    m, total, acc = lax.fori_loop(0, (pos + bs - 1) // bs, block, start)
    # the step's own keys, each row under its mask (every row sees itself, so m is finite after)
    scores = jnp.where(
        sees_ref[...] != 0, dot(q, f32(k_ref[...]), trans_b=True) * scale, -jnp.inf
    )  # [ROWS, ROWS]
    m_new = jnp.maximum(m, scores.max(1))
    w = jnp.exp(scores - m_new[:, None])
    rescale = jnp.exp(m - m_new)
    acc = acc * rescale[:, None] + dot(w, f32(v_ref[...]))
    total = total * rescale + w.sum(1)
    o_ref[...] = (acc / total[:, None]).astype(o_ref.dtype)


def attention(qkv, k_cache, v_cache, layer, pos, sees, n_head: int):
    """Each of the step's ROWS queries over the cache entries before pos and over the step's own
    keys it `sees` ([ROWS, ROWS] int32, every row seeing itself); equal to
    attention.cached_attention. qkv [ROWS, 3 n_embd] as the QKV product gives it; k_cache
    [n_layer, n_head, hd, max_len] and v_cache [n_layer, max_len, n_head, hd] (gpt2.py's layout),
    read at `layer` (an int, may be traced). Returns [ROWS, n_embd] in qkv's dtype."""
    hd = qkv.shape[1] // (3 * n_head)
    n_layer, max_len = v_cache.shape[:2]
    head = lambda part: pl.BlockSpec((ROWS, hd), lambda h: (0, part * n_head + h))
    whole = lambda shape: pl.BlockSpec(shape, lambda h: (0,) * len(shape))
    kernel = functools.partial(_attention_kernel, bs=tile(max_len), scale=1.0 / math.sqrt(hd))
    return call(
        kernel,
        grid=(n_head,),
        in_specs=[
            whole((1,)),
            whole((1,)),
            whole((ROWS, ROWS)),
            head(0),
            head(1),
            head(2),
            pl.BlockSpec((n_layer, None, hd, max_len), lambda h: (0, h, 0, 0)),
            pl.BlockSpec((n_layer, max_len, None, hd), lambda h: (0, 0, h, 0)),
        ],
        out_specs=pl.BlockSpec((ROWS, hd), lambda h: (0, h)),
        out_shape=jax.ShapeDtypeStruct((ROWS, n_head * hd), qkv.dtype),
    )(layer_index(layer), layer_index(pos), sees, qkv, qkv, qkv, k_cache, v_cache)


def padded_sees(sees: np.ndarray) -> np.ndarray:
    """[n, n] bool (which new tokens each new token sees) padded to [ROWS, ROWS] int32: a padding
    row sees only itself, and no real row sees a padding row."""
    out = np.eye(ROWS, dtype=np.int32)
    n = sees.shape[0]
    out[:n, :n] = sees
    return out
