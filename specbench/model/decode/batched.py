"""Batched decoding: B sequences decoded together, each advancing on its own.

Speculation pays because a memory-bound target step costs about as much for K+1 tokens as for
one. A server decodes many sequences at once; as the batch grows the step turns compute-bound,
verifying B (K+1) tokens costs more and more against B, and the gain shrinks, then reverses.
This module runs the per-sequence programs of decoding.py under `jax.vmap`, so that:

  * every sequence keeps its own tokens, position n, cache entries, random key and statistics:
    in one round each accepts its own number of drafts and rolls back on its own (decoding.py's
    round, unchanged, with n a [B] vector; the cache writes become scatters at B positions);
  * the whole generation is one `lax.while_loop`, one compiled program per (B, K), running
    until the slowest sequence has N new tokens;
  * a sequence that is done still occupies its slot in every batched step (the work is done for
    the whole batch), but commits nothing: its tokens, n and statistics are held. Those idle
    (sequence, round) slots are what stragglers waste, and they are reported.

Prompts of different lengths share one padded buffer [B, bucket]; each has its own n_prompt.
The autoregressive baseline is batched the same way (every sequence takes one token per step),
so a speedup compares like with like. Every sequence's tokens are exactly what decoding it
alone would give at T = 0, and follow the target's distribution at T > 0 (tests/test_batch.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model.decode import decoding, drafters
from specbench.model.decode.decoding import ARState, SpecState
from specbench.model.decode.loops import NEVER
from specbench.model.decode.sizing import bucket
from specbench.model.kernels import programs
from specbench.model.nets import network
from specbench.model.nets.layouts import batch_layout

# ---------------------------------------------------------------------------------------------
# Sizes


def memory_bytes(batch: int, configs: list, max_len: int, K: int, n_vocab: int, itemsize: int = 4) -> int:
    """Device memory a batch needs beyond the weights: every model's K/V cache, twice (the layer
    scan reads one copy and writes the next), and a round's float32 probabilities p [K, V],
    q [K+1, V] and logits [K+1, V] per sequence."""
    caches = sum(network.cache_elements(c, max_len) for c in configs) * itemsize
    rows = (3 * K + 2) * n_vocab * 4
    return batch * (2 * caches + rows + 4 * max_len)


def prompt_buffers(prompts: list[list[int]], max_len: int):
    """([B, bucket] prompts padded with zeros, their lengths [B])."""
    width = min(bucket(max(map(len, prompts))), max_len)
    buf = np.zeros((len(prompts), width), np.int32)
    for i, ids in enumerate(prompts):
        buf[i, : len(ids)] = ids
    return jnp.asarray(buf), jnp.asarray([len(ids) for ids in prompts], jnp.int32)


def keys(seed: int, batch: int):
    """One random stream per sequence: [B, 2]."""
    return jax.random.split(jax.random.PRNGKey(seed), batch)


# ---------------------------------------------------------------------------------------------
# The batched programs: decoding.py's, each sequence on its own


def ar_start(params, prompt_bufs, n_prompts, keys, config, warp, max_len, hidden=False) -> ARState:
    params = batch_layout(params)
    one = lambda b, n, k: decoding.start(params, b, n, k, config, warp, max_len, hidden)
    return jax.vmap(one)(prompt_bufs, n_prompts, keys)


def drafter_start(draft_params, prompt_bufs, n_prompts, features, drafter, max_len, source):
    """Each sequence's drafter state after its prompt (drafters.start under vmap)."""
    params = batch_layout(draft_params)
    one = lambda b, n, f: drafters.start(drafter, params, b, n, max_len, f, source)
    return jax.vmap(one)(prompt_bufs, n_prompts, features)


def ar_step(params, state: ARState, config, warp) -> ARState:
    params = batch_layout(params)
    return jax.vmap(lambda s: decoding.ar_step(params, s, config, warp))(state)


def ar_loop(params, state: ARState, n_steps, hold, config, warp) -> ARState:
    """loops.ar_loop for the whole batch: n_steps steps of every sequence, the count and hold
    traced (the generation's program and the AR token timer's)."""

    def body(_, s):
        new = ar_step(params, s, config, warp)
        return new._replace(n=jnp.where(hold, s.n, new.n))

    return lax.fori_loop(0, n_steps, body, state)


