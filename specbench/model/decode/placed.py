"""A draft model placed apart from its target: on a device of its own, or on one device of the
target's mesh (`--draft-device N`), where the default keeps it on every device of the target's.

One compiled program cannot span both (its arguments must share their devices), so each round is
two, as a serving system with a separate draft device runs it:
  1. the draft's, on its device: step 1 of decoding.spec_round (drafters.propose), with the key
     that round splits for it, reading the token buffer carried over from the target;
  2. the target's, on its devices: steps 2-4 (decoding.spec_round given the proposal), the drafts
     and their p carried over by jax.device_put.
The rounds are driven from the host, one sync a round to read how far the sequence has got. Each
round computes what the one-program round computes, from the same keys: the tokens are the same
at every temperature (tests/mesh_worker.py), so the one-program round's exactness tests hold for
this one. The start needs nothing new: the target's start and the drafter's each run where their
weights are (decoding.spec_start_in_two).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specbench.model.decode import decoding, drafters
from specbench.model.decode.decoding import SpecState
from specbench.model.decode.loops import NEVER
from specbench.model.kernels import programs


def devices(params) -> set:
    """The devices a model's weights are on."""
    return {d for x in jax.tree_util.tree_leaves(params) for d in x.devices()}


def apart(draft_params, target_params) -> bool:
    """Whether the draft's weights are on other devices than the target's: its rounds are then
    two programs (this module). False for a drafter without weights of its own."""
    own = devices(draft_params)
    return bool(own) and own != devices(target_params)


def _propose(draft_params, dstate, tokens, n, key, drafter, warp, K, n_vocab):
    """Step 1 of a round, from the round's key as decoding.spec_round splits it."""
    _, k_draft, _ = jax.random.split(key, 3)
    return drafters.propose(drafter, draft_params, dstate, tokens, n, k_draft, warp, K, n_vocab)


propose_jit = programs.jit(_propose, static_argnames=("drafter", "K", "n_vocab"))


def spec_round(
    draft_params, target_params, state: SpecState, drafter, target_config, warp, K, verdict=None
) -> tuple[SpecState, decoding.Round]:
    """One round as two programs: the draft's proposal on its device, the target's verdict on its
    own, the drafts carried between them."""
    (device,) = devices(draft_params)
    here = jax.device_put((state.tokens, state.n, state.key), device)
    static = dict(drafter=drafter, warp=warp, K=K, n_vocab=target_config.n_vocab)
    dstate, *proposal = propose_jit(draft_params, state.draft, *here, **static)
    there = jax.device_put(tuple(proposal), state.tokens.sharding)
    new, rnd = decoding.spec_round_jit(
        None,
        target_params,
        state._replace(draft=None),
        drafter=drafter,
        target_config=target_config,
        warp=warp,
        K=K,
        verdict=verdict,
        proposal=there,
    )
    return new._replace(draft=dstate), rnd


def spec_loop(draft_params, target_params, state: SpecState, end, max_rounds, hold, **static) -> SpecState:
    """loops.spec_loop's rounds (until n reaches `end` or `max_rounds` have run; with hold, n left
    where it was), each as spec_round's two programs, from the host: one sync a round to read n,
    none in a timer's loop (end NEVER)."""
    end, max_rounds, held = int(end), int(max_rounds), int(state.n) if bool(hold) else None
    for _ in range(max_rounds):
        if end != NEVER and int(state.n) >= end:
            break
        state, _ = spec_round(draft_params, target_params, state, **static)
        if held is not None:
            state = state._replace(n=jnp.int32(held))
    return state
