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

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench import decoding, drafters
from specbench.decoding import DecodeError, DecodeStats, bucket, plan_max_len, validate
from specbench.drafters import Drafter
from specbench.gpt2 import GPT2Config
from specbench.sampling import Warp, accept_reject
from specbench.weights import Model


# ---------------------------------------------------------------------------------------------
# Sizes


def plan_batch(prompts: list[list[int]], n_tokens: int, K: int, models: list[Model]) -> int:
    """Validate every prompt of the batch; the cache length that fits the longest."""
    if not prompts:
        raise DecodeError("batch must be >= 1")
    for ids in prompts:
        validate(ids, n_tokens, K, models, None)
    return plan_max_len(max(map(len, prompts)), n_tokens, K, min(m.config.n_ctx for m in models))


def memory_bytes(batch: int, configs: list[GPT2Config], max_len: int, K: int, n_vocab: int,
                 itemsize: int = 4) -> int:
    """Device memory a batch needs beyond the weights: every model's K/V cache, twice (the layer
    scan reads one copy and writes the next), and a round's float32 probabilities p [K, V],
    q [K+1, V] and logits [K+1, V] per sequence."""
    caches = sum(2 * c.n_layer * max_len * c.n_embd for c in configs) * itemsize
    rows = (3 * K + 2) * n_vocab * 4
    return batch * (2 * caches + rows + 4 * max_len)


def _buffers(prompts: list[list[int]], max_len: int):
    """[B, bucket] prompts padded with zeros, and their lengths [B]."""
    width = min(bucket(max(map(len, prompts))), max_len)
    buf = np.zeros((len(prompts), width), np.int32)
    for i, ids in enumerate(prompts):
        buf[i, : len(ids)] = ids
    return jnp.asarray(buf), jnp.asarray([len(ids) for ids in prompts], jnp.int32)


def _keys(seed: int, batch: int):
    """One random stream per sequence."""
    return jax.random.split(jax.random.PRNGKey(seed), batch)


# ---------------------------------------------------------------------------------------------
# The batched programs


def _ar_start(params, prompt_bufs, n_prompts, keys, config, warp, max_len):
    return jax.vmap(lambda b, n, k: decoding._start(params, b, n, k, config, warp, max_len))(prompt_bufs, n_prompts,
                                                                                             keys)


def _ar_step(params, state, config, warp):
    return jax.vmap(lambda s: decoding._ar_step(params, s, config, warp))(state)


def _ar_generate(params, prompt_bufs, n_prompts, n_tokens, keys, config, warp, max_len):
    state = _ar_start(params, prompt_bufs, n_prompts, keys, config, warp, max_len)
    return lax.fori_loop(0, n_tokens - 1, lambda _, s: _ar_step(params, s, config, warp), state)


def _spec_start(draft_params, target_params, prompt_bufs, n_prompts, keys, drafter, target_config, warp, max_len, K):
    one = lambda b, n, k: decoding._spec_start(draft_params, target_params, b, n, k, drafter, target_config, warp,
                                               max_len, K)
    return jax.vmap(one)(prompt_bufs, n_prompts, keys)


def _spec_round(draft_params, target_params, state, drafter, target_config, warp, K, verdict=accept_reject):
    """Every sequence's own round (decoding._spec_round under vmap); returns the new state."""
    one = lambda s: decoding._spec_round(draft_params, target_params, s, drafter, target_config, warp, K, verdict)[0]
    return jax.vmap(one)(state)


def _hold_done(new, old, active):
    """Commit the round only for active sequences: a finished one keeps its tokens, n and
    statistics. Its caches and key may change; nothing reads them again."""
    keep = lambda a, b: jnp.where(active.reshape(active.shape + (1,) * (a.ndim - 1)), a, b)
    return {**new, "tokens": keep(new["tokens"], old["tokens"]), "n": keep(new["n"], old["n"]),
            "stats": jax.tree_util.tree_map(keep, new["stats"], old["stats"])}


