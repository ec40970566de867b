"""GPT-2 forward pass in pure JAX, with a fixed-size KV cache.

The model is GPT-2 as in Radford et al. (2019), "Language Models are Unsupervised Multitask
Learners", in the style of picoGPT: one plain function per part, parameters in a nested dict
named after the Hugging Face checkpoint's own keys (see weights.py), shapes in comments.

Beyond picoGPT, every step reads and writes a preallocated cache:

    cache = {"k": [n_layer, n_head, head_dim, max_len], "v": [n_layer, max_len, n_head, head_dim]}

The keys are stored transposed per head (K^T), so that a step's scores q K^T read them in place.

`step(params, cache, tokens, pos)` runs `tokens` (n_seq of them) at positions pos .. pos+n_seq-1:
each layer attends over the cache entries before pos (mask `key_idx < pos`) and, causally, over
the new tokens' own keys (attention.py); after the last layer their keys and values are written
into the cache at pos with one `lax.dynamic_update_slice`. `pos` is a traced int32, so one program serves
every position; there is one compiled program per `n_seq` (prefill bucket, decode = 1,
verify = K+1). Rolling back after a rejected draft is free: set `pos` back, and the stale
entries are masked until they are overwritten.

The layers are stacked on a leading axis and run with `lax.scan`, so compile time does not grow
with depth. In the Pallas layout (layouts.pallas_layout, a GPU's `--kernels pallas`) a step of up to
16 tokens runs each layer as five fused kernels instead, the layers unrolled (pallas.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax.numpy as jnp
import numpy as np

from specbench.model.kernels import pallas, pallas_layers, programs
from specbench.model.kernels.norms import layer_norm
from specbench.model.nets import attention, decoder, mesh, products
from specbench.model.nets.layouts import Layout, as_weights, to_layout
from specbench.model.nets.products import layer_params, linear


@dataclasses.dataclass(frozen=True)
class GPT2Config:
    """Hyperparameters; hashable, so it is static under jit."""

    n_layer: int
    n_head: int
    n_embd: int
    n_ctx: int = 1024
    n_vocab: int = 50257
    layer_norm_epsilon: float = 1e-5
    pad_heads: int = 0  # heads of zeros after the n_head, so that the heads split over a mesh (mesh.py)
    mask_token: int | None = None  # a PARD draft's mask (config.json's pard_token: decode/pard.py)

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not a multiple of n_head={self.n_head}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def heads(self) -> int:
        """The heads a step computes and caches: n_head, and the padding's."""
        return self.n_head + self.pad_heads

    @property
    def attn_width(self) -> int:
        """Numbers of a token's queries (and of its keys, of its values): n_embd, and the padding's."""
        return self.heads * self.head_dim

    width = property(
        lambda self: self.n_embd, doc="The residual stream's width (every config's: families.py)."
    )
    kv_width = attn_width  # numbers of a key (and of a value) cached per token and layer

    @property
    def layer_matrix_params(self) -> int:
        """Numbers in one block's matrices: q/k/v and the output projection (4 n_embd², more with
        padded heads) and the MLP's two (8 n_embd²)."""
        return 4 * self.n_embd * self.attn_width + 8 * self.n_embd**2

    @property
    def n_params(self) -> int:
        """Parameter count with the output head tied to wte (as GPT-2 has it)."""
        e, v, p, L = self.n_embd, self.n_vocab, self.n_ctx, self.n_layer
        per_block = 2 * 2 * e + (e * 3 * e + 3 * e) + (e * e + e) + (e * 4 * e + 4 * e) + (4 * e * e + e)
        return v * e + p * e + L * per_block + 2 * e


# ---------------------------------------------------------------------------------------------
# Parts of the model. x is [n_seq, n_embd] throughout.


def gelu(x):
    # GPT-2's tanh approximation 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), written
    # as x / (1 + exp(-2u)), the same function: ending in a division, it is computed once, not
    # fused into the next 1-row product, which recomputes it per row (docs/performance.md). The
    # exponent stops at 80: beyond it the value is 0 either way, and exp's overflow to inf made the
    # gradient inf / inf = NaN for inputs below about -9 (an EAGLE head's training met them)
    u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return x / (1.0 + jnp.exp(jnp.minimum(-2.0 * u, 80.0)))


def mlp(x, c_fc, c_proj, layout: Layout = Layout.HF, layer=None):  # [n_seq, n_embd] -> [n_seq, n_embd]
    return linear(gelu(linear(x, c_fc, layout, layer)), c_proj, layout, layer)  # via [n_seq, 4*n_embd]


