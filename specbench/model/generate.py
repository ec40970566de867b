"""The front door of decoding: autoregressive and speculative generation, of one prompt or a batch.

    tokens, stats = autoregressive(target, prompts, N, warp, seed)
    tokens, stats = speculative(draft, target, prompts, N, K, warp, seed, drafter=...)

`prompts` is one prompt (a list of token ids; tokens come back as [N]) or a batch of them (a list
of lists; tokens [B, N], each sequence decoded with its own random stream). B = 1 runs
decoding.py's single-sequence programs, as fast as a vmapped batch of one (README, performance
notes), and the ones the host loop drives round by round; B > 1 runs batched.py's. `programs(B)`
and `inputs(...)` are that one dispatch, shared with the timers (timing.py).
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specbench.errors import DecodeError
from specbench.model.checkpoints import draft_vocab
from specbench.model.decode import batched, decoding, drafters, loops, open_loop, placed, refill
from specbench.model.decode.drafters import Drafter
from specbench.model.decode.sampling import Warp
from specbench.model.decode.sizing import Planned, plan_max_len, prompt_buffer, validate
from specbench.model.decode.stats import DecodeStats
from specbench.model.nets import layouts, network
from specbench.model.nets.network import Model


def as_batch(prompts) -> tuple[list[list[int]], bool]:
    """(the prompts as a list of token-id lists, whether a single prompt was given)."""
    if len(prompts) and isinstance(prompts[0], (list, tuple, np.ndarray)):
        return [list(p) for p in prompts], False
    return [list(prompts)], True


def plan(
    prompts: list[list[int]], n_tokens: int, K: int, models: list[Model], max_len: int | None = None
) -> int:
    """Validate every prompt (DecodeError naming the setting); the cache length that fits the
    longest, as Planned. A Planned max_len comes back as it is: the prompts were checked with it."""
    if isinstance(max_len, Planned):
        return max_len
    if not prompts:
        raise DecodeError("batch must be >= 1", "batch")
    for ids in prompts:
        validate(ids, n_tokens, K, models, max_len)
    n_ctx = min(m.config.n_ctx for m in models)
    return Planned(max_len or plan_max_len(max(map(len, prompts)), n_tokens, K, n_ctx))


class Inputs(NamedTuple):
    prompt_bufs: jax.Array  # [bucket] int32 for one sequence, [B, bucket] for a batch
    n_prompts: jax.Array  # [] or [B] int32
    keys: jax.Array  # [2] or [B, 2]: one random stream per sequence


def inputs(prompts: list[list[int]], max_len: int, seed: int) -> Inputs:
    """What the programs take: one prompt's buffer and PRNGKey(seed), or a batch's buffers and
    split(PRNGKey(seed), B), sequence i drawing from the i-th key."""
    if len(prompts) > 1:
        return Inputs(*batched.prompt_buffers(prompts, max_len), batched.keys(seed, len(prompts)))
    return Inputs(*prompt_buffer(prompts[0], max_len), jax.random.PRNGKey(seed))


class Programs(NamedTuple):
    """The pure step functions for a batch size and the jitted programs a generation runs: its
    start, then its loop (of AR steps, or of rounds); the step timers (measure/timing.py) share them."""

    ar_step: object
    spec_round: object
    ar_start_jit: object
    spec_start_jit: object
    ar_loop_jit: object
    spec_loop_jit: object


def programs(batch: int, apart: bool = False) -> Programs:
    """decoding.py's programs for one sequence, batched.py's for B > 1; with `apart` (a draft on
    other devices than its target's: placed.py) a round is two programs, its loop the host's."""
    if apart:
        return programs(batch)._replace(spec_loop_jit=placed.spec_loop)
    if batch == 1:
        return Programs(
            decoding.ar_step,
            lambda *a, **kw: decoding.spec_round(*a, **kw)[0],
            decoding.start_jit,
            decoding.spec_start_jit,
            loops.ar_loop_jit,
            loops.spec_loop_jit,
        )
    return Programs(
        batched.ar_step,
        batched.spec_round,
        batched.ar_start_jit,
        batched.spec_start_jit,
        batched.ar_loop_jit,
        batched.spec_loop_jit,
    )


def ends(config, n_prompts, n_tokens: int):
    """Where each sequence's generation ends (the spec loop's `end`): after its prompt and N new
    tokens, int32 like n_prompts ([] for one sequence, [B] for a batch)."""
    before = network.decoder_prompt_length(config, n_prompts)  # T5's: 1, whatever the prompt
    return (jnp.zeros_like(n_prompts) + before + n_tokens).astype(jnp.int32)


def _new_tokens(tokens, prompts: list[list[int]], n_tokens: int, config) -> np.ndarray:
    """The N new tokens of each sequence's buffer, after its own prompt (network.py: for an
    encoder-decoder, after the decoder's start token)."""
    rows = np.asarray(tokens).reshape(len(prompts), -1)
    starts = [network.decoder_prompt_length(config, len(ids)) for ids in prompts]
    return np.stack([rows[i, s : s + n_tokens] for i, s in enumerate(starts)])