def _spec_generate(draft_params, target_params, prompt_bufs, n_prompts, n_tokens, keys, drafter, target_config, warp,
                   max_len, K, verdict=accept_reject):
    state = _spec_start(draft_params, target_params, prompt_bufs, n_prompts, keys, drafter, target_config, warp,
                        max_len, K)
    ends = n_prompts + n_tokens

    def body(state):
        new = _spec_round(draft_params, target_params, state, drafter, target_config, warp, K, verdict)
        return _hold_done(new, state, state["n"] < ends)

    return lax.while_loop(lambda s: jnp.any(s["n"] < ends), body, state)


_static = ("config", "warp", "max_len")
_spec_static = ("drafter", "target_config", "warp", "max_len", "K", "verdict")
ar_start_jit = jax.jit(_ar_start, static_argnames=_static)
ar_generate_jit = jax.jit(_ar_generate, static_argnames=_static)
spec_start_jit = jax.jit(_spec_start, static_argnames=_spec_static[:-1])
spec_generate_jit = jax.jit(_spec_generate, static_argnames=_spec_static)


# ---------------------------------------------------------------------------------------------
# Public entry points


def _new_tokens(state, prompts: list[list[int]], n_tokens: int) -> np.ndarray:
    tokens = np.asarray(state["tokens"])
    return np.stack([tokens[i, len(ids): len(ids) + n_tokens] for i, ids in enumerate(prompts)])


def autoregressive(target: Model, prompts: list[list[int]], n_tokens: int, warp: Warp = Warp(), seed: int = 0, *,
                   max_len: int | None = None):
    """B = len(prompts) sequences, one token each per target step. Returns (tokens [B, N], DecodeStats)."""
    max_len = max_len or plan_batch(prompts, n_tokens, 0, [target])
    bufs, n_prompts = _buffers(prompts, max_len)
    state = ar_generate_jit(target.params, bufs, n_prompts, jnp.int32(n_tokens), _keys(seed, len(prompts)),
                            config=target.config, warp=warp, max_len=max_len)
    B, K0 = len(prompts), np.zeros(0, np.int64)
    return _new_tokens(state, prompts, n_tokens), DecodeStats(0, B * n_tokens, B * (n_tokens - 1),
                                                              np.array([B * (n_tokens - 1)]), K0, K0, n_seqs=B,
                                                              batch_rounds=n_tokens - 1)


def speculative(draft: Model | None, target: Model, prompts: list[list[int]], n_tokens: int, K: int = 4,
                warp: Warp = Warp(), seed: int = 0, *, max_len: int | None = None, drafter: Drafter | None = None):
    """Speculative sampling of N tokens for each of B = len(prompts) sequences together.

    Returns (tokens [B, N], DecodeStats summed over the batch, with n_seqs = B, batch_rounds =
    the rounds the batch ran, and idle_slots = the (sequence, round) slots of finished sequences).
    """
    if K < 1:
        raise DecodeError(f"K must be >= 1 (got {K})")
    drafter = drafter or drafters.model_drafter(draft.config)
    draft_params = decoding.draft_params_for(drafter, draft, target)
    models = [target] + ([draft] if drafter.kind == "model" else [])
    max_len = max_len or plan_batch(prompts, n_tokens, K, models)
    bufs, n_prompts = _buffers(prompts, max_len)
    state = spec_generate_jit(draft_params, target.params, bufs, n_prompts, jnp.int32(n_tokens),
                              _keys(seed, len(prompts)), drafter=drafter, target_config=target.config, warp=warp,
                              max_len=max_len, K=K)
    s = jax.device_get(state["stats"])
    rounds = s["rounds"]  # [B]: each sequence's own rounds
    total = lambda x: np.asarray(x).sum(axis=0)
    B = len(prompts)
    stats = DecodeStats(K, B * n_tokens, int(rounds.sum()), total(s["hist"]), total(s["evaluated"]),
                        total(s["accepted"]), None, total(s["drafted"]), n_seqs=B, batch_rounds=int(rounds.max()),
                        idle_slots=int(B * rounds.max() - rounds.sum()))
    return _new_tokens(state, prompts, n_tokens), stats
