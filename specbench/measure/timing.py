"""Device-loop timers: what one step, one round or one AR token costs, without Python dispatch.

Rules (as in gpt-fast and hyperfine): the first call compiles and is not counted (warm=False:
the caller compiled it before, and the sample starts cold, as a generation does);
`block_until_ready` before every clock read; a step is timed as a device-side loop of `iters`
steps divided by iters. Every timer returns seconds per step, one value per repeat, so the
caller chooses its statistic (the median) and keeps the spread.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.draft_cost import DraftCost
from specbench.measure.prepared import Prepared
from specbench.model import generate
from specbench.model.decode import drafters, loops, placed
from specbench.model.decode.sampling import Warp, argmax
from specbench.model.kernels import programs
from specbench.model.nets import eagle, network
from specbench.model.nets.families import family_of
from specbench.model.nets.layouts import batch_layout
from specbench.model.nets.network import Model


class CompileCounter:
    """Counts the programs made inside a `with` block (jax.monitoring's backend-compile events,
    which JAX also sends for a program it reads from the persistent cache) and, of them, those
    read from the cache (its hits; measure/compile_cache.py)."""

    _active: list[CompileCounter] = []
    _registered = False

    def __init__(self):
        self.count = 0
        self.cached = 0
        self.seconds = 0.0

    @classmethod
    def _listener(cls, event: str, duration: float, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            for counter in cls._active:
                counter.count += 1
                counter.seconds += duration

    @classmethod
    def _hits(cls, event: str, **_):
        if event == "/jax/compilation_cache/cache_hits":  # its program is counted by _listener too
            for counter in cls._active:
                counter.cached += 1

    def __enter__(self):
        if not CompileCounter._registered:
            jax.monitoring.register_event_duration_secs_listener(CompileCounter._listener)
            jax.monitoring.register_event_listener(CompileCounter._hits)
            CompileCounter._registered = True
        CompileCounter._active.append(self)
        return self

    def __exit__(self, *exc):
        CompileCounter._active.remove(self)


def seconds_per_iter(loop, state, iters: int, repeats: int, warm: bool = True) -> np.ndarray:
    """Seconds per iteration of `loop(state) -> state`, a device loop of `iters` iterations, once
    per repeat, each started from a finished state. With warm, a first call (the compile) runs
    before and is not counted; warm=False times a loop compiled before, from a cold start, as a
    generation starts (bench.py)."""
    state = jax.block_until_ready(loop(state) if warm else state)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(loop(state))
        samples.append((time.perf_counter() - t0) / iters)
    return np.asarray(samples)


# ---------------------------------------------------------------------------------------------
# One forward step


def _chained_step(params, cache, tokens, pos, config):
    """One step whose next input is its own argmax, so no step can be skipped or hoisted."""
    logits, cache = network.step(params, cache, tokens, pos, config)
    return cache, jnp.full_like(tokens, argmax(logits[-1]).astype(tokens.dtype))


@functools.partial(programs.jit, static_argnames=("iters", "config"), donate_argnames=("cache",))
def _step_loop(params, cache, tokens, pos, iters, config):
    """`iters` steps; with a leading batch axis on cache, tokens and pos, every sequence at once."""
    if tokens.ndim == 2:  # as batched.py decodes: vmapped, in the batch layout
        params = batch_layout(params)
    one = lambda c, t, p: lax.fori_loop(0, iters, lambda _, s: _chained_step(params, *s, p, config), (c, t))
    return jax.vmap(one)(cache, tokens, pos) if tokens.ndim == 2 else one(cache, tokens, pos)


SOURCE_TOKENS = 16
"""An encoder-decoder's step timers read a source of this many tokens (its cross-attention's keys)."""


def step_cache(model: Model, max_len: int):
    """The cache a step timer runs on: the network's (network.start_cache); an encoder-decoder's
    with a source of SOURCE_TOKENS tokens encoded into it."""
    source = jnp.zeros(SOURCE_TOKENS, jnp.int32)
    return network.start_cache(model.params, source, SOURCE_TOKENS, model.config, max_len)


def step_seconds(
    model: Model,
    n_seq: int,
    max_len: int,
    iters: int = 20,
    repeats: int = 5,
    batch: int = 1,
    warm: bool = True,
) -> np.ndarray:
    """Seconds of one forward step over n_seq tokens (1 = decode, K+1 = verify), one per repeat;
    with batch > 1, of one step of `batch` sequences together, each at its own position (warm:
    seconds_per_iter)."""
    cache = step_cache(model, max_len)
    pos = jnp.int32(max(0, max_len // 2 - n_seq))  # any position costs the same: the whole cache is read
    tokens = jnp.zeros(n_seq, jnp.int32)
    if batch > 1:  # positions a vector, as in batched decoding, so the cache writes are the same scatters
        cache = jax.tree_util.tree_map(lambda x: jnp.zeros((batch,) + x.shape, x.dtype), cache)
        pos, tokens = jnp.full(batch, pos), jnp.zeros((batch, n_seq), jnp.int32)
    loop = lambda s: _step_loop(model.params, s[0], s[1], pos, iters, model.config)
    return seconds_per_iter(loop, (cache, tokens), iters, repeats, warm)


@functools.partial(programs.jit, static_argnames=("iters", "config"), donate_argnames=("state",))
def _eagle_loop(params, state, pos, iters, config):
    """`iters` 1-token steps of an EAGLE head, each reading the feature and the argmax of the one
    before (so none can be hoisted); with a leading batch axis, every sequence at once."""

    def one(state, pos):
        def chained(_, s):
            cache, h, token = s
            logits, h, cache = eagle.step(params, cache, h, token, pos, config)
            return cache, h, jnp.full_like(token, argmax(logits[-1]).astype(token.dtype))

        return lax.fori_loop(0, iters, chained, state)

    return jax.vmap(one)(state, pos) if jnp.ndim(pos) else one(state, pos)


def eagle_step_seconds(params, config, max_len: int, rows=1, iters=20, repeats=5, batch=1, warm=True):
    """Seconds of one drafting step of an EAGLE head (eagle.step over `rows` tokens), one per
    repeat, of `batch` sequences together where batch > 1 (warm: seconds_per_iter)."""
    state = (
        network.init_cache(config, max_len, params["wte"].dtype),
        jnp.zeros((rows, config.n_embd), params["wte"].dtype),
        jnp.zeros(rows, jnp.int32),
    )
    pos = jnp.int32(max(0, max_len // 2 - 1))
    if batch > 1:
        state = jax.tree_util.tree_map(lambda x: jnp.zeros((batch,) + x.shape, x.dtype), state)
        pos = jnp.full(batch, pos)
    loop = lambda s: _eagle_loop(params, s, pos, iters, config)
    return seconds_per_iter(loop, state, iters, repeats, warm)


_plain_step = programs.jit(_chained_step, static_argnames=("config",), donate_argnames=("cache",))


def plain_step_seconds(
    model: Model, max_len: int, iters: int = 20, repeats: int = 5, warm: bool = True
) -> np.ndarray:
    """Seconds per token of the plain way, one per repeat: one jitted 1-token step per Python call
    (no sync until the end), the baseline that the device loops are compared with (warm:
    seconds_per_iter)."""
    pos = jnp.int32(max(0, max_len // 2 - 1))

    def loop(state):
        for _ in range(iters):
            state = _plain_step(model.params, *state, pos, model.config)
        return state

    return seconds_per_iter(loop, (step_cache(model, max_len), jnp.zeros(1, jnp.int32)), iters, repeats, warm)


# ---------------------------------------------------------------------------------------------
# Drafting, whole rounds and AR tokens, as the decoders run them


@functools.partial(programs.jit, static_argnames=("iters", "drafter", "K", "n_vocab"))
def _propose_loop(params, dstate, tokens, n, iters, drafter, K, n_vocab):
    """`iters` proposals of a drafter without a network (lookup, the dial), each fed the previous
    one's first draft so none can be hoisted; tokens [B, L], n [B] and dstate's arrays [B, ...]
    for a batch."""
    key = jax.random.PRNGKey(0)

    def one(dstate, tokens, n):
        _, drafts, p, _ = drafters.propose(drafter, params, dstate, tokens, n, key, Warp(), K, n_vocab)
        return tokens.at[n - 1].set(drafts[0] + (jnp.sum(p) > 1e9).astype(jnp.int32))

    propose = jax.vmap(one) if tokens.ndim == 2 else one
    return lax.fori_loop(0, iters, lambda _, t: propose(dstate, t, n), tokens)


def draft_seconds(prep: Prepared, iters: int = 20, repeats: int = 5, warm: bool = True) -> np.ndarray:
    """Seconds per draft token of the drafter actually used, one per repeat, for the batch of
    prompts together: a 1-token step of the draft model or of the target's first L layers (of
    k sequences with k drafts; with a tree, a step over its nodes and the token above them, one
    level); for lookup and the dial, one proposal of K tokens / K (warm: seconds_per_iter)."""
    c, max_len = prep.config, prep.max_len
    drafter, B = c.drafter, len(prep.prompts) * c.drafter.drafts
    if drafter.spec.features:  # a tree drafts a level a step, over all its nodes
        rows = 1 if drafter.tree is None else drafter.tree.draft_rows
        return eagle_step_seconds(prep.draft_params, drafter.config, max_len, rows, iters, repeats, B, warm)
    if drafter.spec.network:  # the weights it drafts with (its head restricted or not)
        own = c.draft if drafter.spec.draft_model else c.target
        name = own.name if drafter.spec.draft_model else f"{own.name}[:{drafter.config.n_layer}]"
        drafting = Model(name, drafter.config, prep.draft_params, own.source)
        if drafter.kind.draft_cost is DraftCost.ONE_PASS:  # one step of the pass's rows, a K-th a draft
            rows = drafter.kind.pass_rows(c.K)
            return step_seconds(drafting, rows, max_len, iters, repeats, B, warm) / c.K
        rows = 1 if drafter.tree is None else drafter.tree.draft_rows + 1  # a tree drafts a level a step
        return step_seconds(drafting, rows, max_len, iters, repeats, B, warm)
    x = generate.inputs(prep.prompts, max_len, 0)
    buf = x.prompt_bufs
    tokens = jnp.zeros(buf.shape[:-1] + (max_len,), jnp.int32).at[..., : buf.shape[-1]].set(buf)
    n = jnp.full(buf.shape[:-1], max_len // 2, jnp.int32)  # a search over half the buffer: mid-generation
    reference = tokens[0] if tokens.ndim == 2 else tokens  # the dial's, as any tokens serve a timer
    params = drafter.spec.weights(drafter, None, c.target, reference)
    source = family_of(c.target.config).encoder_decoder  # lookup then searches the source too
    start = lambda b, n_b: drafters.start(drafter, params, b, n_b, max_len, source=source)
    dstate = jax.vmap(start)(buf, x.n_prompts) if buf.ndim == 2 else start(buf, x.n_prompts)
    loop = lambda t: _propose_loop(params, dstate, t, n, iters, drafter, c.K, c.target.config.n_vocab)
    return seconds_per_iter(loop, tokens, iters, repeats, warm) / c.K


def _ar_start(prep: Prepared):
    """A call that starts AR on the prompts (prefill and first token), as decoding does."""
    c = prep.config
    x, p = generate.inputs(prep.prompts, prep.max_len, c.seed), generate.programs(len(prep.prompts))
    static = dict(config=c.target.config, warp=c.warp, max_len=prep.max_len)
    return lambda: p.ar_start_jit(c.target.params, *x, **static)


def _round_arguments(prep: Prepared) -> dict:
    """The static arguments of a speculative round."""
    c = prep.config
    return dict(drafter=c.drafter, target_config=c.target.config, warp=c.warp, K=c.K)


def _spec_programs(prep: Prepared) -> generate.Programs:
    """The programs SD runs on the prompts: a draft placed apart from its target runs its own."""
    apart = placed.apart(prep.draft_params, prep.config.target.params)
    return generate.programs(len(prep.prompts), apart)


def _spec_start(prep: Prepared):
    """A call that starts SD on the prompts (the prefills of the target and the drafter and the
    first token), as decoding does."""
    c = prep.config
    x = generate.inputs(prep.prompts, prep.max_len, c.seed)
    start, static = _spec_programs(prep).spec_start_jit, _round_arguments(prep)
    return lambda: start(prep.draft_params, c.target.params, *x, max_len=prep.max_len, **static)


def round_seconds(prep: Prepared, iters: int = 5, repeats: int = 5, warm: bool = True) -> np.ndarray:
    """Seconds of one whole speculative round of the batch (K draft steps, verify, warping,
    accept/reject, bookkeeping) as the device loop runs it, one per repeat (warm: seconds_per_iter)."""
    B, target, static = len(prep.prompts), prep.config.target, _round_arguments(prep)
    spec_loop = _spec_programs(prep).spec_loop_jit  # the generation's own loop, holding n
    never = jnp.full((B,) if B > 1 else (), loops.NEVER, jnp.int32)  # shaped as the generation's ends
    rounds, hold = jnp.int32(iters), jnp.bool_(True)
    loop = lambda s: spec_loop(prep.draft_params, target.params, s, never, rounds, hold, **static)
    return seconds_per_iter(loop, _spec_start(prep)(), iters, repeats, warm)


def ar_token_seconds(prep: Prepared, iters: int = 10, repeats: int = 5, warm: bool = True) -> np.ndarray:
    """Seconds of one autoregressive token for every sequence of the batch (decode step, warping,
    sampling) in the device loop, one per repeat (warm: seconds_per_iter)."""
    c, ar_loop = prep.config, generate.programs(len(prep.prompts)).ar_loop_jit  # the generation's own
    steps, hold, static = jnp.int32(iters), jnp.bool_(True), dict(config=c.target.config, warp=c.warp)
    loop = lambda s: ar_loop(c.target.params, s, steps, hold, **static)
    return seconds_per_iter(loop, _ar_start(prep)(), iters, repeats, warm)


def _call_seconds(call, repeats: int, warm: bool) -> np.ndarray:
    """Seconds of `call()`, one dispatch with its sync, once per repeat (warm: seconds_per_iter)."""
    return seconds_per_iter(lambda _: call(), None, 1, repeats, warm)


def ar_start_seconds(prep: Prepared, repeats: int = 5, warm: bool = True) -> np.ndarray:
    """Seconds of the start of AR, one per repeat: the target's prefill and the first token, one
    dispatch with its sync, as decoding runs them."""
    return _call_seconds(_ar_start(prep), repeats, warm)


def spec_start_seconds(prep: Prepared, repeats: int = 5, warm: bool = True) -> np.ndarray:
    """Seconds of the start of SD, one per repeat: the prefills of the target and the drafter and
    the first token, one dispatch with its sync, as decoding runs them."""
    return _call_seconds(_spec_start(prep), repeats, warm)
