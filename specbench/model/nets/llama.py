"""The Llama decoder family in pure JAX (Llama 2 and 3, TinyLlama, SmolLM2, Qwen2 and 2.5), with
the same fixed-size KV cache and step as gpt2.py.

Beside GPT-2 a block differs in four places (Touvron et al. 2023, "LLaMA"; Ainslie et al. 2023,
"GQA"):

    RMSNorm             x / sqrt(mean(x^2) + eps) * weight, no mean, no bias (Zhang & Sennrich 2019)
    rotary positions    q and k rotated by angle position * theta^(-2i/hd) per pair of features
                        (Su et al. 2021, RoFormer), HF's half-split pairing; no position embedding
    grouped queries     n_head query heads share n_kv_head key/value heads, n_head / n_kv_head each:
                        the cache holds only the n_kv_head heads
    SwiGLU              down(silu(gate(x)) * up(x)) (Shazeer 2020), no bias

Qwen2 adds a bias to the q/k/v product; an untied model has its own output head (`lm_head`).
Qwen3 has no bias but an RMSNorm over each head's queries and keys, before the rotation
(`q_norm`, `k_norm`: one gain of head_dim a layer), and a head_dim of its own that need not be
n_embd / n_head (Qwen3-0.6B: 1,024 wide, 16 query heads of 128).

The weights are stored as gpt2.py's, so that one layout code (layouts.py) and the CPU kernel serve
both: every block matrix in HF's Conv1D orientation [n_in, n_out], stacked over layers, q/k/v
fused into `attn.c_attn` ([n_embd, (n_head + 2 n_kv_head) hd], q's columns first), o_proj as
`attn.c_proj`, gate and up fused into `mlp.c_fc` ([n_embd, 2 n_inner], gate's first), down as
`mlp.c_proj`; the norms are `ln_1`, `ln_2` and `ln_f`. checkpoints/llama_layout.py maps HF's
names onto these.

The cache is gpt2.py's with n_kv_head heads: k [n_layer, n_kv_head, hd, max_len], v [n_layer,
max_len, n_kv_head, hd]; keys are stored rotated, at their positions, so rollback and a token
tree's accepted path (moved to consecutive positions, as its depths are) need nothing new.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model.nets import attention, decoder, mesh, products
from specbench.model.nets.layouts import Layout, as_weights, to_layout
from specbench.model.nets.products import head, layer_params, linear
from specbench.model.nets.rotary import RopeScaling, rotate


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Hyperparameters of one Llama-family checkpoint; hashable, so it is static under jit.
    `family` is HF's model_type ("llama" or "qwen2"): what a row records as the architecture."""

    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    n_inner: int
    n_vocab: int
    n_ctx: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    qkv_bias: bool = False
    tied: bool = True
    family: str = "llama"
    qk_norm: bool = False  # Qwen3: RMSNorm over each head's queries and keys before the rotation
    explicit_head_dim: int | None = None  # config.json's head_dim where it is not n_embd / n_head
    mask_token: int | None = None  # a PARD draft's mask (config.json's pard_token: decode/pard.py)

    def __post_init__(self):
        if self.n_head % self.n_kv_head or (self.explicit_head_dim is None and self.n_embd % self.n_head):
            raise ValueError(
                f"n_kv_head={self.n_kv_head} must divide n_head={self.n_head}, which must divide "
                f"n_embd={self.n_embd} unless head_dim is given"
            )

    @property
    def head_dim(self) -> int:
        return self.explicit_head_dim or self.n_embd // self.n_head

    @property
    def heads(self) -> int:
        """The query heads a step computes (never padded: pad_heads)."""
        return self.n_head

    @property
    def attn_width(self) -> int:
        """Numbers of a token's queries: n_head x head_dim (n_embd unless head_dim is its own)."""
        return self.n_head * self.head_dim

    @property
    def width(self) -> int:
        """The residual stream's width (every config has one: families.py)."""
        return self.n_embd

    @property
    def kv_width(self) -> int:
        """Numbers of a key (and of a value) cached per token and layer: the n_kv_head heads' (GQA)."""
        return self.n_kv_head * self.head_dim

    @property
    def layer_matrix_params(self) -> int:
        """Numbers in one block's matrices: q and o (n_embd x n_head hd each), k and v (n_embd x
        n_kv_head hd each), and SwiGLU's gate, up and down (n_embd x n_inner each)."""
        e = self.n_embd
        return 2 * e * self.attn_width + 2 * e * self.n_kv_head * self.head_dim + 3 * e * self.n_inner

    @property
    def n_params(self) -> int:
        """Parameter count: embedding, per layer the q/k/v/o products (q/k/v biases for Qwen2, the
        q and k norms' gains for Qwen3), the three SwiGLU matrices and two norms, the final norm,
        and an untied head."""
        e, kv = self.n_embd, self.n_kv_head * self.head_dim
        per_layer = self.layer_matrix_params + (self.attn_width + 2 * kv if self.qkv_bias else 0) + 2 * e
        per_layer += 2 * self.head_dim if self.qk_norm else 0
        return self.n_vocab * e * (1 if self.tied else 2) + self.n_layer * per_layer + e


