"""Batches that refill: B slots kept busy from a queue of Q requests (continuous batching, as vLLM
and SGLang serve). A fixed batch (batched.py) runs until its slowest sequence is done, its
finished slots idle; here a slot whose request is done takes the next request of the queue:
its prompt is prefilled into that slot (its cache, tokens, position, key and drafter state all
replaced) while the other slots go on.

The whole queue is one compiled program of fixed shape: a `lax.while_loop` of batched rounds
(AR: batched steps) over the B slots, each followed by the bookkeeping of the requests that
finished (their N new tokens and counts stored by request) and, when one did and the queue is
not empty, one batched start whose fresh states replace the finished slots only (`lax.cond`:
the prefill runs at a refill, not every round).

Each request decodes exactly as it would alone with its own key (keys(seed, Q)[i]): a slot's
round reads only its own state, and a refilled slot keeps nothing of its previous request. So
at T = 0 its tokens are its AR decode's, and at T > 0 they follow the target (tests/test_refill.py).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from specbench.model.decode import batched, decoding
from specbench.model.kernels import programs
from specbench.model.nets import network
from specbench.model.nets.layouts import batch_layout


class Queue(NamedTuple):
    """The requests, in the order they are served."""

    bufs: jax.Array  # [Q, bucket] int32: the prompts, padded
    n_prompts: jax.Array  # [Q] int32
    keys: jax.Array  # [Q, 2]: request i's own random stream


class Served(NamedTuple):
    """What a refilled run leaves: each request's new tokens and counts, and the slots' use."""

    tokens: jax.Array  # [Q, N] int32
    counts: object  # decoding.RoundCounts with a leading [Q] (SD), or None (AR)
    rounds: jax.Array  # [] int32: batched rounds (AR: steps) the slots ran
    idle: jax.Array  # [] int32: (slot, round) pairs in which a slot held no unfinished request
    starts: jax.Array  # [] int32: requests started (the whole queue): the first fill's, then the refills'
    spans: jax.Array  # [Q, 2] int32: each request's first round (its prefill ran before it) and last


def serve(start, start_one, step, queue: Queue, B: int, n_tokens: int, config, counted: bool) -> Served:
    """The refill loop over any decoding: start(bufs, n_prompts, keys) -> B slots' state (the first
    fill), start_one(buf, n_prompt, key) -> one slot's (a refill: one prefill for each request
    started, not the whole batch's), step(state) -> the next, as batched.py's; `counted`: the
    state has RoundCounts (SD)."""
    Q = queue.n_prompts.shape[0]
    # [Q]: T5's decoder starts every request from its one start token, a number for them all
    ends = jnp.broadcast_to(network.decoder_prompt_length(config, queue.n_prompts) + n_tokens, (Q,))
    starts = ends - n_tokens  # where each request's new tokens begin in its token buffer
    first = jnp.minimum(jnp.arange(B), Q - 1)
    slots = start(queue.bufs[first], queue.n_prompts[first], queue.keys[first])
    request = jnp.where(jnp.arange(B) < Q, jnp.arange(B), -1)
    out = jnp.zeros((Q, n_tokens), jnp.int32)
    per_request = (
        jax.tree_util.tree_map(lambda c: jnp.zeros((Q,) + c.shape[1:], c.dtype), slots.counts)
        if counted
        else None
    )
    filled = jnp.int32(min(B, Q))  # requests started: the next to start, and the count
    spans = jnp.zeros((Q, 2), jnp.int32)  # the first fill's requests begin at round 0
    carry = (slots, request, filled, out, per_request, spans, jnp.int32(0), jnp.int32(0), filled)

    def body(carry):
        slots, request, nxt, out, per_request, spans, rounds, idle, n_starts = carry
        mine = jnp.maximum(request, 0)
        active = (request >= 0) & (slots.n < ends[mine])
        new = step(slots)
        slots = hold(new, slots, active)
        done = (request >= 0) & (slots.n >= ends[mine])
        out, per_request = store(slots, done, request, starts[mine], out, per_request, n_tokens)
        order = jnp.cumsum(done) - 1
        take = done & (nxt + order < Q)
        idx = jnp.minimum(nxt + order, Q - 1)

        def refill(s):
            def one(i, s):
                j = idx[i]
                fresh = lambda s: put(s, i, start_one(queue.bufs[j], queue.n_prompts[j], queue.keys[j]))
                return lax.cond(take[i], fresh, lambda s: s, s)

            return lax.fori_loop(0, B, one, s)

        slots = lax.cond(jnp.any(take), refill, lambda s: s, slots)
        # a finished request's last round is this one (rounds + 1 done); a refill begins the next
        spans = spans.at[jnp.where(done, request, Q), 1].set(rounds + 1, mode="drop")
        spans = spans.at[jnp.where(take, nxt + order, Q), 0].set(rounds + 1, mode="drop")
        request = jnp.where(take, nxt + order, jnp.where(done, -1, request))
        counted_ = (rounds + 1, idle + jnp.sum(~active), n_starts + jnp.sum(take))
        return slots, request, nxt + jnp.sum(take), out, per_request, spans, *counted_

    slots, request, nxt, out, per_request, spans, rounds, idle, n_starts = lax.while_loop(
        lambda c: jnp.any(c[1] >= 0), body, carry
    )
    return Served(out, per_request, rounds, idle, n_starts, spans)


def store(slots, done, request, starts, out, per_request, n_tokens: int):
    """The finished slots' requests stored by request: their N new tokens (from `starts` [B] in
    their token buffers) and their counts (SD; per_request None for AR)."""
    Q = out.shape[0]
    rows = jnp.where(done, request, Q)  # Q: dropped
    new_tokens = jax.vmap(lambda t, s: lax.dynamic_slice(t, (s,), (n_tokens,)))(slots.tokens, starts)
    out = out.at[rows].set(new_tokens, mode="drop")
    if per_request is not None:
        per_request = jax.tree_util.tree_map(
            lambda a, c: a.at[rows].set(c, mode="drop"), per_request, slots.counts
        )
    return out, per_request


def put(slots, i, one):
    """The B slots' state with slot i's replaced by `one` (a single sequence's)."""
    return jax.tree_util.tree_map(lambda S, x: lax.dynamic_update_index_in_dim(S, x, i, 0), slots, one)


def _wide(mask, x):
    """mask [B] shaped to broadcast against x [B, ...]."""
    return mask.reshape(mask.shape + (1,) * (x.ndim - 1))


def hold(new, old, active):
    """new for the active slots; the others keep their tokens, position and counts."""
    keep = lambda a, b: jnp.where(_wide(active, a), a, b)
    held = new._replace(tokens=keep(new.tokens, old.tokens), n=keep(new.n, old.n))
    if hasattr(new, "counts"):
        held = held._replace(counts=jax.tree_util.tree_map(keep, new.counts, old.counts))
    return held


def serve_spec(
    draft_params,
    target_params,
    queue: Queue,
    B,
    n_tokens,
    drafter,
    target_config,
    warp,
    max_len,
    K,
    verdict=None,
):
    """Speculative decoding of the queue on B refilled slots (batched.spec_start and spec_round)."""
    start = lambda bufs, n, keys: batched.spec_start(
        draft_params, target_params, bufs, n, keys, drafter, target_config, warp, max_len, K
    )
    step = lambda s: batched.spec_round(
        draft_params, target_params, s, drafter, target_config, warp, K, verdict
    )
    d, t = batch_layout(draft_params), batch_layout(target_params)  # as the batch's rounds
    one = lambda buf, n, key: decoding.spec_start(d, t, buf, n, key, drafter, target_config, warp, max_len, K)
    return serve(start, one, step, queue, B, n_tokens, target_config, counted=True)


def serve_ar(params, queue: Queue, B, n_tokens, config, warp, max_len):
    """Autoregressive decoding of the queue on B refilled slots: the same refill, one token a step."""
    start = lambda bufs, n, keys: batched.ar_start(params, bufs, n, keys, config, warp, max_len)
    step = lambda s: batched.ar_step(params, s, config, warp)
    one = lambda buf, n, key: decoding.start(batch_layout(params), buf, n, key, config, warp, max_len)
    return serve(start, one, step, queue, B, n_tokens, config, counted=False)


serve_spec_jit = programs.jit(
    serve_spec,
    static_argnames=("B", "n_tokens", "drafter", "target_config", "max_len", "K", "verdict"),
)
serve_ar_jit = programs.jit(serve_ar, static_argnames=("B", "n_tokens", "config", "max_len"))
