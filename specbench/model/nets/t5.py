"""T5 in pure JAX, with a fixed-size decoder cache and cross-attention keys computed once.

The model is T5 as in Raffel et al. (2020), "Exploring the Limits of Transfer Learning with a
Unified Text-to-Text Transformer", and T5 v1.1 / Flan-T5 (gated-GELU feed-forward, untied head),
in the style of gpt2.py: one plain function per part, shapes in comments. Beside GPT-2 it has

- RMS layer norms without bias or mean (rms_norm);
- no position embeddings: a learned bias per head on each attention score, looked up by the
  bucket of the key's offset from the query (bidirectional in the encoder, causal in the decoder),
  computed in the first block and shared by every block of its stack (position_bias);
- unscaled attention scores (T5 folds 1/sqrt(d_kv) into its initialisation);
- an encoder, run once per source; the decoder's blocks each attend to its output through
  cross-attention, whose keys and values are computed once per source (cross_kv).

Parameters, every block's stacked on a leading axis, matrices [n_in, n_out] (weights.py reads a
Hugging Face checkpoint into them: t5_weights.py):

    {"shared": [V, d],
     "encoder": {"attn": {"q", "k", "v": [L, d, H dk], "o": [L, H dk, d]}, "ln_attn": [L, d],
                 "ff": {"wi": [L, d, ff]} or {"wi_0", "wi_1"}, with "wo": [L, ff, d], "ln_ff": [L, d],
                 "bias": [buckets, H], "ln_final": [d]},
     "decoder": the same, plus "cross": {"q", "k", "v", "o"} and "ln_cross" [L, d],
     "lm_head": [d, V] (an untied head, v1.1 / Flan as saved before transformers 5; else shared.T)}

The decoder's step reads and writes `cache = {"k", "v": [L, max_len, H, dk]}` at pos, as gpt2.step
does: one program per number of new tokens, the position traced.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclasses.dataclass(frozen=True)
class T5Config:
    """Hyperparameters; hashable, so it is static under jit."""

    n_vocab: int
    d_model: int
    d_kv: int
    d_ff: int
    n_layer: int  # encoder blocks
    n_decoder_layer: int
    n_head: int
    num_buckets: int = 32
    max_distance: int = 128
    gated: bool = True  # gated-GELU feed-forward (v1.1, Flan); False: ReLU (original T5)
    scale_decoder_outputs: bool = False  # the decoder's output times d_model^-0.5 (original T5's tied head)
    eps: float = 1e-6
    decoder_start: int = 0  # the token the decoder starts from (T5's pad)
    mask_token: int | None = None  # every config's: a PARD draft's mask (decode/pard.py); no T5 has one

    @property
    def width(self) -> int:
        """The residual stream's width (every config has one: families.py): d_model."""
        return self.d_model

    @property
    def inner(self) -> int:
        return self.n_head * self.d_kv

    @property
    def heads(self) -> int:
        """The heads a step computes (never padded: a mesh must split them)."""
        return self.n_head

    @property
    def n_params(self) -> int:
        """Parameters of a model of this config (init_params's count), for `specbench models`."""
        d, inner, ff, V = self.d_model, self.inner, self.d_ff, self.n_vocab
        ff_params = (3 if self.gated else 2) * d * ff
        encoder = self.n_layer * (4 * d * inner + ff_params + 2 * d)
        decoder = self.n_decoder_layer * (8 * d * inner + ff_params + 3 * d)
        head = 0 if self.scale_decoder_outputs else d * V
        return V * d + encoder + decoder + 2 * self.num_buckets * self.n_head + 2 * d + head

    @property
    def n_ctx(self) -> int:
        """The longest decoder sequence decoding plans for: T5 has no position table (its buckets
        reach any distance), and was trained on 512 tokens."""
        return 512


# ---------------------------------------------------------------------------------------------
# Parts of the model. x is [n_seq, d_model] throughout.