def _check_loop(prompts, device_loop: bool, record: bool = False) -> None:
    if len(prompts) > 1 and (record or not device_loop):
        raise DecodeError(
            f"drives one sequence; a batch (--batch {len(prompts)}) runs in the device loop only", "host_loop"
        )


def autoregressive(
    target: Model,
    prompts,
    n_tokens: int,
    warp: Warp = Warp(),
    seed: int = 0,
    *,
    max_len: int | None = None,
    device_loop: bool = True,
):
    """Sample n_tokens from the target one at a time. Returns (new token ids [N] or [B, N], DecodeStats)."""
    batch, single = as_batch(prompts)
    _check_loop(batch, device_loop)
    max_len = plan(batch, n_tokens, 0, [target], max_len)
    x = inputs(batch, max_len, seed)
    kw = dict(config=target.config, warp=warp, max_len=max_len)
    if device_loop:  # the start, then the loop: two dispatches, no sync until the end
        p = programs(len(batch))
        state = p.ar_start_jit(target.params, *x, **kw)
        steps, hold = jnp.int32(n_tokens - 1), jnp.bool_(False)
        state = p.ar_loop_jit(target.params, state, steps, hold, config=target.config, warp=warp)
    else:  # one dispatch per token, no sync until the end
        state = decoding.start_jit(target.params, *x, **kw)
        for _ in range(n_tokens - 1):
            state = decoding.ar_step_jit(target.params, state, config=target.config, warp=warp)
    tokens = _new_tokens(state.tokens, batch, n_tokens, target.config)
    return (tokens[0] if single else tokens), DecodeStats.autoregressive(n_tokens, len(batch))


def speculative(
    draft: Model | None,
    target: Model,
    prompts,
    n_tokens: int,
    K: int = 4,
    warp: Warp = Warp(),
    seed: int = 0,
    *,
    max_len: int | None = None,
    device_loop: bool = True,
    record: bool = False,
    drafter: Drafter | None = None,
    draft_params=None,
):
    """Speculative sampling of n_tokens (Chen et al. 2023, Algorithm 2; Leviathan et al. 2023,
    Algorithm 1). Returns (new token ids [N] or [B, N], DecodeStats summed over the batch).

    `drafter` says who drafts (drafters.py); by default the draft model `draft`. Layer-skip drafts
    with the target's own weights and lookup with none, so `draft` may then be None.
    record=True runs the host loop, one sync per round, and keeps every round in stats.rounds.
    draft_params: what draft_params_for gives, when the caller made it once (the dial's reference
    is an AR generation: made here when not given).
    """
    batch, single = as_batch(prompts)
    _check_loop(batch, device_loop, record)
    max_len, drafter, draft_params = _drafting(
        draft, target, batch, n_tokens, K, warp, seed, drafter, draft_params, max_len
    )
    x = inputs(batch, max_len, seed)
    kw = dict(drafter=drafter, target_config=target.config, warp=warp, K=K)
    rounds, apart = [] if record else None, placed.apart(draft_params, target.params)
    if device_loop and not record:  # the start, then the loop of rounds: no sync until the end
        p = programs(len(batch), apart)
        state = p.spec_start_jit(draft_params, target.params, *x, max_len=max_len, **kw)
        end, unbounded = ends(target.config, x.n_prompts, n_tokens), jnp.int32(loops.NEVER)
        state = p.spec_loop_jit(draft_params, target.params, state, end, unbounded, jnp.bool_(False), **kw)
    else:
        state = decoding.spec_start_jit(draft_params, target.params, *x, max_len=max_len, **kw)
        end = network.decoder_prompt_length(target.config, len(batch[0])) + n_tokens
        while int(state.n) < end:  # the round's one host sync
            state, rnd = (placed.spec_round if apart else decoding.spec_round_jit)(
                draft_params, target.params, state, **kw
            )
            if record:
                rounds.append(
                    {
                        "drafts": np.asarray(rnd.drafts).tolist(),
                        "n_accepted": int(rnd.n_accepted),
                        "emitted": int(rnd.emitted),
                        "n_drafted": int(rnd.n_drafted),
                    }
                )
    tokens = _new_tokens(state.tokens, batch, n_tokens, target.config)
    stats = DecodeStats.from_counts(K, n_tokens, jax.device_get(state.counts), rounds)
    return (tokens[0] if single else tokens), stats


