"""The products every decoder-only network's step shares (GPT-2's, gpt2.py; the Llama family's,
llama.py): a block matrix times the rows, dispatched on the weights' layout (layouts.py); the
output head; and the write of a step's new keys and values into the cache.

Every block matrix is kept in HF's Conv1D orientation, [n_in, n_out] (stacked per layer), with an
optional bias: GPT-2 has one everywhere, Llama none, Qwen2 on its q/k/v product only.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from specbench.model.kernels import cpu
from specbench.model.nets.layouts import Layout, Weights, as_weights, unembedding


def linear(x, m, layout: Layout = Layout.HF, layer=None):
    """[n_seq, n_in] -> [n_seq, n_out]: x @ weight (+ bias where m has one), m's weight [n_in, n_out]
    in HF's Conv1D orientation. In the KERNEL layout m's weight, packed copy and bias are every
    layer's, stacked, and `layer` says which: a step of up to cpu.ROWS_MAX rows runs the CPU kernel
    on the packed copy, a longer one XLA's product on the weight. In the DECODE layout a 1-row step
    uses weight_t: weight.T [n_out, n_in] cut along n_in into [n_pieces, n_out, n_in / n_pieces],
    one product per piece, which XLA streams at the memory bound (docs/performance.md)."""
    weight, bias = m["weight"], m.get("bias")  # a checkpoint's shape: Llama's products have no bias
    plus = (lambda y, b: y) if bias is None else (lambda y, b: y + b)
    if layout is Layout.KERNEL:
        if x.shape[0] <= cpu.ROWS_MAX and cpu.reads(m["packed"]):
            return cpu.matmul(x, m["packed"], weight.shape[-1], bias, layer)
        return plus(x @ weight[layer], None if bias is None else bias[layer])
    if layout is not Layout.DECODE or x.shape[0] != 1:
        return plus(x @ weight, bias)
    weight_t = m["weight_t"]
    if weight_t.shape[0] == 1:
        return plus(x @ weight_t[0].T, bias)
    pieces = x.reshape(weight_t.shape[0], 1, weight_t.shape[2])  # [n_pieces, 1, n_in / n_pieces]
    # the barrier keeps XLA from fusing the sum into one product, which then copies its weight
    products = lax.optimization_barrier([p @ w.T for p, w in zip(pieces, weight_t)])
    return plus(sum(products), bias)


def head(params, x):
    """The output head: [n_seq, n_embd] -> [n_seq, n_vocab] float32 logits, x times the unembedding
    (layouts.unembedding: the embedding where it is tied, as GPT-2's). In the KERNEL layout a step of
    up to cpu.ROWS_MAX rows reads the head's packed copy with the CPU kernel. A draft's head may
    cover only some tokens (its RestrictedHead, V' ids: layouts.restrict_head); its logits are then
    [n_seq, V'], column j for token head.tokens[j]."""
    w = as_weights(params)
    out = unembedding(w.arrays) if w.head is None else w.head.wte
    packed = (
        None if w.layout is not Layout.KERNEL else w["head"]["packed"] if w.head is None else w.head.packed
    )
    if packed is not None and x.shape[0] <= cpu.ROWS_MAX and cpu.reads(packed):
        return cpu.matmul(x, packed, out.shape[0])
    return (x @ out.T).astype(jnp.float32)


def empty_cache(n_layer: int, heads: int, head_dim: int, max_len: int, dtype=jnp.float32) -> dict:
    """A decoder's cache of `heads` key/value heads, zeros, as write_cache keeps it: the keys
    transposed per head, k [n_layer, heads, hd, max_len], and v [n_layer, max_len, heads, hd].
    max_len 0 gives the uncached forward's empty cache."""
    k = jnp.zeros((n_layer, heads, head_dim, max_len), dtype)
    return {"k": k, "v": jnp.zeros((n_layer, max_len, heads, head_dim), dtype)}


def run_layers(layer, x, n_layers: int, taps=None):
    """lax.scan of layer(x, i) -> (x, ys) over the layers: (x, ys). With `taps` (static layer
    indices) also the residual stream at the input of each of those layers, concatenated
    [n_seq, len(taps) * width]: the features an EAGLE-3 head reads (nets/eagle3.py)."""
    if not taps:
        return lax.scan(layer, x, jnp.arange(n_layers))
    at = jnp.asarray(taps)

    def tapped(carry, i):
        x, kept = carry
        kept = jnp.where((at == i)[:, None, None], x[None], kept)
        x, ys = layer(x, i)
        return (x, kept), ys

    (x, kept), ys = lax.scan(tapped, (x, jnp.zeros((len(taps), *x.shape), x.dtype)), jnp.arange(n_layers))
    return x, ys, jnp.concatenate(list(kept), axis=-1)


class Features(enum.Enum):
    """What a step's `hidden` may ask beside True (the last block's output before the final norm)
    and a tuple of taps: that output after the final norm, what vLLM's DeepSeek and Qwen3-Next
    models hand their MTP layers (nets/mtp.py)."""

    NORMED = "the last block's output after the final norm"


def taps_of(hidden):
    """The layers a step's `hidden` asks the inputs of (a tuple: an EAGLE-3 head's taps), or None
    (False: no features; True: the last block's output, an EAGLE head's)."""
    return hidden if isinstance(hidden, tuple) else None


def check_cache_length(max_len: int, n_ctx: int) -> None:
    """ValueError unless a cache of max_len fits the model's context: 1..n_ctx."""
    if not 0 < max_len <= n_ctx:
        raise ValueError(f"cache length {max_len} must be in 1..n_ctx={n_ctx}")


def store(params, cache, new_kv, pos):
    """A step's new keys and values [L, n_seq, H, hd] (its blocks' `new_kv`) written into the cache
    at pos in one update after the blocks (inside their scan, a batch's per-sequence write copied
    the whole cache), split by head on a mesh (mesh.constrain_cache); an empty cache, the uncached
    forward's, keeps none. Every decoder's step and every EAGLE head's ends with it, then logits."""
    from specbench.model.nets import mesh

    if not cache["v"].shape[1]:
        return cache
    k_new, v_new = new_kv
    k, v = write_cache(cache["k"], cache["v"], jnp.transpose(k_new, (0, 2, 3, 1)), v_new, pos)
    return mesh.constrain_cache({"k": k, "v": v}, params)


class Rows(NamedTuple):
    """A step's `logits_at` asking `count` (static) rows from `start` (may be traced): a one-pass
    drafter's K rows of its 2K (decode/pard.py)."""

    start: object
    count: int


def logits(params, x, final_norm, config, logits_at=None):
    """A step's logits [n_seq, V] float32 from its last block's output x: the family's final norm,
    then the head; only the row `logits_at` ([1, V]) where one is asked (a padded prefill needs its
    last real row), or the rows a `Rows` asks ([count, V])."""
    if logits_at is not None:
        start, count = logits_at if isinstance(logits_at, Rows) else (logits_at, 1)
        x = lax.dynamic_slice_in_dim(x, start, count)
    return head(params, final_norm(params, x, config))


@jax.custom_batching.custom_vmap
def write_cache(k_cache, v_cache, k_new, v_new, pos):
    """The step's new keys [L, n_head, hd, n_seq] and values [L, n_seq, n_head, hd] written into
    the cache at pos, in place. Under vmap (a batch, each sequence at its own pos) the write is a
    loop of the same in-place updates, one per sequence: the scatter vmap would make of it copied
    the whole cache every step (docs/performance.md)."""
    k = lax.dynamic_update_slice(k_cache, k_new, (0, 0, 0, pos))
    v = lax.dynamic_update_slice(v_cache, v_new, (0, pos, 0, 0))
    return k, v


@write_cache.def_vmap
def _write_cache_batched(axis_size, in_batched, k_cache, v_cache, k_new, v_new, pos):
    batched = lambda x, b: x if b else jnp.broadcast_to(jnp.asarray(x), (axis_size,) + jnp.shape(x))
    k_cache, v_cache, k_new, v_new, pos = map(batched, (k_cache, v_cache, k_new, v_new, pos), in_batched)

    def one(b, kv):
        k, v = kv
        k = lax.dynamic_update_slice(k, k_new[b][None], (b, 0, 0, 0, pos[b]))
        v = lax.dynamic_update_slice(v, v_new[b][None], (b, 0, pos[b], 0, 0))
        return k, v

    return lax.fori_loop(0, axis_size, one, (k_cache, v_cache)), (True, True)


def layer_params(w: Weights, i):
    """Block i's parameters, sliced out of the stacked ones. In the KERNEL layout the four matrices
    stay stacked, for the kernel to read layer i in place (linear's `layer`)."""
    take = lambda tree: jax.tree_util.tree_map(lambda a: a[i], tree)
    blocks = w["blocks"]
    if w.layout is not Layout.KERNEL:
        return take(blocks)
    return {
        "ln_1": take(blocks["ln_1"]),
        "attn": blocks["attn"],
        "ln_2": take(blocks["ln_2"]),
        "mlp": blocks["mlp"],
    }