def rms_norm(x, weight, eps: float):
    """T5's layer norm: x / sqrt(mean(x^2) + eps) * weight, no mean subtracted and no bias; the
    statistics in float32 whatever the weights' dtype."""
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(weight.dtype) * weight


def gelu_new(x):
    """The tanh approximation of GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def relative_bucket(offset, bidirectional: bool, num_buckets: int, max_distance: int):
    """The bucket of a key's offset from its query (key position - query position), as Mesh
    TensorFlow's T5 computes it: exact buckets for small distances, logarithmic ones up to
    max_distance, one bucket beyond; bidirectional halves the buckets between the two directions,
    causal (False) puts every later key in bucket 0."""
    bucket = jnp.zeros_like(offset)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (offset > 0).astype(offset.dtype) * num_buckets
        distance = jnp.abs(offset)
    else:
        distance = -jnp.minimum(offset, 0)
    max_exact = num_buckets // 2
    log_ratio = jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / max_exact) / math.log(
        max_distance / max_exact
    )
    large = jnp.minimum(
        max_exact + (log_ratio * (num_buckets - max_exact)).astype(offset.dtype), num_buckets - 1
    )
    return bucket + jnp.where(distance < max_exact, distance, large)


def position_bias(table, query_pos, key_pos, bidirectional: bool, config: T5Config):
    """[H, n_query, n_key]: each head's learned bias (table [buckets, H]) for each query and key."""
    offset = key_pos[None, :] - query_pos[:, None]
    bucket = relative_bucket(offset, bidirectional, config.num_buckets, config.max_distance)
    return jnp.transpose(table[bucket], (2, 0, 1))


def attend(q, k, v, bias, mask):
    """softmax(q k^T + bias) v over the keys each query may see (mask [n_q, n_k]); unscaled.
    q [n_q, H, dk], k and v [n_k, H, dk], bias [H, n_q, n_k] or 0. Returns [n_q, H dk]."""
    scores = jnp.einsum("qhd,khd->hqk", q, k).astype(jnp.float32) + bias
    weights = jax.nn.softmax(jnp.where(mask[None], scores, -jnp.inf), axis=-1).astype(v.dtype)
    return jnp.einsum("hqk,khd->qhd", weights, v).reshape(q.shape[0], -1)


def heads(x, w, config: T5Config):  # [n, d] @ [d, H dk] -> [n, H, dk]
    return (x @ w).reshape(x.shape[0], config.n_head, config.d_kv)


def feed_forward(x, ff, gated: bool):
    """gelu_new(x wi_0) * (x wi_1) wo (gated, v1.1 / Flan), or relu(x wi) wo (original T5)."""
    h = gelu_new(x @ ff["wi_0"]) * (x @ ff["wi_1"]) if gated else jax.nn.relu(x @ ff["wi"])
    return h @ ff["wo"]


def blocks(stack):
    """A stack's per-block parameters, stacked (what lax.scan runs over): all but the position bias
    table and the final norm, which the stack's blocks share."""
    return {k: v for k, v in stack.items() if k not in ("bias", "ln_final")}


# ---------------------------------------------------------------------------------------------
# The encoder, once per source.


def encode(params, src, n_src, config: T5Config):
    """The encoder over src [n] of which the first n_src are real (the rest padding, which no
    position attends to): [n, d_model] after the final norm."""
    enc = params["encoder"]
    n = src.shape[0]
    pos = jnp.arange(n)
    bias = position_bias(enc["bias"], pos, pos, True, config)
    mask = jnp.broadcast_to(pos[None, :] < n_src, (n, n))

    def block(x, p):
        h = rms_norm(x, p["ln_attn"], config.eps)
        q, k, v = (heads(h, p["attn"][name], config) for name in "qkv")
        x = x + attend(q, k, v, bias, mask) @ p["attn"]["o"]
        return x + feed_forward(rms_norm(x, p["ln_ff"], config.eps), p["ff"], config.gated), None

    x, _ = lax.scan(block, params["shared"][src], blocks(enc))
    return rms_norm(x, enc["ln_final"], config.eps)