def token_times(
    method: str, draft, target: Model, prompt, n_tokens: int, K: int, warp: Warp, seed: int, **kw
):
    """When each of one prompt's N new tokens arrives, in seconds after its request began: the
    generation driven from the host with a sync after its start and after every step (AR) or
    round (SD), whose tokens arrive together. The syncs slow each step a little; the gaps between
    arrivals are the inter-token latency a streaming client sees. kw: drafter, draft_params,
    max_len, as speculative takes them."""
    clock, batch = time.perf_counter, [list(prompt)]
    if method == "ar":
        max_len = plan(batch, n_tokens, 0, [target], kw.get("max_len"))
        static = dict(config=target.config, warp=warp)
        t0 = clock()
        state = decoding.start_jit(target.params, *inputs(batch, max_len, seed), max_len=max_len, **static)
        times = [(jax.block_until_ready(state.n), clock() - t0)[1]]
        for _ in range(n_tokens - 1):
            state = decoding.ar_step_jit(target.params, state, **static)
            times.append((jax.block_until_ready(state.n), clock() - t0)[1])
        return np.asarray(times)
    max_len, drafter, draft_params = _drafting(draft, target, batch, n_tokens, K, warp, seed, **kw)
    x = inputs(batch, max_len, seed)
    static = dict(drafter=drafter, target_config=target.config, warp=warp, K=K)
    t0 = clock()
    state = decoding.spec_start_jit(draft_params, target.params, *x, max_len=max_len, **static)
    n, times = int(state.n), [clock() - t0]
    end = network.decoder_prompt_length(target.config, len(prompt)) + n_tokens
    while n < end:
        state, _ = decoding.spec_round_jit(draft_params, target.params, state, **static)
        n_new = int(state.n)  # the round's one sync
        times += [clock() - t0] * (n_new - n)
        n = n_new
    return np.asarray(times[:n_tokens])


def serve(draft, target: Model, prompts, n_tokens: int, K: int, warp: Warp, seed: int, slots: int, **kw):
    """A queue of prompts decoded speculatively on `slots` refilled slots (decode/refill.py):
    (new tokens [Q, N], DecodeStats over the requests, with the rounds the slots ran and the idle
    (slot, round) pairs). Request i draws from keys(seed, Q)[i], as sequence i of a fixed batch
    does. kw: drafter, draft_params, max_len, as speculative takes them."""
    batch, _ = as_batch(prompts)
    max_len, drafter, draft_params = _drafting(draft, target, batch, n_tokens, K, warp, seed, **kw)
    queue = _queue(batch, max_len, seed)
    static = dict(drafter=drafter, target_config=target.config, warp=warp, max_len=max_len, K=K)
    out = refill.serve_spec_jit(draft_params, target.params, queue, B=slots, n_tokens=n_tokens, **static)
    stats = DecodeStats.from_counts(K, n_tokens, jax.device_get(out.counts))
    return np.asarray(out.tokens), dataclasses.replace(stats, **_served(out, slots))


def _served(out, slots: int) -> dict:
    """What a refilled run's DecodeStats add: the slots, the rounds they ran, their idle share, its
    starts in batched starts' worth (each request's prefill a slot's share of one), and each
    request's first and last round (request_spans)."""
    return dict(
        batch_rounds=int(out.rounds),
        idle_slots=int(out.idle),
        n_slots=slots,
        starts=int(out.starts) / slots,
        request_spans=np.asarray(out.spans),
    )


