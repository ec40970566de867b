"""Serving under arrivals (an open loop): B slots, each admitting a request once it has arrived and
the slot is free, as vLLM's and SGLang's serving benchmarks send requests at a rate. The host
holds the clock and drives the slots (measure/serving.py), one dispatch a batched round; these
are its programs, each compiled once for the run:

    empty(...)    B slots holding no request (the first requests prefilled, then left idle)
    admit(...)    slot i's state replaced by a request's start: its prefill and first token
    advance(...)  one batched round (AR: one step) of the active slots; the others held

A request decodes as it would alone with its own key (keys(seed, Q)[i]), as in a refilled closed
queue (refill.py): a slot's round reads only its own state, and an admitted slot keeps nothing of
the request before. So its tokens do not depend on when it arrived (tests/test_serving.py).
"""

from __future__ import annotations

from typing import NamedTuple

from specbench.model.decode import batched, decoding, refill
from specbench.model.kernels import programs
from specbench.model.nets.layouts import batch_layout


def admit_spec(
    draft_params, target_params, slots, i, buf, n_prompt, key, drafter, target_config, warp, max_len, K
):
    """Slot i takes a request: its speculative start (decoding.spec_start) in place of the slot's state."""
    d, t = batch_layout(draft_params), batch_layout(target_params)
    one = decoding.spec_start(d, t, buf, n_prompt, key, drafter, target_config, warp, max_len, K)
    return refill.put(slots, i, one)


def advance_spec(draft_params, target_params, slots, active, drafter, target_config, warp, K):
    """One speculative round of every active slot (batched.spec_round); the others held."""
    new = batched.spec_round(draft_params, target_params, slots, drafter, target_config, warp, K)
    return refill.hold(new, slots, active)


def admit_ar(params, slots, i, buf, n_prompt, key, config, warp, max_len):
    """Slot i takes a request: its autoregressive start (decoding.start)."""
    return refill.put(
        slots, i, decoding.start(batch_layout(params), buf, n_prompt, key, config, warp, max_len)
    )


def advance_ar(params, slots, active, config, warp):
    """One autoregressive step of every active slot (batched.ar_step); the others held."""
    return refill.hold(batched.ar_step(params, slots, config, warp), slots, active)


SPEC = ("drafter", "target_config", "max_len", "K")
admit_spec_jit = programs.jit(admit_spec, static_argnames=SPEC, donate_argnames=("slots",))
advance_spec_jit = programs.jit(advance_spec, static_argnames=SPEC[:2] + ("K",), donate_argnames=("slots",))
empty_spec_jit = programs.jit(batched.spec_start, static_argnames=SPEC)
admit_ar_jit = programs.jit(admit_ar, static_argnames=("config", "max_len"), donate_argnames=("slots",))
advance_ar_jit = programs.jit(advance_ar, static_argnames=("config",), donate_argnames=("slots",))
empty_ar_jit = programs.jit(batched.ar_start, static_argnames=("config", "max_len"))


class Slots(NamedTuple):
    """One method's three programs over its weights and settings, as the host loop calls them."""

    empty: object  # empty(bufs [B, bucket], n_prompts [B], keys [B, 2]) -> slots
    admit: object  # admit(slots, i, buf, n_prompt, key) -> slots
    advance: object  # advance(slots, active [B] bool) -> slots


def spec_slots(draft_params, target_params, drafter, target_config, warp, max_len: int, K: int) -> Slots:
    """Speculative decoding's programs, its weights and settings bound."""
    static = dict(drafter=drafter, target_config=target_config, max_len=max_len, K=K)
    return Slots(
        lambda bufs, n, keys: empty_spec_jit(draft_params, target_params, bufs, n, keys, warp=warp, **static),
        lambda s, i, buf, n, key: admit_spec_jit(
            draft_params, target_params, s, i, buf, n, key, warp=warp, **static
        ),
        lambda s, active: advance_spec_jit(
            draft_params,
            target_params,
            s,
            active,
            drafter=drafter,
            target_config=target_config,
            warp=warp,
            K=K,
        ),
    )


def ar_slots(params, config, warp, max_len: int) -> Slots:
    """Autoregressive decoding's programs, its weights and settings bound."""
    return Slots(
        lambda bufs, n, keys: empty_ar_jit(params, bufs, n, keys, config=config, warp=warp, max_len=max_len),
        lambda s, i, buf, n, key: admit_ar_jit(
            params, s, i, buf, n, key, config=config, warp=warp, max_len=max_len
        ),
        lambda s, active: advance_ar_jit(params, s, active, config=config, warp=warp),
    )
