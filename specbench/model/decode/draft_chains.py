"""The network drafters (model, layer-skip, EAGLE; drafters.py has the registry): the weights each
drafts with, its state after the prompt, and its chain of drafts: up to K cached steps, each
drawing its draft from the draft's warped distribution, stopping early under dynamic K (the
draft's own confidence)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from specbench.errors import DecodeError
from specbench.model.decode import sampling
from specbench.model.decode.draft_states import EagleState, NetworkState
from specbench.model.decode.drafter import Drafter
from specbench.model.decode.sampling import Warp, draw
from specbench.model.nets import eagle, layouts, network
from specbench.model.nets.network import Model


def model_weights(drafter: Drafter, draft: Model | None, target: Model, reference=None):
    """A draft model's own weights; DecodeError when there is none or its vocabulary differs."""
    if draft is None:
        raise DecodeError("the model drafter needs a draft model", "draft")
    if draft.config.mask_token is not None:
        raise DecodeError(f"{draft.name} is a PARD draft (it has a mask token): use --drafter pard", "draft")
    if draft.config.n_vocab != target.config.n_vocab:
        raise DecodeError(
            f"draft and target must share the vocabulary (vocab sizes "
            f"{sorted({draft.config.n_vocab, target.config.n_vocab})})",
            "draft",
        )
    return draft.params


def target_weights(drafter: Drafter, draft: Model | None, target: Model, reference=None):
    """Layer-skip drafts with the target's own weights (its first layers)."""
    return target.params


def eagle_weights(drafter: Drafter, draft: Model | None, target: Model, reference=None):
    """An EAGLE head (`draft`) joined to the target's embeddings, final norm and head, or an
    EAGLE-3 head to what it reads of the target (eagle.attach)."""
    if draft is None:
        raise DecodeError(f"the {drafter.name} drafter needs a head", "draft")
    wrong = eagle.mismatch(draft.config, target.config, draft.params)
    if wrong:
        raise DecodeError(f"the head {draft.name} {wrong}", "draft")
    return eagle.attach(draft.params, target.params, eagle.drafting_config(draft.config, target.config))


# ---------------------------------------------------------------------------------------------
# start


def eagle_start(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """The head's state after the prompt: its cache over the prompt's rows, each reading the
    target's feature of the row before (eagle.shifted), and those features in a [max_len, width]
    buffer (rows past the prompt are padding's, rewritten before they are read)."""
    cache = network.init_cache(drafter.config, max_len, params["wte"].dtype)
    _, _, cache = eagle.step(
        params, cache, eagle.shifted(features), prompt_buf, 0, drafter.config, logits_at=0
    )
    feats = jnp.zeros((max_len, features.shape[-1]), features.dtype)  # an EAGLE-3 head's: its taps
    return EagleState(cache, lax.dynamic_update_slice_in_dim(feats, features, 0, 0))


def network_start(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """A network drafter's cache after the prompt: as many layers as its config has. An
    encoder-decoder draft encodes the prompt as its source and reads its decoder's start token
    (network.py)."""
    config = drafter.config
    cache = network.start_cache(params, prompt_buf, n_prompt, config, max_len)
    # runs as many layers as the cache has
    _, cache = network.step(params, cache, network.decoder_prompt(prompt_buf, config), 0, config)
    return NetworkState(cache)


# ---------------------------------------------------------------------------------------------
# propose


def network_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """Model and layer-skip drafting: K cached steps (fewer with dynamic K), each drawing from p.

    The first step re-reads [tokens[n-2], tokens[n-1]] at n-2, n-1: that writes the previous
    round's last draft into the cache when all of them were accepted (decoding.py, step 1).
    A head restricted to some tokens (draft_vocab.py) draws among them: its column j is token
    head_tokens[j], and p is zero at every other token.
    """
    config = drafter.config
    logits, cache = network.step(
        params, dstate.cache, lax.dynamic_slice(tokens, (n - 2,), (2,)), n - 2, config, logits_at=1
    )
    after = lambda cache, x, pos: network.step(params, cache, x[None], pos, config)
    cache, drafts, p, n_drafted = chain(drafter, params, logits, cache, after, n, key, warp, K, n_vocab)
    return NetworkState(cache), drafts, p, n_drafted


def eagle_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """EAGLE's drafts, a chain: the head re-reads the K + 1 positions up to the pending token
    with the target's true features (eagle.window; that rewrites what the last round drafted on
    its own predictions), then each draft reads the feature the head predicted before it."""
    config = drafter.config
    s, window, before, row = eagle.window(dstate.feats, tokens, n, K + 1)
    logits, h, cache = eagle.step(params, dstate.cache, before, window, s, config, logits_at=row)
    h = lax.dynamic_slice_in_dim(h, row, 1)  # h_{n-1}: what the first draft's successor reads

    def after(state, x, pos):
        cache, h = state
        logits, h, cache = eagle.step(params, cache, h, x[None], pos, config)
        return logits, (cache, h)

    (cache, _), drafts, p, n_drafted = chain(
        drafter, params, logits, (cache, h), after, n, key, warp, K, n_vocab
    )
    return dstate._replace(cache=cache), drafts, p, n_drafted


def chain(drafter: Drafter, params, logits, state, after, n, key, warp: Warp, K: int, n_vocab: int):
    """Up to K drafts from a network, the first drawn from `logits` [1, V'] and each next one from
    after(state, token, its position) -> (logits, state): K steps, fewer with dynamic K.
    Returns (state, drafts [K], p [K, V], n_drafted)."""
    keys = jax.random.split(key, K)
    V = sampling.p_width(warp, n_vocab)
    head_tokens = layouts.head_tokens(params)
    # p is kept in the head's own columns while drafting, and spread over the vocabulary once
    columns = V if head_tokens is None or V == 0 else head_tokens.shape[0]

    def confident(logits):
        return (
            drafter.confidence is None
            or jnp.max(jax.nn.softmax(logits.astype(jnp.float32))) >= drafter.confidence
        )

    def body(carry):
        i, state, logits, drafts, p, _ = carry
        column, p_i = draw(keys[i], logits[0], warp)
        x = column if head_tokens is None else head_tokens[column]
        drafts, p = drafts.at[i].set(x), p.at[i].set(p_i[:columns])
        go_on = confident(logits[0]) if drafter.confidence is not None else jnp.bool_(True)
        # the next draft's logits; after the K-th draft there is none to compute
        logits, state = lax.cond(go_on & (i + 1 < K), lambda: after(state, x, n + i), lambda: (logits, state))
        return i + 1, state, logits, drafts, p, go_on

    def more(carry):
        i, *_, go_on = carry
        return (i < K) & go_on

    init = (
        jnp.int32(0),
        state,
        logits,
        jnp.zeros(K, jnp.int32),
        jnp.zeros((K, columns), jnp.float32),
        jnp.bool_(True),
    )
    n_steps, state, _, drafts, p, last_confident = lax.while_loop(more, body, init)
    if columns != V:  # column j is token head_tokens[j]; p is zero at every other token
        p = jnp.zeros((K, V), jnp.float32).at[:, head_tokens].set(p)
    # with dynamic K the draft whose confidence fell short is not proposed
    n_drafted = jnp.where(last_confident, n_steps, n_steps - 1).astype(jnp.int32)
    if drafter.confidence is not None:  # without dynamic K every one of the K rows was drafted
        p = sampling.zero_after(p, n_drafted)
    return state, drafts, p, n_drafted
