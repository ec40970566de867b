"""GPT-2's layer norm, defined once for every path that computes it: the network's (nets/gpt2.py),
and the Mosaic products' own prologue (mosaic.py). The Pallas kernels compute the same inside a
kernel (pallas.linear), where a jnp function cannot run."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def layer_norm(x, weight, bias, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) over the last axis, statistics in float32 whatever the weights'
    dtype, rounded to x's dtype, then scaled and shifted (Ba et al. 2016)."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.var(x32, axis=-1, keepdims=True)
    return ((x32 - mean) * lax.rsqrt(var + eps)).astype(x.dtype) * weight + bias
