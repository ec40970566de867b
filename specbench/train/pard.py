"""Adapting a draft model into a PARD draft (decode/pard.py; An et al. 2025, "PARD: Accelerating LLM
Inference with Low-Cost PARallel Draft Model Adaptation", arXiv:2504.18583), against a frozen
target, on corpus windows.

The draft gains one token, the mask (its embedding row starts as the mean of the others). Each
window of L tokens is read once as it is (the real rows, each predicting the next token, as the
draft always has) and, after `anchors` random prefix ends j, as drafting reads it: K - 1 masks at
j + 1 .. j + K - 1, mask m seeing the real tokens up to j and the masks before it, and predicting
token j + m + 1. All rows run in one pass under that attention mask; only some prefixes carry
masks, which is PARD's conditional drop of mask tokens in its simplest form (every anchor keeps
its whole chain, so each row's view is exactly what drafting gives it). The loss is the draft
training's, kd KL(q || p) + (1 - kd) CE, over the tokens the draft proposes among (its
drafting.json), q the target's distribution at the row's position.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specbench.model.nets import gpt2
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.layouts import as_loaded
from specbench.model.nets.network import Model
from specbench.train.data import sample_batch
from specbench.train.loop import Task, TrainConfig


class Sees(NamedTuple):
    """Which rows each row attends to [R, R]: what attention.cached_attention reads of a tree."""

    ancestors: jax.Array


@dataclasses.dataclass(frozen=True)
class PardLoss:
    K: int = 8  # masks per anchor: K - 1, the drafts one pass proposes: K
    anchors: int = 32  # prefixes per window that carry masks
    kd: float = 0.7


def masked(config: GPT2Config) -> GPT2Config:
    """A draft's config with the mask token appended to its vocabulary (its last id, its mask_token)."""
    return dataclasses.replace(config, n_vocab=config.n_vocab + 1, mask_token=config.n_vocab)


def with_mask(params: dict, config: GPT2Config) -> tuple[dict, GPT2Config]:
    """The draft with the mask appended (masked): its embedding row the mean of the others."""
    loaded = as_loaded(params)
    mask = jnp.mean(loaded["wte"], axis=0, keepdims=True)
    return {**loaded, "wte": jnp.concatenate([loaded["wte"], mask])}, masked(config)


def layout(L: int, how: PardLoss, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One batch's rows: (positions [R], masked [R] bool, sees [R, R] bool), the L real rows first,
    then each anchor's K - 1 masks; R = L + anchors (K - 1)."""
    starts = np.sort(rng.choice(L - how.K + 1, how.anchors, replace=False))  # prefix ends j
    m = np.arange(1, how.K)
    positions = np.concatenate([np.arange(L), (starts[:, None] + m[None]).ravel()])
    masked = np.arange(positions.size) >= L
    anchor = np.concatenate([np.full(L, -1), np.repeat(np.arange(how.anchors), how.K - 1)])
    j = np.where(masked, starts[np.maximum(anchor, 0)], positions)  # the real prefix each row sees
    real_seen = ~masked[None, :] & (positions[None, :] <= j[:, None])
    later = positions[None, :] <= positions[:, None]
    same_chain = masked[:, None] & (anchor[:, None] == anchor[None, :]) & later
    return positions, masked, real_seen | same_chain


def target_logq(target: Model, x, vocab):
    """The frozen target over windows x [B, L]: log q over the draft's tokens [B, L, V']."""
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), as_loaded(target.params))
    feats = jax.vmap(lambda seq: gpt2.transformer(half, seq, target.config))(x)
    return jax.lax.stop_gradient(jax.nn.log_softmax((feats @ half["wte"][vocab].T).astype(jnp.float32)))