def cross_kv(params, encoded, config: T5Config):
    """Every decoder block's cross-attention keys and values over the encoder's output, computed
    once per source: {"k", "v": [L, n_src, H, dk]}."""
    cross = params["decoder"]["cross"]
    kv = lambda w: jnp.einsum("sd,ldk->lsk", encoded, w).reshape(
        w.shape[0], encoded.shape[0], config.n_head, config.d_kv
    )
    return {"k": kv(cross["k"]), "v": kv(cross["v"])}


# ---------------------------------------------------------------------------------------------
# The decoder: a cached step, and the uncached forward it is tested against.


def decoder_block(x, p, self_kv, self_bias, self_mask, cross_k, cross_v, cross_mask, config: T5Config):
    """One decoder block over x [n, d]. self_kv(k, v) gives the self-attention's keys and values
    from this step's own [n, H, dk]: the cache's with them written in, or themselves (uncached).
    Returns (x, (k, v)), this step's own keys and values."""
    h = rms_norm(x, p["ln_attn"], config.eps)
    k, v = heads(h, p["attn"]["k"], config), heads(h, p["attn"]["v"], config)
    keys, values = self_kv(k, v)
    x = x + attend(heads(h, p["attn"]["q"], config), keys, values, self_bias, self_mask) @ p["attn"]["o"]
    h = rms_norm(x, p["ln_cross"], config.eps)
    x = x + attend(heads(h, p["cross"]["q"], config), cross_k, cross_v, 0.0, cross_mask) @ p["cross"]["o"]
    return x + feed_forward(rms_norm(x, p["ln_ff"], config.eps), p["ff"], config.gated), (k, v)


def head(params, x, config: T5Config):
    """The final norm and the output head: [n, d] -> [n, V] float32 logits."""
    x = rms_norm(x, params["decoder"]["ln_final"], config.eps)
    if config.scale_decoder_outputs:
        x = x * config.d_model**-0.5
    w = params["lm_head"] if "lm_head" in params else params["shared"].T
    return (x @ w).astype(jnp.float32)


def step(params, cache, tokens, pos, config: T5Config, logits_at=None, tree=None, hidden=False):
    """Decode `tokens` [n] at positions pos.. through the decoder, reading and writing `cache`
    (start_cache's: {"k", "v": [L, max_len, H, dk]} and the source's cross-attention keys and
    values {"cross_k", "cross_v": [L, n_src, H, dk]}, the first "n_src" of them real). Returns
    (logits [n, V] float32, or [1, V] at row `logits_at`; new cache). Each block writes its new
    keys and values at pos and attends over the cache up to each query's own position. The
    decoders' step, but for token trees and features (`tree`, `hidden`), which it refuses yet."""
    if tree is not None or hidden:
        raise ValueError("specbench's T5 verifies chains: no token trees or EAGLE features")
    dec = params["decoder"]
    n, max_len, n_keys = tokens.shape[0], cache["k"].shape[1], cache["cross_k"].shape[1]
    q_pos, k_pos = pos + jnp.arange(n), jnp.arange(max_len)
    bias = position_bias(dec["bias"], q_pos, k_pos, False, config)
    self_mask = k_pos[None, :] <= q_pos[:, None]
    cross_mask = jnp.broadcast_to(jnp.arange(n_keys)[None, :] < cache["n_src"], (n, n_keys))

    def block(x, xs):
        p, k_cache, v_cache, ck, cv = xs
        written = {}

        def self_kv(k, v):
            written["k"] = lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (pos, 0, 0))
            written["v"] = lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (pos, 0, 0))
            return written["k"], written["v"]

        x, _ = decoder_block(x, p, self_kv, bias, self_mask, ck, cv, cross_mask, config)
        return x, (written["k"], written["v"])

    xs = (blocks(dec), cache["k"], cache["v"], cache["cross_k"], cache["cross_v"])
    x, (k, v) = lax.scan(block, params["shared"][tokens], xs)
    if logits_at is not None:
        x = lax.dynamic_slice_in_dim(x, logits_at, 1)
    return head(params, x, config), {**cache, "k": k, "v": v}


