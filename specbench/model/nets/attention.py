"""Attention over GPT-2's fixed-size KV cache (gpt2.py): the new tokens of a step attend over the
cached keys and values before pos and, causally, over their own.

The cache holds the keys transposed per head, k_cache [n_head, head_dim, max_len], and the values
as v_cache [max_len, n_head, head_dim]. A step of one token (a decode step) and of a few (a verify
step, a draft's 2-token step, on the CPU a prefill the kernel serves) attend by multiply-and-sum
over the cache in its stored order; a longer one, and the uncached forward, by batched products
over the heads (docs/performance.md).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from specbench.model.kernels import cpu

FEW_TOKENS = 16
"""A cached step of up to this many new tokens (a verify step, a draft's 2-token step) attends by
few_token_attention, and on the CPU so does a prefill of up to cpu.ROWS_MAX tokens; a longer
one by batched products over the heads (docs/performance.md, "Prefill")."""


def cached_attention(q, k, v, k_cache, v_cache, pos, tree=None, first: int = 0):
    """The new tokens' attention over the cache entries before pos and over each other, causally,
    or with a token tree (tree.Tree) each over its own ancestors only (tree.ancestors).

    q/k/v [n_seq, n_head, hd] at positions pos..pos+n_seq-1; k_cache [n_head, hd, max_len] and
    v_cache [max_len, n_head, hd] hold positions 0..pos-1 (entries from pos on are stale and
    masked). One softmax runs over both score blocks, so this equals causal attention over the cache
    with k, v written at pos; the cache is only read here and written once per step, after all
    layers (step). With an empty cache (max_len 0) it is plain causal self-attention: the uncached
    forward, gpt2(). A prefill at pos 0 (a Python int, known when traced) reads no cache entry.
    `first` (static): keys at positions before it are seen by no token but their own (an EAGLE-3
    head's position 0, which has no feature: nets/eagle3.py).
    """
    n_seq, cached = q.shape[0], v_cache.shape[0] > 0
    scale = 1.0 / math.sqrt(q.shape[-1])
    # which new tokens each new token sees: a constant of the program (the tree's shape is static)
    sees = np.tril(np.ones((n_seq, n_seq), bool)) if tree is None else tree.ancestors
    if first:  # a key before `first` is its own token's only (with pos 0: the new rows' first ones)
        sees = sees & ((pos + jnp.arange(n_seq) >= first)[None, :] | np.eye(n_seq, dtype=bool))
    if cached and isinstance(pos, int) and pos == 0:  # a prefill into an empty cache: none of it is read
        k_cache, v_cache = k_cache[..., :0], v_cache[:0]
    if cached and n_seq == 1:
        return one_token_attention(q, k, v, k_cache, v_cache, pos, scale, first)
    if cached and n_seq <= (cpu.ROWS_MAX if jax.default_backend() == "cpu" else FEW_TOKENS):
        return few_token_attention(q, k, v, k_cache, v_cache, pos, scale, sees, first)
    # a long prefill, or the uncached forward: batched products over heads (the keys are cached head-major)
    max_len = v_cache.shape[0]
    v_heads = jnp.swapaxes(v_cache, 0, 1)  # [n_head, max_len, hd]
    q_heads = jnp.swapaxes(q, 0, 1)  # [n_head, n_seq, hd]
    old = jnp.einsum("hqd,hdk->hqk", q_heads, k_cache).astype(jnp.float32) * scale  # [n_head, n_seq, max_len]
    new = jnp.einsum("qhd,khd->hqk", q, k).astype(jnp.float32) * scale  # [n_head, n_seq, n_seq]
    old = jnp.where(seen(max_len, pos, first)[None, None, :], old, -jnp.inf)
    new = jnp.where(sees[None], new, -jnp.inf)
    weights = jax.nn.softmax(jnp.concatenate([old, new], axis=-1), axis=-1).astype(v.dtype)
    return jnp.einsum("hqk,hkd->qhd", weights[..., :max_len], v_heads) + jnp.einsum(
        "hqk,khd->qhd", weights[..., max_len:], v
    )


def seen(max_len: int, pos, first: int = 0):
    """Which cache entries a step at pos reads [max_len]: positions first .. pos - 1."""
    where = jnp.arange(max_len)
    return (where < pos) & (where >= first)


def one_token_attention(q, k, v, k_cache, v_cache, pos, scale, first: int = 0):
    """cached_attention for one new token, as multiply-and-sum over the cache in its stored order:
    no transposed copy of the cache, and the output comes out of a reduction over the values with
    the new one appended, which the next product reads as it is (docs/performance.md)."""
    f32 = lambda a: a.astype(jnp.float32)  # sums in float32 whatever the cache's dtype
    q = f32(q[0])  # [n_head, hd]
    old = (f32(k_cache) * q[:, :, None]).sum(1) * scale  # [n_head, max_len]
    old = jnp.where(seen(old.shape[1], pos, first), old, -jnp.inf)
    new = (f32(k[0]) * q).sum(1, keepdims=True) * scale  # [n_head, 1]
    weights = jax.nn.softmax(jnp.concatenate([old, new], axis=1), axis=1).T  # [max_len + 1, n_head]
    values = jnp.concatenate([v_cache, v])  # [max_len + 1, n_head, hd]
    return (weights[:, :, None] * f32(values)).sum(0, keepdims=True).astype(v.dtype)  # [1, n_head, hd]


def few_token_attention(q, k, v, k_cache, v_cache, pos, scale, sees, first: int = 0):
    """cached_attention for a few new tokens (a verify step, a draft's 2-token step), as multiply-and-sum
    over the cache in its stored order: no transposed copy of the cache and no small batched
    product per head, and the output comes out of one reduction over the values with the new ones
    appended (docs/performance.md). sees [n_seq, n_seq]: which new tokens each new token attends to."""
    max_len = v_cache.shape[0]
    f32 = lambda a: a.astype(jnp.float32)  # sums in float32 whatever the cache's dtype
    q = f32(q)  # [n_seq, n_head, hd]
    old = (f32(k_cache)[None] * q[..., None]).sum(2) * scale  # [n_seq, n_head, max_len]
    old = jnp.where(seen(max_len, pos, first), old, -jnp.inf)
    new = (q[:, None] * f32(k)[None]).sum(-1) * scale  # [n_seq (query), n_seq (key), n_head]
    new = jnp.where(sees[..., None], new, -jnp.inf)
    weights = jax.nn.softmax(jnp.concatenate([old, jnp.swapaxes(new, 1, 2)], axis=2), axis=2)
    values = f32(jnp.concatenate([v_cache, v]))  # [max_len + n_seq, n_head, hd]
    out = (jnp.swapaxes(weights, 1, 2)[..., None] * values[None]).sum(1)  # [n_seq, n_head, hd]
    return out.astype(v.dtype)
