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

On disk a head is a folder (checkpoints/eagle_files.py). An EAGLE-3 head (eagle3.py) is read
from its published checkpoints; each head's `Format` (FORMATS, by its config's type) says which
step, weights and features it has, and the functions below ask it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model.nets import decoder, eagle3, families, layouts, mtp, products
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


def block_attach(head_params: dict, target_params, config) -> layouts.Weights:
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


def block_step(params, cache, feats_in, tokens, pos, config, logits_at=None, tree=None):
    """The head over `tokens` [n_seq] at positions pos.., row j reading feats_in[j], the feature
    of the token before it (f_{j-1}, or a predicted one): decoder.step over the parts of its
    target's family, its embedding this head's (embed). Reads and writes its one-layer `cache`
    (network.init_cache(config, ...)); with `tree` the rows are a token tree's nodes, as in a
    step. Returns (logits [n_seq, V] float32, or [1, V] at row `logits_at`; h [n_seq, n_embd], the
    predicted features; the new cache)."""
    net = family(config)
    reads = lambda p, t, positions, c: embed(p, feats_in, t, positions, c)
    parts = decoder.Parts(reads, net.blocks, net.final_norm)
    logits, cache, h = decoder.step(parts, params, cache, tokens, pos, config, logits_at, tree, hidden=True)
    return logits, h, cache


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
    if format_of(config) is not EAGLE:  # its step over an empty cache
        empty = family(config).empty_cache(config, 0, feats.dtype)
        logits, h, _ = step(params, empty, shifted(feats), tokens, 0, config)
        return logits, h
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


def block_mismatch(config, target, params=None) -> str | None:
    """Why an EAGLE-1-style head (a block of its target's family) cannot draft for a target."""
    if family_of(config) is not family_of(target) or config.n_embd != target.n_embd:
        return f"is a block reading features of width {config.n_embd}; the target's width is {target.n_embd}"
    if config.n_vocab != target.n_vocab:
        return f"has a vocabulary of {config.n_vocab:,}; the target's has {target.n_vocab:,}"
    return None


class Format(NamedTuple):
    """A head's format, defined once: its name as rows record it, and what differs between formats."""

    name: str  # a row's eagle_format
    title: str
    step: Callable  # step(params, cache, feats_in, tokens, pos, config, logits_at, tree)
    attach: Callable  # attach(head params, target params, config) -> the Weights it drafts with
    combine: Callable  # combine(params, feats, config): target features as its rows read them
    reads: Callable  # reads(config): the target's `hidden`: True, or the layers it taps
    joined: Callable  # joined(head config, target config): the config it drafts with
    mismatch: Callable  # mismatch(head config, target config, head params): why it cannot draft for it
    note: Callable  # note(head config, target config): what to say of what it reads, or None


EAGLE = Format(
    "eagle",
    "EAGLE head",
    block_step,
    block_attach,
    lambda params, feats, config: feats,
    lambda config: True,
    lambda config, target: config_for(target),
    block_mismatch,
    lambda config, target: None,
)
EAGLE3 = Format(
    "eagle3",
    "EAGLE-3 head",
    eagle3.step,
    eagle3.attach,
    eagle3.combine,
    lambda config: config.taps,
    eagle3.for_target,
    eagle3.mismatch,
    eagle3.taps_note,
)


MTP = Format(
    "mtp",
    "MTP head",
    mtp.step,
    mtp.attach,
    lambda params, feats, config: feats,
    mtp.reads,
    mtp.joined,
    mtp.mismatch,
    lambda config, target: None,
)
FORMATS = (EAGLE, EAGLE3, MTP)


def format_of(config) -> Format:
    """The format of a head whose config this is: a block of its target's family (EAGLE), an
    Eagle3Config (EAGLE3) or an MtpConfig (MTP)."""
    if mtp.is_head(config):
        return MTP
    return EAGLE3 if families.is_eagle3_head(config) else EAGLE


def step(params, cache, feats_in, tokens, pos, config, logits_at=None, tree=None):
    """The head's cached step (its format's: block_step, eagle3.step): (logits, h, new cache)."""
    return format_of(config).step(params, cache, feats_in, tokens, pos, config, logits_at, tree)


def attach(head_params: dict, target_params, config) -> layouts.Weights:
    """The weights a head drafts with, joined to its target's (its format's attach)."""
    return format_of(config).attach(head_params, target_params, config)


def combine(params, feats, config):
    """Target features [.., width] as the head's rows read them: as they are, or an EAGLE-3
    head's fc over its taps."""
    return format_of(config).combine(params, feats, config)


def reads(config):
    """What the target's steps hand this head (network.step's `hidden`): its last block's output
    (True), or an EAGLE-3 head's taps."""
    return format_of(config).reads(config)


def drafting_config(head, target):
    """The config a head drafts with for this target (the target's with one layer; an EAGLE-3
    head's own, its taps set), from the head's own config, or None for the target's EAGLE-1 block."""
    return config_for(target) if head is None else format_of(head).joined(head, target)


def mismatch(head, target, params=None) -> str | None:
    """Why a head of this config (its own, as loaded, and its params where given) cannot draft for a
    target of that one, or None."""
    return format_of(head).mismatch(head, target, params)


def note(head, target) -> str | None:
    """What a run says of what a head reads from this target, where the engines would read otherwise."""
    return format_of(head).note(head, target)


def words(config) -> str:
    """What a header says of a head of this config."""
    if format_of(config) is EAGLE:
        return "one block over the target's features"
    if format_of(config) is MTP:
        return mtp.words(config)
    vocab = f", over {config.draft_vocab:,} draft tokens" if config.draft_vocab else ""
    return (
        f"EAGLE-3, one block over the inputs of the target's layers {', '.join(map(str, config.taps))}{vocab}"
    )