def serve_autoregressive(
    target: Model, prompts, n_tokens: int, warp: Warp, seed: int, slots: int, max_len=None
):
    """serve's autoregressive baseline: the same queue, keys and refill, one token a step."""
    batch, _ = as_batch(prompts)
    max_len = plan(batch, n_tokens, 0, [target], max_len)
    queue = _queue(batch, max_len, seed)
    static = dict(config=target.config, warp=warp, max_len=max_len)
    out = refill.serve_ar_jit(target.params, queue, B=slots, n_tokens=n_tokens, **static)
    stats = DecodeStats.autoregressive(n_tokens, len(batch))
    return np.asarray(out.tokens), dataclasses.replace(stats, **_served(out, slots))


def open_slots(method: str, drafter, draft_params, target: Model, warp: Warp, max_len: int, K: int):
    """The slots an open loop drives, "ar"'s or "sd"'s (decode/open_loop.py: admit, advance)."""
    if method == "ar":
        return open_loop.ar_slots(target.params, target.config, warp, max_len)
    return open_loop.spec_slots(draft_params, target.params, drafter, target.config, warp, max_len, K)


def _drafting(draft, target, batch, n_tokens, K, warp, seed, drafter=None, draft_params=None, max_len=None):
    """(the cache length, the drafter, its weights) of a speculative decode of these prompts: K
    and a tree's depth checked (DecodeError), the weights made here when not given."""
    drafter = drafter or drafters.model_drafter(draft.config)
    if not isinstance(max_len, Planned):  # else checked where the run was prepared
        if K < 1:
            raise DecodeError(f"K must be >= 1 (got {K})", "K")
        if drafter.tree is not None and K != drafter.tree.depth:
            raise DecodeError(f"a tree of depth {drafter.tree.depth} drafts K = its depth (got {K})", "K")
        models = [target] + ([draft] if drafter.spec.draft_model else [])
        max_len = plan(batch, n_tokens, drafter.reach(K), models, max_len)
    if draft_params is None:
        draft_params = prepare_drafter(drafter, draft, target, batch, n_tokens, K, warp, seed, max_len)
    return max_len, drafter, draft_params


def _queue(batch: list[list[int]], max_len: int, seed: int) -> refill.Queue:
    """The requests of serve and serve_autoregressive: request i draws from keys(seed, Q)[i]."""
    return refill.Queue(*batched.prompt_buffers(batch, max_len), batched.keys(seed, len(batch)))


def prepare_drafter(drafter: Drafter, draft, target: Model, prompts, n_tokens, K, warp, seed, max_len):
    """What the drafter drafts with (draft_params_for): for the dial, the target's own
    tokens [max_len] of an AR generation of N + K tokens, so that every draft position of the
    last round has its true token. The dial drives one sequence, at T = 0."""
    if not drafter.spec.acceptance:
        return draft_params_for(drafter, draft, target)
    batch, _ = as_batch(prompts)
    if len(batch) > 1:
        raise DecodeError(f"drives one sequence; the dial has no batch (--batch {len(batch)})", "batch")
    if not warp.greedy:
        raise DecodeError(
            "the dial proposes the target's greedy tokens: it runs at temperature 0", "temperature"
        )
    x, static = inputs(batch, max_len, seed), dict(config=target.config, warp=warp)
    state = decoding.start_jit(target.params, *x, max_len=max_len, **static)
    state = loops.ar_loop_jit(target.params, state, jnp.int32(n_tokens + K - 1), jnp.bool_(False), **static)
    return draft_params_for(drafter, draft, target, state.tokens)


def draft_params_for(drafter: Drafter, draft: Model | None, target: Model, reference=None):
    """The weights a drafter runs (its kind's Kind.weights: the draft model's, the target's own,
    none, an EAGLE head's joined to the target's, or the dial's reference tokens), with a network
    drafter's head restricted to its vocabulary where it has one (draft_vocab.py, FR-Spec); all of
    them on a placed draft's device (placed.py)."""
    params = drafter.spec.weights(drafter, draft, target, reference)
    if drafter.vocab is not None:
        params = layouts.restrict_head(
            params, draft_vocab.frequent_ids(drafter.vocab, drafter.config.n_vocab)
        )
    if draft is not None and placed.apart(draft.params, target.params):  # all of it on the draft's device
        (device,) = placed.devices(draft.params)
        params = jax.device_put(params, device)
    return params
