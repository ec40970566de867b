"""An EAGLE draft head: one transformer block that drafts from the target's own hidden states.

EAGLE: Li, Wei, Zhang and Zhang (ICML 2024), "EAGLE: Speculative Sampling Requires Rethinking
Feature Uncertainty", arXiv:2401.15077. The target's *feature* f_j is its last block's output at
position j, before the final layer norm (gpt2.step(hidden=True)): ln_f and the head turn it into
the logits of token j+1. The head predicts the next feature from the current one and the token
that was drawn from it:

    x_j = [f_{j-1}, wte[t_j]] @ fc.weight + fc.bias (+ wpe[j])   f_{-1} = 0: the first position
    h_j = block(x_j, attending to x_0 .. x_{j-1} through its own cache)   (the target family's block)
    logits for t_{j+1} = head(norm(h_j))                  the target's own final norm and head

h_j stands in for f_j: while drafting, position j+1 reads h_j where f_j is not known yet, and
the target's verify step then returns the true features of the rows it accepts. The head owns
only fc and the block (its config is the target's with n_layer = 1): a GPT-2 block for a GPT-2
target, a Llama block (RoPE, GQA, SwiGLU) for a Llama-family one. The embeddings, the final norm
and the head are the target's, joined in by `attach`. `python -m specbench.train eagle` trains a
GPT-2 target's head with EAGLE's two losses: a smooth-L1 regression of h_j onto f_j and the
cross-entropy of its tokens against the target's distribution.

On disk a head is a folder (checkpoints/eagle_files.py).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model.nets import layouts, products
from specbench.model.nets.families import family_of


def family(config):
    """The module of the head's block, its target's family (gpt2.py or llama.py): its blocks,
    final norm, position embedding and the target weights it reads."""
    return family_of(config).module


def config_for(target):
    """The head's block has the target's width, heads and context: the target with one layer."""
    return dataclasses.replace(target, n_layer=1)


def init_params(config, seed: int = 0) -> dict:
    """fc and one block of the target's family, its initialisation for the block. fc starts as
    [I; 0]: the head first passes the feature through, and learns what the token and the block add
    to it."""
    block = family(config).init_params(config, seed)["blocks"]
    e = config.n_embd
    fc = np.concatenate([np.eye(e), np.random.default_rng(seed + 1).normal(0.0, 0.02, (e, e))])
    return {"fc": {"weight": jnp.asarray(fc, jnp.float32), "bias": jnp.zeros(e)}, "blocks": block}


def attach(head_params: dict, target_params, config) -> layouts.Weights:
    """The weights a head drafts with: its own fc and block, and what it reads of the target
    (family(config).head_keys: the embeddings, the final norm, an untied head), in the layout the
    target's are in (layouts.py: the CPU kernel's packed copies of the block and of the output
    head where the target has them)."""
    target = layouts.as_weights(target_params)
    merged = {**{k: target[k] for k in family(config).head_keys(config)}, **head_params}
    return layouts.to_layout(merged, target.layout)


def embed(params, feats_in, tokens, positions, config):
    """x_j = [f_{j-1}, wte[t_j]] @ fc + b (+ wpe[j] for GPT-2): [n_seq, n_embd] from features."""
    x = jnp.concatenate([feats_in.astype(params["wte"].dtype), params["wte"][tokens]], axis=-1)
    where = family(config).position_embedding(params, positions)
    return x @ params["fc"]["weight"] + params["fc"]["bias"] + where


def step(params, cache, feats_in, tokens, pos, config, logits_at=None, tree=None):
    """The head over `tokens` [n_seq] at positions pos.., row j reading feats_in[j], the feature
    of the token before it (f_{j-1}, or a predicted one). Reads and writes its one-layer `cache`
    (network.init_cache(config, ...)); with `tree` the rows are a token tree's nodes, as in a
    step. Returns (logits [n_seq, V] float32, or [1, V] at row `logits_at`; h [n_seq, n_embd], the
    predicted features; the new cache)."""
    n_seq, net = tokens.shape[0], family(config)
    offsets = jnp.arange(n_seq) if tree is None else jnp.asarray(tree.depths)
    positions = jnp.minimum(pos + offsets, config.n_ctx - 1)
    x = embed(params, feats_in, tokens, positions, config)
    h, (k_new, v_new) = net.blocks(params, x, cache, pos, config, tree)
    k, v = products.write_cache(cache["k"], cache["v"], jnp.transpose(k_new, (0, 2, 3, 1)), v_new, pos)
    out = h if logits_at is None else lax.dynamic_slice_in_dim(h, logits_at, 1)
    logits = products.head(params, net.final_norm(params, out, config))
    return logits, h, {"k": k, "v": v}


def shifted(feats):
    """[f_0 .. f_{n-1}] -> [0, f_0 .. f_{n-2}]: each row's input feature, f_{j-1} (f_{-1} = 0)."""
    return jnp.concatenate([jnp.zeros_like(feats[..., :1, :]), feats[..., :-1, :]], axis=-2)


def predict(params, feats, tokens, config):
    """Uncached, over a whole sequence whose true features are feats [n_seq, n_embd]: the
    predicted features h [n_seq, n_embd], row j reading f_{j-1}. What training runs."""
    n_seq, net = tokens.shape[-1], family(config)
    x = embed(params, shifted(feats), tokens, jnp.arange(n_seq), config)
    h, _ = net.blocks(params, x, net.empty_cache(config, 0, x.dtype), 0, config)
    return h


def forward(params, feats, tokens, config):
    """predict, then the target's norm and head: (logits [n_seq, V] float32, h). The tests' oracle
    for the cached step: it multiplies the weights as loaded, with XLA."""
    params = layouts.as_loaded(params)
    h = predict(params, feats, tokens, config)
    return products.head(params, family(config).final_norm(params, h, config)), h


def window(feats, tokens, n, rows: int):
    """The `rows` positions ending at n - 1 (from 0 while n - 1 < rows - 1): (their first position
    s, tokens [rows], input features [rows, n_embd] from `feats` [max_len, n_embd], the row of
    position n - 1). Each round re-reads them with the target's true features, which rewrites the
    head's cache wherever a round drafted on its own predictions."""
    s = jnp.maximum(n - rows, 0)
    before = lax.dynamic_slice_in_dim(shifted(feats), s, rows)  # f_{s-1} .. f_{s+rows-2}
    return s, lax.dynamic_slice(tokens, (s,), (rows,)), before, n - 1 - s