def mha(
    x,
    c_attn,
    c_proj,
    k_cache,
    v_cache,
    pos,
    n_head,
    tree=None,
    layout: Layout = Layout.HF,
    layer=None,
    groups=1,
    first=0,
):
    # x [n_seq, n_embd]; k_cache [n_head, hd, max_len], v_cache [max_len, n_head, hd]; pos: traced int32.
    # Returns the output and this step's keys and values, [n_seq, n_head, hd] each.
    n_seq = x.shape[0]
    qkv = ungroup(linear(x, c_attn, layout, layer), n_head, groups)  # [n_seq, 3, h, hd]
    # as they will be stored: a later step reads them from the cache in its dtype
    k, v = qkv[:, 1].astype(k_cache.dtype), qkv[:, 2].astype(v_cache.dtype)
    out = attention.cached_attention(qkv[:, 0], k, v, k_cache, v_cache, pos, tree, first)
    out = out.reshape(n_seq, -1)
    return linear(out, c_proj, layout, layer), k, v


def ungroup(qkv, n_head: int, groups: int):
    """The q/k/v product's [n_seq, 3 n_embd] as [n_seq, 3, n_head, hd]. On a mesh of `groups`
    devices its columns come regrouped by device, each group its heads' q, k and v (mesh.py);
    with one group this is the plain reshape."""
    n_seq, width = qkv.shape
    hd = width // (3 * n_head)
    parts = qkv.reshape(n_seq, groups, 3, n_head // groups, hd)
    return jnp.swapaxes(parts, 1, 2).reshape(n_seq, 3, n_head, hd)


def pad_heads(arrays: dict, config: GPT2Config, tp: int) -> tuple[dict, GPT2Config]:
    """The weights as loaded and the config with heads of zeros after the n_head, as few as make
    the heads split tp ways (GPT-2 XL's 25 become 26, 28 or 32 over 2, 4 or 8 devices; as they are
    where they split already): zero q, k and v columns
    and biases, so a padded head attends uniformly over values of zero, and zero rows of the output
    projection, so that whatever it yields adds nothing. The logits are the unpadded model's."""
    extra = -config.heads % tp
    if not extra:
        return arrays, config
    hd, blocks = config.head_dim, dict(arrays["blocks"])
    attn = dict(blocks["attn"])
    pad = lambda x, axis: jnp.pad(x, [(0, extra * hd if a == axis % x.ndim else 0) for a in range(x.ndim)])
    attn["c_attn"] = {
        k: jnp.concatenate([pad(part, -1) for part in jnp.split(v, 3, axis=-1)], axis=-1)
        for k, v in attn["c_attn"].items()
    }
    attn["c_proj"] = {**attn["c_proj"], "weight": pad(attn["c_proj"]["weight"], -2)}
    blocks["attn"] = attn
    return {**arrays, "blocks": blocks}, dataclasses.replace(config, pad_heads=config.pad_heads + extra)


def fused_parts(config: GPT2Config) -> dict:
    """The fused products whose columns a mesh regroups, with their parts' widths: q, k and v."""
    return {("attn", "c_attn"): (config.attn_width,) * 3}


def block(
    x,
    p,
    k_cache,
    v_cache,
    pos,
    config: GPT2Config,
    tree=None,
    layout: Layout = Layout.HF,
    layer=None,
    groups=1,
    first=0,
):
    """One transformer block over x [n_seq, n_embd]: p is its ln_1, attn, ln_2 and mlp (layer_params);
    `first`: attention.cached_attention's."""
    eps = config.layer_norm_epsilon
    attn = p["attn"]
    a, k, v = mha(
        layer_norm(x, **p["ln_1"], eps=eps),
        attn["c_attn"],
        attn["c_proj"],
        k_cache,
        v_cache,
        pos,
        config.heads,
        tree,
        layout,
        layer,
        groups,
        first,
    )
    x = x + a
    x = x + mlp(layer_norm(x, **p["ln_2"], eps=eps), p["mlp"]["c_fc"], p["mlp"]["c_proj"], layout, layer)
    return x, k, v


def embed(params, tokens, positions, config: GPT2Config):
    """The tokens' embeddings and their positions' learned rows: [n_seq, n_embd]."""
    return params["wte"][tokens] + params["wpe"][positions]


def step_blocks(params, x, cache, pos, config: GPT2Config, tree=None, taps=None):
    """A step's blocks (decoder.Parts.blocks): in the Pallas layout a step of up to pallas.ROWS
    tokens without taps runs them through the fused kernels (pallas_layers.blocks); else blocks."""
    n_seq = x.shape[0]
    if as_weights(params).layout is Layout.PALLAS and pallas.fits(n_seq, cache["v"].shape[1]) and not taps:
        sees = np.tril(np.ones((n_seq, n_seq), bool)) if tree is None else tree.ancestors
        return pallas_layers.blocks(
            params, x, cache, pos, sees, config.n_head, config.layer_norm_epsilon, gelu
        )
    return blocks(params, x, cache, pos, config, tree, taps)


def blocks(params, x, cache, pos, config: GPT2Config, tree=None, taps=None, first: int = 0):
    """The transformer blocks over x [n_seq, n_embd] at positions pos.. (a token tree's nodes
    with `tree`): as many as the cache has layers. Returns (x, (k, v)), the new keys and values
    [L, n_seq, n_head, hd] of every layer, and with `taps` those layers' inputs (run_layers).
    `first` (static): keys before it are seen by their own row only (attention.cached_attention)."""

    w = as_weights(params)
    kernel = w.layout is Layout.KERNEL  # the kernel reads every layer's stacked matrices in place
    g = mesh.groups(w)

    def layer(x, i):
        p = layer_params(w, i)
        # layer i's cache, sliced here rather than scanned over: under vmap the cache is [B, L, ...],
        # and scanning its second axis copied the whole cache every step (docs/performance.md)
        k_cache, v_cache = cache["k"][i], cache["v"][i]
        x, k, v = block(x, p, k_cache, v_cache, pos, config, tree, w.layout, i if kernel else None, g, first)
        return x, (k, v)

    return products.run_layers(layer, x, cache["k"].shape[0], taps)


def final_norm(params, x, config: GPT2Config):
    """The norm before the head: layer norm with ln_f's gain and bias."""
    return layer_norm(x, **params["ln_f"], eps=config.layer_norm_epsilon)


def position_embedding(params, positions):
    """What a step adds to its embeddings for their positions: the learned table's rows."""
    return params["wpe"][positions]


def head_keys(config: GPT2Config) -> tuple[str, ...]:
    """The weights an EAGLE head reads of its target (eagle.attach): embeddings and final norm."""
    return ("wte", "wpe", "ln_f")


def init_cache(config: GPT2Config, max_len: int, dtype=jnp.float32):
    """An empty cache for sequences of up to max_len tokens."""
    products.check_cache_length(max_len, config.n_ctx)
    return empty_cache(config, max_len, dtype)


def empty_cache(config: GPT2Config, max_len: int, dtype=jnp.float32):
    """init_cache without the length check: max_len 0 gives the uncached forward's empty cache."""
    return products.empty_cache(config.n_layer, config.heads, config.head_dim, max_len, dtype)


# GPT-2's step (decoder.step's docstring): its parts assembled as every decoder's are
step = functools.partial(decoder.step, decoder.Parts(embed, step_blocks, final_norm))
# One compiled program per (config, n_seq); the cache buffer is donated and reused.
step_jit = programs.jit(step, static_argnames=("config", "tree", "hidden"), donate_argnames=("cache",))


def gpt2(params, tokens, config: GPT2Config):
    """Uncached forward over the whole sequence, picoGPT-style: [n_seq] -> [n_seq, n_vocab].

    The reference that the cached step is tested against; also used for training.
    """
    x = transformer(params, tokens, config)  # [n_seq, n_embd]
    return (x @ params["wte"].T).astype(jnp.float32)


def transformer(params, tokens, config: GPT2Config, features=False):
    """gpt2() without the output head: [n_seq] -> final hidden states [n_seq, n_embd] after ln_f
    (with `features`, before it: what step(hidden=True) returns).

    The same blocks as the cached step, over an empty cache: attention is then causal over the
    tokens themselves. Whatever layout params are in, it multiplies the weights as loaded with XLA.
    """
    params = to_layout(params, Layout.HF)  # XLA's products in the HF layout: the plain path, the oracle
    n_seq = tokens.shape[-1]
    x = params["wte"][tokens] + params["wpe"][jnp.arange(n_seq)]
    x, _ = blocks(params, x, empty_cache(config, 0, x.dtype), 0, config)
    if features:
        return x
    return layer_norm(x, **params["ln_f"], eps=config.layer_norm_epsilon)


def init_params(config: GPT2Config, seed: int = 0, dtype=jnp.float32):
    """GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer).

    Drawn with NumPy (deterministic in `seed`, and no XLA compile per tensor shape).
    """
    e, L = config.n_embd, config.n_layer
    rng = np.random.default_rng(seed)
    normal = lambda shape, std=0.02: jnp.asarray(rng.normal(0.0, std, shape), dtype)
    ones = lambda *s: jnp.ones(s, dtype)
    zeros = lambda *s: jnp.zeros(s, dtype)
    proj_std = 0.02 / math.sqrt(2 * L)
    return {
        "wte": normal((config.n_vocab, e)),
        "wpe": normal((config.n_ctx, e), 0.01),
        "blocks": {
            "ln_1": {"weight": ones(L, e), "bias": zeros(L, e)},
            "attn": {
                "c_attn": {"weight": normal((L, e, 3 * e)), "bias": zeros(L, 3 * e)},
                "c_proj": {"weight": normal((L, e, e), proj_std), "bias": zeros(L, e)},
            },
            "ln_2": {"weight": ones(L, e), "bias": zeros(L, e)},
            "mlp": {
                "c_fc": {"weight": normal((L, e, 4 * e)), "bias": zeros(L, 4 * e)},
                "c_proj": {"weight": normal((L, 4 * e, e), proj_std), "bias": zeros(L, e)},
            },
        },
        "ln_f": {"weight": ones(e), "bias": zeros(e)},
    }