def draft_logp(params, x, positions, masked, sees, config: GPT2Config, vocab, dtype=jnp.bfloat16):
    """The draft over the rows (real tokens x[positions], or the mask), under `sees`, its matrices
    in `dtype`: log p over the tokens `vocab` and the mask (normalised over both), the mask's
    column dropped [B, R, V']."""
    half = jax.tree_util.tree_map(lambda p: p.astype(dtype), params)
    mask = config.n_vocab - 1
    columns = jnp.append(vocab, mask)

    def one(seq):
        tokens = jnp.where(masked, mask, seq[positions])
        h = half["wte"][tokens] + half["wpe"][positions]
        h, _ = gpt2.blocks(half, h, gpt2.empty_cache(config, 0, h.dtype), 0, config, Sees(sees))
        return gpt2.final_norm(half, h, config) @ half["wte"][columns].T

    return jax.nn.log_softmax(jax.vmap(one)(x).astype(jnp.float32))[..., :-1]


def losses(params, target: Model, x, y, positions, masked, sees, config, vocab, index, how: PardLoss):
    """(total, (cross-entropy, top-1 agreement with the target on the mask rows)): y's tokens
    outside the vocabulary (index -1) are left out of the cross-entropy."""
    logq = target_logq(target, x, vocab)[:, positions]  # the target at each row's position
    logp = draft_logp(params, x, positions, masked, sees, config, vocab)
    labels = index[y[:, positions]]
    known = labels >= 0
    picked = jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], -1)[..., 0]
    ce = -jnp.sum(jnp.where(known, picked, 0.0)) / jnp.maximum(jnp.sum(known), 1)
    kl = jnp.mean(jnp.sum(jnp.exp(logq) * (logq - logp), axis=-1))
    agree = jnp.sum((jnp.argmax(logp, -1) == jnp.argmax(logq, -1)) * masked) / (x.shape[0] * masked.sum())
    return how.kd * kl + (1 - how.kd) * ce, (ce, agree)


def per_position(params, target: Model, x, config, vocab, how: PardLoss, rng) -> list[float]:
    """Top-1 agreement of draft i + 1 (mask m = i; i = 0 the real row) with the target's top
    token over windows x: what greedy acceptance at each position is made of."""
    positions, masked, sees = layout(x.shape[1], how, rng)
    logq = target_logq(target, x, vocab)[:, positions]
    logp = draft_logp(params, x, positions, masked, sees, config, vocab)
    agree = np.asarray(jnp.argmax(logp, -1) == jnp.argmax(logq, -1))
    L = x.shape[1]
    chains = agree[:, L:].reshape(x.shape[0], how.anchors, how.K - 1)
    anchors = layout_anchors(positions, L, how)
    first = agree[:, anchors]  # draft 1: the real row at the anchor
    return [float(first.mean())] + [float(chains[..., m].mean()) for m in range(how.K - 1)]


def layout_anchors(positions: np.ndarray, L: int, how: PardLoss) -> np.ndarray:
    """The prefix ends of a layout's anchors (the position before each chain's first mask)."""
    return positions[L :: how.K - 1] - 1


def pard_task(
    draft: Model, target: Model, vocab, train_tokens, val_tokens, tc: TrainConfig, how: PardLoss
) -> Task:
    """A PARD adaptation of `draft` (with_mask) for the loop: batches of windows and their rows."""
    import optax

    init_params, config = with_mask(draft.params, draft.config)
    vocab = jnp.asarray(vocab, jnp.int32)  # the tokens it drafts among (the mask beside them)
    index = jnp.full(config.n_vocab, -1, jnp.int32).at[vocab].set(jnp.arange(vocab.size, dtype=jnp.int32))

    def make_update(opt):
        @jax.jit
        def update(params, opt_state, x, y, positions, masked, sees):
            (loss, (ce, _)), grads = jax.value_and_grad(losses, has_aux=True)(
                params, target, x, y, positions, masked, sees, config, vocab, index, how
            )
            updates, opt_state = opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss, ce

        return update

    def next_batch(rng):
        x, y = sample_batch(train_tokens, tc.batch, tc.ctx, rng)
        return (x, y, *layout(tc.ctx, how, rng))

    def evaluate(params) -> float:
        rng = np.random.default_rng(1234)
        total = []
        for _ in range(tc.eval_batches):
            x, y = sample_batch(val_tokens, tc.batch, tc.ctx, rng)
            total.append(
                losses(params, target, x, y, *layout(tc.ctx, how, rng), config, vocab, index, how)[0]
            )
        return float(np.mean(total))

    return Task(lambda: init_params, make_update, next_batch, evaluate, perplexity=False)