def ar_generate(params, prompt_bufs, n_prompts, n_tokens, keys, config, warp, max_len) -> ARState:
    state = ar_start(params, prompt_bufs, n_prompts, keys, config, warp, max_len)
    return ar_loop(params, state, n_tokens - 1, False, config, warp)


def spec_start(
    draft_params, target_params, prompt_bufs, n_prompts, keys, drafter, target_config, warp, max_len, K
) -> SpecState:
    draft_params, target_params = batch_layout(draft_params), batch_layout(target_params)
    one = lambda b, n, k: decoding.spec_start(
        draft_params, target_params, b, n, k, drafter, target_config, warp, max_len, K
    )
    return jax.vmap(one)(prompt_bufs, n_prompts, keys)


def spec_round(
    draft_params, target_params, state: SpecState, drafter, target_config, warp, K, verdict=None
) -> SpecState:
    """Every sequence's own round (decoding.spec_round under vmap); returns the new state."""
    draft_params, target_params = batch_layout(draft_params), batch_layout(target_params)
    one = lambda s: decoding.spec_round(
        draft_params, target_params, s, drafter, target_config, warp, K, verdict
    )[0]
    return jax.vmap(one)(state)


def hold_done(new: SpecState, old: SpecState, active) -> SpecState:
    """Commit the round only for active sequences: a finished one keeps its tokens, n and
    counts. Its caches and key may change; nothing reads them again."""
    keep = lambda a, b: jnp.where(active.reshape(active.shape + (1,) * (a.ndim - 1)), a, b)
    return new._replace(
        tokens=keep(new.tokens, old.tokens),
        n=keep(new.n, old.n),
        counts=jax.tree_util.tree_map(keep, new.counts, old.counts),
    )


def spec_generate(
    draft_params,
    target_params,
    prompt_bufs,
    n_prompts,
    n_tokens,
    keys,
    drafter,
    target_config,
    warp,
    max_len,
    K,
    verdict=None,
) -> SpecState:
    """Rounds of the whole batch until its slowest sequence has N new tokens (spec_loop)."""
    state = spec_start(
        draft_params, target_params, prompt_bufs, n_prompts, keys, drafter, target_config, warp, max_len, K
    )
    ends = network.decoder_prompt_length(target_config, n_prompts) + n_tokens
    return spec_loop(
        draft_params,
        target_params,
        state,
        ends,
        NEVER,
        False,
        drafter,
        target_config,
        warp,
        K,
        verdict,
    )


def spec_loop(
    draft_params,
    target_params,
    state: SpecState,
    ends,
    max_rounds,
    hold,
    drafter,
    target_config,
    warp,
    K,
    verdict=None,
) -> SpecState:
    """Rounds of the whole batch in one device loop until every sequence reaches its end [B] or
    max_rounds have run (traced: one program serves any); a finished sequence holds its tokens
    (hold_done). With hold, every round leaves n where it was: the round timer's loop (ends
    NEVER), the generation's own program."""

    def body(carry):
        i, s = carry
        new = hold_done(
            spec_round(draft_params, target_params, s, drafter, target_config, warp, K, verdict),
            s,
            s.n < ends,
        )
        return i + 1, new._replace(n=jnp.where(hold, s.n, new.n))

    go = lambda carry: (carry[0] < max_rounds) & jnp.any(carry[1].n < ends)
    return lax.while_loop(go, body, (jnp.int32(0), state))[1]


ar_start_jit = programs.jit(ar_start, static_argnames=decoding.AR_STATIC + ("hidden",))
drafter_start_jit = programs.jit(drafter_start, static_argnames=("drafter", "max_len", "source"))
ar_loop_jit = programs.jit(ar_loop, static_argnames=("config",), donate_argnames=("state",))
spec_start_jit = functools.partial(decoding.spec_start_in_two, ar_start_jit, drafter_start_jit)
spec_loop_jit = programs.jit(
    spec_loop,
    static_argnames=("drafter", "target_config", "K", "verdict"),
    donate_argnames=("state",),
)
