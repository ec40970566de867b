"""Drafts without a network: prompt lookup (Saxena 2023), which copies what followed the latest
earlier occurrence of the text's suffix, and the acceptance dial, which proposes the target's own
greedy tokens and keeps each with a set probability. Pure functions over token buffers;
Below, the two drafters made of them (drafters.KINDS)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from specbench.errors import DecodeError
from specbench.model.decode import sampling
from specbench.model.decode.draft_states import NoState, SourceState
from specbench.model.decode.drafter import Drafter
from specbench.model.decode.sampling import Warp


def with_source(source, n_source, tokens, n):
    """(the source's n_source real tokens followed by the decoder's tokens, how many of it are
    real: n_source + n), one buffer of len(source) + len(tokens) for lookup."""
    idx = jnp.arange(source.shape[0] + tokens.shape[0])
    from_source = source[jnp.clip(idx, 0, source.shape[0] - 1)]
    from_tokens = tokens[jnp.clip(idx - n_source, 0, tokens.shape[0] - 1)]
    return jnp.where(idx < n_source, from_source, from_tokens), n_source + n


def lookup(tokens, n, K: int, ngram: int):
    """Prompt lookup over tokens[0 .. n-1]: (drafts [K], how many are real).

    For g = ngram .. 1, the most recent earlier j with tokens[j : j+g] == tokens[n-g : n]; the
    longest g that matches wins. The proposal is what followed the match, continued with the
    period n - g - j where it would run past n (so "a b a b" proposes "a b a b ...").
    """
    L = tokens.shape[0]
    idx = jnp.arange(L)
    best_j, found = jnp.int32(-1), jnp.int32(0)
    for g in range(ngram, 0, -1):
        match = (idx + g <= n - 1) & (idx <= n - g - 1)  # an earlier occurrence, with a token after it
        for t in range(g):
            match &= jnp.roll(tokens, -t) == tokens[jnp.maximum(n - g + t, 0)]
        match &= n - g >= 0
        j = jnp.max(jnp.where(match, idx, -1))
        take = (found == 0) & (j >= 0)
        best_j = jnp.where(take, j, best_j)
        found = jnp.where(take, g, found)
    period = jnp.maximum(n - found - best_j, 1)
    src = best_j + found + jnp.arange(K) % period
    drafts = tokens[jnp.clip(src, 0, L - 1)]
    n_drafted = jnp.where(found > 0, K, 0).astype(jnp.int32)
    return drafts.astype(jnp.int32), n_drafted


def dial(reference, n, key, K: int, n_vocab: int, acceptance: float):
    """The dial's K drafts for positions n .. n+K-1: reference[n + i] with probability
    `acceptance`, else reference[n + i] + 1 + j (mod V), j uniform in 0..V-2: never the true token."""
    k_keep, k_wrong = jax.random.split(key)
    true = lax.dynamic_slice(reference, (n,), (K,))
    keep = jax.random.uniform(k_keep, (K,)) < acceptance
    wrong = (true + 1 + jax.random.randint(k_wrong, (K,), 0, n_vocab - 1)) % n_vocab
    return jnp.where(keep, true, wrong).astype(jnp.int32)


# ---------------------------------------------------------------------------------------------
# As drafters (drafters.KINDS): their start and propose


def no_weights(drafter: Drafter, draft, target, reference=None):
    """Prompt lookup drafts with no weights."""
    return {}


def dial_weights(drafter: Drafter, draft, target, reference=None):
    """The dial drafts from the target's greedy tokens `reference` [max_len] (generate.prepare_drafter)."""
    if reference is None:
        raise DecodeError("the dial needs the target's greedy tokens (generate.prepare_drafter)", "drafter")
    return {"reference": reference, "acceptance": jnp.float32(drafter.acceptance)}


def no_state(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """The dial keeps no state of its own between rounds."""
    return NoState()


def lookup_start(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """Prompt lookup keeps nothing over a decoder-only target, whose tokens hold the prompt; over
    an encoder-decoder's, the source, so that its drafts can copy from it (lookup_propose)."""
    return SourceState(prompt_buf, jnp.int32(n_prompt)) if source else NoState()


def lookup_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """Prompt lookup's drafts (lookup), proposed with certainty: one-hot p. Over an
    encoder-decoder's decoder it searches the source followed by the decoder's tokens (with_source)."""
    if isinstance(dstate, SourceState):
        haystack, n_seen = with_source(dstate.source, dstate.n_source, tokens, n)
        drafts, n_drafted = lookup(haystack, n_seen, K, drafter.ngram)
    else:
        drafts, n_drafted = lookup(tokens, n, K, drafter.ngram)
    p = jax.nn.one_hot(drafts, sampling.p_width(warp, n_vocab), dtype=jnp.float32)
    return dstate, drafts, sampling.zero_after(p, n_drafted), n_drafted


def dial_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """The dial's drafts (dial), proposed with certainty as lookup's: one-hot p (no columns at
    T = 0, its only use)."""
    drafts = dial(params["reference"], n, key, K, n_vocab, params["acceptance"])
    return (
        dstate,
        drafts,
        jax.nn.one_hot(drafts, sampling.p_width(warp, n_vocab), dtype=jnp.float32),
        jnp.int32(K),
    )
