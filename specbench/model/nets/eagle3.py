"""An EAGLE-3 draft head, as its published checkpoints lay it out (LlamaForCausalLMEagle3).

EAGLE-3: Li, Wei, Zhang and Zhang (2025), "EAGLE-3: Scaling up Inference Acceleration of Large
Language Models via Training-Time Test", arXiv:2503.01840; the layout and the forward as vLLM's
`llama_eagle3.py` and speculators' Eagle3 first layer define them. The target's feature of
position j is three taps of its residual stream, the inputs of its layers `taps` (vLLM's default
2, L // 2 and L - 3) concatenated [3 H_t]; fc maps them onto the head's width H:

    g     = fc(taps_j) (no bias)              a draft reads the head's own x of the row before
    e, h  = input_layernorm(embed[t]), hidden_norm(g)
    x     = r + attention([e, h])             r = g (h with norm_before_residual); q/k/v read 2H
    x     = x + SwiGLU(post_attention_layernorm(x))
    logits over the draft vocabulary = lm_head(norm(x)); draft id i is target id i + d2t[i]

x, before the norm, is the feature the next draft reads. A head of n_layer > 1 (vLLM's
`llama_eagle3.py` since its PR #26164) runs Llama's own blocks over x after that first layer, H
wide (their q/k/v read x alone), and its last block's output is the feature and the norm's input;
their weights are `later`, stacked, from the checkpoint's `layers.1` ...

Rows are eagle.py's: row j reads token t_j and the feature of position j - 1, at position j,
where vLLM puts (f_{j-1}, t_j) at j - 1;
rotary attention sees only differences, so the two agree. Row 0 has no feature (vLLM has no such
row): every later row ignores its key (attention's `first`). The head's parameters use llama.py's
names (blocks stacked with one layer), plus `fc`, `blocks.hidden_norm`, its own `ln_f` (norm) and
`lm_head`, `d2t` and, where the checkpoint has one, `wte` (embed_tokens). On disk:
checkpoints/eagle3_files.py.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from specbench.model.nets import llama, products
from specbench.model.nets.layouts import Layout, RestrictedHead, Weights, as_weights, to_layout
from specbench.model.nets.llama import LlamaConfig, rms_norm
from specbench.model.nets.products import layer_params


@dataclasses.dataclass(frozen=True)
class Eagle3Config(LlamaConfig):
    """The head's Llama blocks (n_layer: the first reads 2H; n_vocab the target's), and what it reads: the
    target `taps` (empty until it is joined to a target: for_target), their width `target_width`
    (0: the head's own), its `draft_vocab` (0: the target's) and vLLM's `norm_before_residual`."""

    taps: tuple[int, ...] = ()
    target_width: int = 0
    draft_vocab: int = 0
    norm_before_residual: bool = False


