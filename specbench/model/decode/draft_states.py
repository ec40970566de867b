"""What each kind of drafter keeps between rounds (drafters.start makes it, its propose reads and
returns it): a typed pytree per kind, so a round's state says its kind by its type, not its keys."""

from __future__ import annotations

from typing import NamedTuple

import jax


class NoState(NamedTuple):
    """The dial, and prompt lookup over a decoder-only target (whose tokens hold the prompt)."""


class SourceState(NamedTuple):
    """Prompt lookup over an encoder-decoder target: the source its drafts may copy from."""

    source: jax.Array  # [bucket] int32: the prompt, the encoder's input
    n_source: jax.Array  # [] int32: its real tokens


class NetworkState(NamedTuple):
    """A draft model or layer-skip: the network's cache (network.start_cache)."""

    cache: dict


class EagleState(NamedTuple):
    """An EAGLE head: its one-layer cache, and the target's features of the committed tokens."""

    cache: dict
    feats: jax.Array  # [max_len, n_embd]