# ---------------------------------------------------------------------------------------------
# Parts of the model. x is [n_seq, n_embd] throughout.


def rms_norm(x, weight, eps: float):
    """x / sqrt(mean(x^2) + eps) * weight, the statistics in float32 whatever the weights' dtype."""
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(x.dtype) * weight


def grouped(a, groups: int, axis: int):
    """Each of a's key/value heads (on `axis`) repeated for the `groups` query heads that share it
    (GQA): query head h reads key/value head h // groups."""
    return a if groups == 1 else jnp.repeat(a, groups, axis=axis)


def pad_heads(arrays: dict, config: LlamaConfig, tp: int) -> tuple[dict, LlamaConfig]:
    """The weights and config as they are where the heads and key/value heads split tp ways;
    ValueError otherwise, naming the splits that work: padded heads are GPT-2's (gpt2.pad_heads), as
    a grouped-query model's would need padded key/value heads and a new grouping."""
    if config.n_head % tp or config.n_kv_head % tp:
        raise ValueError(
            f"{config.n_head} heads and {config.n_kv_head} key/value heads do not split {tp} ways: "
            f"use a tp that divides {math.gcd(config.n_head, config.n_kv_head)}"
        )
    return arrays, config


def fused_parts(config: LlamaConfig) -> dict:
    """The fused products whose columns a mesh regroups (mesh.py), with their parts' widths: q, k
    and v; gate and up."""
    q, kv = config.n_head * config.head_dim, config.n_kv_head * config.head_dim
    return {("attn", "c_attn"): (q, kv, kv), ("mlp", "c_fc"): (config.n_inner, config.n_inner)}