def default_taps(n_layer: int) -> tuple[int, ...]:
    """vLLM's taps for a target of n_layer layers: the inputs of layers 2, L // 2 and L - 3."""
    return tuple(min(max(i, 0), n_layer - 1) for i in (2, n_layer // 2, n_layer - 3))


def for_target(config: Eagle3Config, target) -> Eagle3Config:
    """The head joined to a target's config: vLLM's default taps where its folder names none, the
    target's width where it names none, and the target's context (a rotary head has no table of
    positions; published heads say 2,048 for targets of 131,072)."""
    return dataclasses.replace(
        config,
        taps=config.taps or default_taps(target.n_layer),
        target_width=config.target_width or target.width,
        n_ctx=max(config.n_ctx, target.n_ctx),
    )


def mismatch(config: Eagle3Config, target, params=None) -> str | None:
    """Why the head (its config, and its params where given) cannot draft for this target's config,
    or None."""
    config = for_target(config, target)
    if config.target_width and config.target_width != target.width:
        return f"reads features of width {config.target_width}; the target's width is {target.width}"
    if config.n_vocab != target.n_vocab:
        return f"maps its drafts into a vocabulary of {config.n_vocab:,}; the target's has {target.n_vocab:,}"
    if any(not 0 <= t < target.n_layer for t in config.taps):
        return f"taps layers {list(config.taps)}; the target has {target.n_layer}"
    if params is not None and "wte" not in params and config.n_embd != target.width:
        return (
            f"is {config.n_embd} wide and has no embed_tokens of its own, so it would read the target's "
            f"embedding, {target.width} wide (vLLM cannot run it either): its folder needs "
            "embed_tokens.weight"
        )
    return None


def taps_note(config: Eagle3Config, target) -> str | None:
    """What to say of the layers a head reads where they are not what its engines would read: vLLM's
    default taps (2, L // 2, L - 3) repeat a layer or fall below layer 2 on a target of fewer than 7
    layers, where the engines, collecting each layer once, would hand fc fewer than three."""
    if config.taps or target.n_layer >= 7:
        return None
    taps = default_taps(target.n_layer)
    odd = [w for w, odd in (("a layer twice", len(set(taps)) < 3), ("below layer 2", min(taps) < 2)) if odd]
    return (
        f"the target has {target.n_layer} layers, so vLLM's default taps (2, L//2, L-3) are layers "
        f"{', '.join(map(str, taps))} ({' and '.join(odd)}): specbench reads them so, as `specbench.train "
        "eagle` trains a head, where vLLM and SGLang would hand fc the distinct layers only"
    )


def combine(params, feats, config: Eagle3Config):
    """fc over the target's taps [.., len(taps) H_t] -> [.., H]; a feature already H wide (the
    head's own x) is read as it is, as vLLM tells them apart."""
    if feats.shape[-1] == config.n_embd:
        return feats
    fc = params["fc"]["weight"]
    return (feats.astype(fc.dtype) @ fc).astype(feats.dtype)


def step(params, cache, feats_in, tokens, pos, config: Eagle3Config, logits_at=None, tree=None):
    """eagle.step for an EAGLE-3 head (the module's equations): (logits [n_seq, V'] or [1, V'] at
    row `logits_at`, in the head's columns; x [n_seq, H], the features the next rows read; the
    new cache)."""
    w = as_weights(params)
    layer, eps = (0 if w.layout is Layout.KERNEL else None), config.rms_norm_eps
    p = layer_params(w, 0)
    offsets = jnp.arange(tokens.shape[0]) if tree is None else jnp.asarray(tree.depths)
    g = combine(params, feats_in, config)
    e = rms_norm(params["wte"][tokens], p["ln_1"]["weight"], eps)
    h = rms_norm(g, w["blocks"]["hidden_norm"]["weight"][0], eps)
    k_cache, v_cache = cache["k"][0], cache["v"][0]
    a, k, v = llama.attend(
        jnp.concatenate([e, h], axis=-1), p["attn"], k_cache, v_cache, pos, pos + offsets, config, tree,
        w.layout, layer, first=1,
    )  # fmt: skip
    x = llama.swiglu((h if config.norm_before_residual else g) + a, p, config, w.layout, layer)
    k, v = k[None], v[None]
    if config.n_layer > 1:  # layers 1.. are Llama's own blocks over x (vLLM's multi-layer heads)
        later = {"blocks": w["later"]}
        rest = {"k": cache["k"][1:], "v": cache["v"][1:]}
        x, (k_later, v_later) = llama.blocks(later, x, rest, pos, config, tree, first=1)
        k, v = jnp.concatenate([k, k_later]), jnp.concatenate([v, v_later])
    cache = products.store(params, cache, (k, v), pos)
    return products.logits(params, x, llama.final_norm, config, logits_at), x, cache


def init_params(config: Eagle3Config, seed: int = 0, embedding: bool = False) -> dict:
    """Random weights of the published layout in this module's names (N(0, 0.02) matrices, unit
    gains; d2t the draft vocabulary's ids as offsets, where it is smaller than the target's): for
    the tests, and where training starts."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: jnp.asarray(0.02 * rng.standard_normal(shape, np.float32))
    ones = lambda *shape: jnp.ones(shape, jnp.float32)
    H, inner, T = config.n_embd, config.n_inner, len(config.taps) or 3
    qkv = config.attn_width + 2 * config.kv_width
    V = config.draft_vocab or config.n_vocab
    params = {
        "fc": {"weight": normal((config.target_width or H) * T, H)},
        "blocks": {
            "ln_1": {"weight": ones(1, H)},
            "hidden_norm": {"weight": ones(1, H)},
            "attn": {
                "c_attn": {"weight": normal(1, 2 * H, qkv)},
                "c_proj": {"weight": normal(1, config.attn_width, H)},
            },
            "ln_2": {"weight": ones(1, H)},
            "mlp": {"c_fc": {"weight": normal(1, H, 2 * inner)}, "c_proj": {"weight": normal(1, inner, H)}},
        },
        "ln_f": {"weight": ones(H)},
        "lm_head": normal(V, H),
    }
    if V < config.n_vocab:  # draft id i is token i + d2t[i]: every few tokens of the target's
        ids = np.sort(rng.choice(config.n_vocab, V, replace=False))
        params["d2t"] = jnp.asarray(ids - np.arange(V), jnp.int32)
    if config.n_layer > 1:  # layers 1.. : Llama's blocks, H wide
        later = dataclasses.replace(config, n_layer=config.n_layer - 1)
        params["later"] = llama.init_params(later, seed + 1)["blocks"]
    return params | ({"wte": normal(config.n_vocab, H)} if embedding else {})


def attach(head_params: dict, target_params, config: Eagle3Config) -> Weights:
    """The weights the head drafts with, in the target's layout: its own, with the target's
    embedding where it has none. Where it has d2t its lm_head's rows are the tokens
    arange(V') + d2t (a RestrictedHead: its logits are in those columns)."""
    target = as_weights(target_params)
    own = {k: v for k, v in head_params.items() if k != "d2t"}
    w = to_layout(own if "wte" in own else own | {"wte": target["wte"]}, target.layout)
    if "d2t" not in head_params:
        return w
    d2t = jnp.asarray(head_params["d2t"], jnp.int32)
    tokens = jnp.arange(d2t.shape[0], dtype=jnp.int32) + d2t
    packed = w["head"]["packed"] if w.layout is Layout.KERNEL else None
    return dataclasses.replace(w, head=RestrictedHead(tokens, own["lm_head"], packed))
