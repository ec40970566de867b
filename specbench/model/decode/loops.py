"""A generation's loop, as one device program: AR steps, or speculative rounds, until the
sequence has its N new tokens. The count is traced, so one compiled program serves any N and any
number of rounds; with `hold` each iteration leaves n where it was, and the time account's timers
(measure/timing.py) run this same program to time a step or a round. A generation is its start
(decoding.start or spec_start), then its loop; batched.py has the loops of a batch."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from specbench.model.decode.decoding import ARState, SpecState, ar_step, spec_round, spec_start, start
from specbench.model.kernels import programs
from specbench.model.nets import network

NEVER = jnp.iinfo(jnp.int32).max
"""An end no sequence reaches, and a bound no loop reaches: the loops' "no limit"."""


def ar_loop(params, state: ARState, n_steps, hold, config, warp) -> ARState:
    """n_steps ar_steps in one device loop, the count traced (one program serves any). With hold
    (traced too), each step leaves n where it was, so the loop repeats at one step's cost: the
    step timers run this same program as the generation does (measure/timing.py)."""

    def body(_, s):
        new = ar_step(params, s, config, warp)
        return new._replace(n=jnp.where(hold, s.n, new.n))

    return lax.fori_loop(0, n_steps, body, state)


def spec_loop(
    draft_params,
    target_params,
    state: SpecState,
    end,
    max_rounds,
    hold,
    drafter,
    target_config,
    warp,
    K,
    verdict=None,
) -> SpecState:
    """Rounds in one device loop until n reaches `end` or `max_rounds` have run (both traced: one
    program serves any). With hold, each round leaves n where it was: the round timer's loop
    (end NEVER), the generation's own program."""

    def body(carry):
        i, s = carry
        new = spec_round(draft_params, target_params, s, drafter, target_config, warp, K, verdict)[0]
        return i + 1, new._replace(n=jnp.where(hold, s.n, new.n))

    go = lambda carry: (carry[0] < max_rounds) & (carry[1].n < end)
    return lax.while_loop(go, body, (jnp.int32(0), state))[1]


def ar_generate(params, prompt_buf, n_prompt, n_tokens, key, config, warp, max_len) -> ARState:
    """start, then n_tokens - 1 ar_steps (ar_loop)."""
    state = start(params, prompt_buf, n_prompt, key, config, warp, max_len)
    return ar_loop(params, state, n_tokens - 1, False, config, warp)


def spec_generate(
    draft_params,
    target_params,
    prompt_buf,
    n_prompt,
    n_tokens,
    key,
    drafter,
    target_config,
    warp,
    max_len,
    K,
    verdict=None,
) -> SpecState:
    """spec_start, then rounds until N new tokens (spec_loop)."""
    state = spec_start(
        draft_params, target_params, prompt_buf, n_prompt, key, drafter, target_config, warp, max_len, K
    )
    end = network.decoder_prompt_length(target_config, n_prompt) + n_tokens
    return spec_loop(
        draft_params, target_params, state, end, NEVER, False, drafter, target_config, warp, K, verdict
    )


ar_loop_jit = programs.jit(ar_loop, static_argnames=("config",), donate_argnames=("state",))


spec_loop_jit = programs.jit(
    spec_loop,
    static_argnames=("drafter", "target_config", "K", "verdict"),
    donate_argnames=("state",),
)
