"""A GPT-2 layer, and the layers, through the fused Pallas kernels (pallas.py): five kernels a
layer over a step of up to ROWS tokens, the layers unrolled or scanned (layer_loop). gpt2.py runs
a Pallas-layout step's blocks through `blocks`."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from specbench import environment
from specbench.model.kernels import mosaic
from specbench.model.kernels.pallas import ROWS, attention, linear, padded_sees


def block(x, blocks, layer, cache, pos, sees, n_head: int, eps: float, activation):
    """Transformer block `layer` over x [ROWS, n_embd] with the five kernels; blocks are the stacked
    parameters (params["blocks"]). Returns (x, k, v), k and v [ROWS, n_head, hd] in the cache's dtype."""
    n_embd = x.shape[1]
    attn, mlp = blocks["attn"], blocks["mlp"]
    qkv = product(x, attn["c_attn"], layer, norm=blocks["ln_1"], eps=eps)
    a = attention(qkv, cache["k"], cache["v"], layer, pos, sees, n_head)
    x = product(a, attn["c_proj"], layer, residual=x)
    h = product(x, mlp["c_fc"], layer, norm=blocks["ln_2"], activation=activation, eps=eps)
    x = product(h, mlp["c_proj"], layer, residual=x)
    heads = lambda part: qkv[:, part * n_embd : (part + 1) * n_embd].reshape(ROWS, n_head, n_embd // n_head)
    return x, heads(1).astype(cache["k"].dtype), heads(2).astype(cache["v"].dtype)


def backend() -> str:
    """SPECBENCH_PALLAS_BACKEND: "triton" (where unset) or "mosaic" (mosaic.py's products). The
    one place the setting is read (layouts.py and the command line ask here)."""
    return environment.PALLAS_BACKEND.get()


def backend_chosen() -> str | None:
    """The backend where SPECBENCH_PALLAS_BACKEND names one, None where it is left to its default."""
    return backend() if environment.PALLAS_BACKEND.given() else None


def product(x, m: dict, layer, **fused):
    """A block matrix `m` ({"weight", "bias"}, and with the mosaic backend "weight_t") times x
    through the chosen backend's kernel: mosaic.linear where it is chosen and takes the shape and
    dtype, else pallas.linear. `fused`: the norm, activation and residual (pallas.linear's)."""
    n_in, n_out = m["weight"].shape[1:]
    if backend() == "mosaic" and mosaic.unsupported(n_in, n_out, m["weight"].dtype) is None:
        return mosaic.linear(x, m["weight"], m["bias"], layer, weight_t=m.get("weight_t"), **fused)
    return linear(x, m["weight"], m["bias"], layer, **fused)


LAYERS = environment.PALLAS_LAYERS.values
"""How blocks runs the layers: unrolled (the default; on an H200 XLA's step ran 16-20% faster as a
Python loop than as lax.scan, docs/gpu.md) or lax.scan (SPECBENCH_PALLAS_LAYERS=scan: the
comparison, and the fallback if compiling an unrolled step takes too long)."""


def layer_loop() -> str:
    """SPECBENCH_PALLAS_LAYERS, one of LAYERS (unrolled where unset)."""
    return environment.PALLAS_LAYERS.get()


def blocks(params, x, cache, pos, sees, n_head: int, eps: float, activation):
    """gpt2.blocks through the kernels: x [n, n_embd] (n <= ROWS) padded to ROWS, every layer the
    cache holds in turn (layer_loop), the padding dropped. Returns (x, (k, v)), k and v
    [L, n, n_head, hd]. Every layer runs the same five kernels, its index an input."""
    n = x.shape[0]
    x = jnp.pad(x, ((0, ROWS - n), (0, 0)))
    sees = jnp.asarray(padded_sees(sees))

    def one(x, layer):
        x, k, v = block(x, params["blocks"], layer, cache, pos, sees, n_head, eps, activation)
        return x, (k[:n], v[:n])

    if layer_loop() == "scan":
        x, (k, v) = lax.scan(one, x, jnp.arange(cache["k"].shape[0]))
        return x[:n], (k, v)
    ks, vs = [], []
    for layer in range(cache["k"].shape[0]):
        x, (k, v) = one(x, layer)
        ks.append(k)
        vs.append(v)
    return x[:n], (jnp.stack(ks), jnp.stack(vs))