def start_cache(params, src, n_src, config: T5Config, max_len: int):
    """The decoder's cache for a source src [n] (its first n_src real, the rest padding): empty
    self-attention entries for up to max_len target tokens, and the source's cross-attention
    keys and values, the encoder run once."""
    shape = (config.n_decoder_layer, max_len, config.n_head, config.d_kv)
    dtype = params["shared"].dtype
    cross = cross_kv(params, encode(params, src, n_src, config), config)
    n_src = jnp.asarray(n_src, jnp.int32)
    return {
        "k": jnp.zeros(shape, dtype),
        "v": jnp.zeros(shape, dtype),
        "cross_k": cross["k"],
        "cross_v": cross["v"],
        "n_src": n_src,
    }


def t5(params, src, tgt, config: T5Config):
    """Uncached forward, picoGPT-style: source [n_src], decoder input [n] -> logits [n, V]. The
    reference the cached step is tested against, and what training uses."""
    encoded = encode(params, src, src.shape[0], config)
    cross = cross_kv(params, encoded, config)
    dec = params["decoder"]
    n = tgt.shape[0]
    pos = jnp.arange(n)
    bias = position_bias(dec["bias"], pos, pos, False, config)
    causal = jnp.asarray(np.tril(np.ones((n, n), bool)))
    cross_mask = jnp.ones((n, src.shape[0]), bool)

    def block(x, xs):
        p, ck, cv = xs
        x, _ = decoder_block(x, p, lambda k, v: (k, v), bias, causal, ck, cv, cross_mask, config)
        return x, None

    x, _ = lax.scan(block, params["shared"][tgt], (blocks(dec), cross["k"], cross["v"]))
    return head(params, x, config)


def init_params(config: T5Config, seed: int = 0, dtype=jnp.float32):
    """T5's initialisation (Mesh TensorFlow's, as Hugging Face's): each matrix N(0, 1/sqrt(n_in))
    with q also scaled by 1/sqrt(d_kv), the embedding N(0, 1), norms at 1. Drawn with NumPy."""
    rng = np.random.default_rng(seed)
    d, inner, ff = config.d_model, config.inner, config.d_ff
    normal = lambda shape, std: jnp.asarray(rng.normal(0.0, std, shape), dtype)
    ones = lambda *s: jnp.ones(s, dtype)

    def attention(L):
        return {
            "q": normal((L, d, inner), (d * config.d_kv) ** -0.5),
            "k": normal((L, d, inner), d**-0.5),
            "v": normal((L, d, inner), d**-0.5),
            "o": normal((L, inner, d), inner**-0.5),
        }

    def stack(L, decoder: bool):
        wi = (
            {"wi_0": normal((L, d, ff), d**-0.5), "wi_1": normal((L, d, ff), d**-0.5)}
            if config.gated
            else {"wi": normal((L, d, ff), d**-0.5)}
        )
        out = {
            "attn": attention(L),
            "ln_attn": ones(L, d),
            "ff": {**wi, "wo": normal((L, ff, d), ff**-0.5)},
            "ln_ff": ones(L, d),
            "bias": normal((config.num_buckets, config.n_head), d**-0.5),
            "ln_final": ones(d),
        }
        return out | ({"cross": attention(L), "ln_cross": ones(L, d)} if decoder else {})

    params = {
        "shared": normal((config.n_vocab, d), 1.0),
        "encoder": stack(config.n_layer, False),
        "decoder": stack(config.n_decoder_layer, True),
    }
    return (
        params if config.scale_decoder_outputs else params | {"lm_head": normal((d, config.n_vocab), d**-0.5)}
    )