def ungroup(fused, parts: tuple[int, ...], groups: int) -> list:
    """A fused product's output [n_seq, sum(parts)] as its parts, each [n_seq, part]. On a mesh of
    `groups` devices its columns come regrouped by device (mesh.grouped); with one group this is
    the plain split."""
    n_seq = fused.shape[0]
    per = fused.reshape(n_seq, groups, -1)  # [n_seq, groups, sum(parts) / groups]
    cuts = np.cumsum([part // groups for part in parts])[:-1]
    return [piece.reshape(n_seq, -1) for piece in jnp.split(per, cuts, axis=-1)]


def attend(
    x, p, k_cache, v_cache, pos, positions, config: LlamaConfig, tree, layout, layer, groups=1, first=0
):
    """Grouped-query attention of x [n_seq, n_in] (n_embd; an EAGLE-3 head's 2 n_embd); returns its
    output and this step's rotated keys and values [n_seq, n_kv_head, hd] as the cache stores them.
    `first`: attention.cached_attention's."""
    n_seq, hd = x.shape[0], config.head_dim
    H, KV = config.n_head, config.n_kv_head
    qkv = linear(x, p["c_attn"], layout, layer)  # [n_seq, (H + 2 KV) hd]
    q, k, v = ungroup(qkv, fused_parts(config)["attn", "c_attn"], groups)
    q, k = q.reshape(n_seq, H, hd), k.reshape(n_seq, KV, hd)
    if config.qk_norm:  # Qwen3: each head's queries and keys normed over hd, then rotated
        gain = lambda name: p[name]["weight"] if layer is None else p[name]["weight"][layer]
        q = rms_norm(q, gain("q_norm"), config.rms_norm_eps)
        k = rms_norm(k, gain("k_norm"), config.rms_norm_eps)
    q = rotate(q, positions, config)
    k = rotate(k, positions, config).astype(k_cache.dtype)
    v = v.reshape(n_seq, KV, hd).astype(v_cache.dtype)
    g = H // KV
    out = attention.cached_attention(
        q,
        grouped(k, g, 1),
        grouped(v, g, 1),
        grouped(k_cache, g, 0),
        grouped(v_cache, g, 1),
        pos,
        tree,
        first,
    )
    return linear(out.reshape(n_seq, H * hd), p["c_proj"], layout, layer), k, v


def block(
    x, p, k_cache, v_cache, pos, positions, config: LlamaConfig, tree, layout, layer, groups=1, first=0
):
    """One block: x + attention(rms_norm(x)), then + SwiGLU(rms_norm(x)); p is layer_params'.
    `first`: attention.cached_attention's."""
    a, k, v = attend(
        rms_norm(x, p["ln_1"]["weight"], config.rms_norm_eps),
        p["attn"],
        k_cache,
        v_cache,
        pos,
        positions,
        config,
        tree,
        layout,
        layer,
        groups,
        first,
    )
    return swiglu(x + a, p, config, layout, layer, groups), k, v


def swiglu(x, p, config: LlamaConfig, layout, layer, groups=1):
    """A block's second half: x + SwiGLU(rms_norm(x)), with ln_2's gain."""
    gate_up = linear(rms_norm(x, p["ln_2"]["weight"], config.rms_norm_eps), p["mlp"]["c_fc"], layout, layer)
    gate, up = ungroup(gate_up, fused_parts(config)["mlp", "c_fc"], groups)  # [n_seq, n_inner] each
    return x + linear(jax.nn.silu(gate) * up, p["mlp"]["c_proj"], layout, layer)


def blocks(params, x, cache, pos, config: LlamaConfig, tree=None, taps=None, first: int = 0):
    """The blocks over x [n_seq, n_embd] at positions pos.. (a token tree's nodes at pos + their
    depth), reading the cache entries before pos: as many blocks as the cache has layers. Returns
    (x, (k, v)), the new keys and values [L, n_seq, KV, hd]. gpt2.blocks' signature, so that an
    EAGLE head's block (eagle.py) is either family's. `first` (static): keys before it are seen by
    their own row only (attention.cached_attention; an MTP head's position 0: nets/mtp.py)."""
    w = as_weights(params)
    kernel, g = w.layout is Layout.KERNEL, mesh.groups(w)
    offsets = jnp.arange(x.shape[0]) if tree is None else jnp.asarray(tree.depths)
    positions = pos + offsets

    def layer(x, i):
        k_cache, v_cache = cache["k"][i], cache["v"][i]
        layer_i = i if kernel else None
        x, k, v = block(
            x, layer_params(w, i), k_cache, v_cache, pos, positions, config, tree, w.layout, layer_i, g, first
        )
        return x, (k, v)

    return products.run_layers(layer, x, cache["k"].shape[0], taps)


def final_norm(params, x, config: LlamaConfig):
    """The norm before the head: RMSNorm with ln_f's gain."""
    return rms_norm(x, params["ln_f"]["weight"], config.rms_norm_eps)


def position_embedding(params, positions):
    """What a step adds to its embeddings for their positions: nothing (the rotation is in attention)."""
    return 0.0


def head_keys(config: LlamaConfig) -> tuple[str, ...]:
    """The weights an EAGLE head reads of its target (eagle.attach): embedding, final norm, and an
    untied head."""
    return ("wte", "ln_f") + (() if config.tied else ("lm_head",))


def embed(params, tokens, positions, config: LlamaConfig):
    """The tokens' embeddings, [n_seq, n_embd] (positions are rotations inside attention). The
    fused Pallas kernels serve GPT-2's blocks only: a Llama in their layout is refused here."""
    if as_weights(params).layout is Layout.PALLAS:
        raise ValueError("the fused Pallas kernels serve GPT-2's blocks only")
    return params["wte"][tokens]


def init_cache(config: LlamaConfig, max_len: int, dtype=jnp.float32):
    """An empty cache of n_kv_head heads for sequences of up to max_len tokens."""
    products.check_cache_length(max_len, config.n_ctx)
    return empty_cache(config, max_len, dtype)


def empty_cache(config: LlamaConfig, max_len: int, dtype=jnp.float32):
    """init_cache without the length check: max_len 0 gives the uncached forward's empty cache."""
    return products.empty_cache(config.n_layer, config.n_kv_head, config.head_dim, max_len, dtype)


def llama(params, tokens, config: LlamaConfig):
    """Uncached forward over a whole sequence: [n_seq] -> logits [n_seq, n_vocab] float32. The
    same blocks over an empty cache, XLA's products on the weights as loaded: the tests' oracle."""
    params = to_layout(params, Layout.HF)  # on a mesh, its columns stay grouped (mesh.py)
    x = params["wte"][tokens]
    x, _ = blocks(params, x, empty_cache(config, 0, x.dtype), 0, config)
    return head(params, final_norm(params, x, config))


def init_params(config: LlamaConfig, seed: int = 0, dtype=jnp.float32) -> dict:
    """Random weights (HF's initialisation: N(0, 0.02) matrices, unit norms, zero biases), drawn
    with NumPy: deterministic in `seed`, no compile per shape. Timing only."""
    e, L, inner = config.n_embd, config.n_layer, config.n_inner
    qkv = (config.n_head + 2 * config.n_kv_head) * config.head_dim
    rng = np.random.default_rng(seed)
    # drawn in float32: a float64 draw of a 1.7B model's largest matrix would take 6 GB more
    normal = lambda *shape: jnp.asarray(0.02 * rng.standard_normal(shape, np.float32), dtype)
    ones = lambda *s: jnp.ones(s, dtype)
    c_attn = {"weight": normal(L, e, qkv)} | ({"bias": jnp.zeros((L, qkv), dtype)} if config.qkv_bias else {})
    params = {  # drawn in this order: a seed's weights stay what they were before Qwen3's norms
        "wte": normal(config.n_vocab, e),
        "blocks": {
            "ln_1": {"weight": ones(L, e)},
            "attn": {"c_attn": c_attn, "c_proj": {"weight": normal(L, config.attn_width, e)}},
            "ln_2": {"weight": ones(L, e)},
            "mlp": {"c_fc": {"weight": normal(L, e, 2 * inner)}, "c_proj": {"weight": normal(L, inner, e)}},
        },
        "ln_f": {"weight": ones(e)},
    }
    if config.qk_norm:  # Qwen3's gains over each head's queries and keys
        params["blocks"]["attn"] |= {
            name: {"weight": ones(L, config.head_dim)} for name in ("q_norm", "k_norm")
        }
    return params if config.tied else params | {"lm_head": normal(config.n_vocab, e)}


# the family's step (decoder.step's docstring): its parts assembled as every decoder's are
step = functools.partial(decoder.step, decoder.Parts(embed, blocks, final_norm))
