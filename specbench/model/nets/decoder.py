"""One step for every decoder, assembled from the parts its family supplies: GPT-2's, the Llama
family's, and an EAGLE head's block over its target's features (eagle.block_step). A family's
module gives its `Parts` (embedding, blocks, final norm); `step` reads them in one order:

    x = embed(tokens at their positions)          [n_seq, width]
    x, new keys and values, taps = blocks(x)     the layers' scan (or a fused kernel's)
    cache = the new keys and values written at pos, in one update (products.store)
    logits = head(final_norm(x)), one row where asked (products.logits)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from specbench.model.nets import products


class Parts(NamedTuple):
    """What a family supplies to the one step."""

    embed: Callable  # embed(params, tokens, positions, config) -> x [n_seq, width]
    blocks: Callable  # blocks(params, x, cache, pos, config, tree, taps) -> (x, (k, v)[, taps' inputs])
    final_norm: Callable  # final_norm(params, x, config): the norm before the head


def positions(tokens, pos, config, tree=None):
    """The positions of a step's rows: pos, pos + 1, ... (a token tree's nodes at pos + their
    depth), clamped to the context (pads past n_ctx are junk, never read)."""
    offsets = jnp.arange(tokens.shape[0]) if tree is None else jnp.asarray(tree.depths)
    return jnp.minimum(pos + offsets, config.n_ctx - 1)


def step(parts: Parts, params, cache, tokens, pos, config, logits_at=None, tree=None, hidden=False):
    """Run `tokens` [n_seq] at positions pos.. through the model, reading and writing `cache`.

    Returns (logits [n_seq, n_vocab] in float32, new cache), and with `hidden` also the features:
    the last block's output before the final norm, [n_seq, width] (hidden True: what an EAGLE
    head reads; after it with products.Features.NORMED, what some MTP heads read), or with
    hidden a tuple of layers those layers' inputs (products.run_layers: an EAGLE-3 head's taps),
    from the same pass. With `logits_at` (an index, may be traced) only that
    row's logits are computed, [1, n_vocab]: a padded prefill needs only its last real row. The
    step runs as many blocks as the cache has layers: a cache of L < n_layer layers makes it a
    layer-skip draft over the same weights (LayerSkip, Elhoushi et al. 2024), with the final norm
    and head as usual.

    With `tree` (tree.Tree, static) the tokens are a token tree's nodes: node i sits at position
    pos + its depth and attends to the cache and its own ancestors (SpecInfer's tree attention);
    their keys and values are written at pos.. in node order, and the accepted path is moved to
    consecutive positions afterwards (decoding.compact).
    """
    taps = products.taps_of(hidden)
    x = parts.embed(params, tokens, positions(tokens, pos, config, tree), config)
    x, new_kv, *tapped = parts.blocks(params, x, cache, pos, config, tree, taps)
    cache = products.store(params, cache, new_kv, pos)
    logits = products.logits(params, x, parts.final_norm, config, logits_at)
    if not hidden:
        return logits, cache
    if hidden is products.Features.NORMED:
        return logits, cache, parts.final_norm(params, x, config)
    return logits, cache, tapped[0] if taps else x
