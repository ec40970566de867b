"""Honest timing: warm-up excluded, device sync before every clock read, repeats, context.

Rules (as in gpt-fast and hyperfine): the compile run is timed and reported on its own;
`block_until_ready` before reading the clock; tokenisation happens outside the timed region;
AR and SD run alternately so that drift (thermal, other load) hits both alike.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench import batch as batching
from specbench import decoding, drafters
from specbench.decoding import DecodeStats, autoregressive, plan_max_len, speculative, validate
from specbench.gpt2 import GPT2Config, init_cache, param_bytes, step
from specbench.sampling import Warp, argmax
from specbench.weights import Model


class CompileCounter:
    """Counts XLA compilations inside a `with` block (jax.monitoring's backend-compile events)."""

    _active: list["CompileCounter"] = []
    _registered = False

    def __init__(self):
        self.count = 0
        self.seconds = 0.0

    @classmethod
    def _listener(cls, event: str, duration: float, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            for counter in cls._active:
                counter.count += 1
                counter.seconds += duration

    def __enter__(self):
        if not CompileCounter._registered:
            jax.monitoring.register_event_duration_secs_listener(CompileCounter._listener)
            CompileCounter._registered = True
        CompileCounter._active.append(self)
        return self

    def __exit__(self, *exc):
        CompileCounter._active.remove(self)


# ---------------------------------------------------------------------------------------------
# Single-step times


def _step_loop(params, cache, tokens, pos, iters, config: GPT2Config):
    """`iters` forward steps of tokens.shape[0] tokens on the device. Each step's input is the
    previous step's argmax, so no step can be skipped or hoisted by the compiler."""

    def body(_, carry):
        cache, tokens = carry
        logits, cache = step(params, cache, tokens, pos, config)
        return cache, jnp.full_like(tokens, argmax(logits[-1]).astype(tokens.dtype))

    return lax.fori_loop(0, iters, body, (cache, tokens))


_step_loop_jit = jax.jit(_step_loop, static_argnames=("iters", "config"), donate_argnames=("cache",))


@functools.partial(jax.jit, static_argnames=("iters", "config"), donate_argnames=("cache",))
def _batch_step_loop(params, cache, tokens, pos, iters, config: GPT2Config):
    """_step_loop for a batch: caches [B, ...], tokens [B, n_seq], positions [B], as batch.py decodes."""
    return jax.vmap(lambda c, t, p: _step_loop(params, c, t, p, iters, config))(cache, tokens, pos)


def _seconds(loop, state, iters: int, repeats: int) -> np.ndarray:
    """Seconds per iteration of `loop(state) -> state`, a jitted device loop of `iters`
    iterations, once per repeat; the first call compiles and is not counted."""
    state = jax.block_until_ready(loop(state))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(loop(state))
        samples.append((time.perf_counter() - t0) / iters)
    return np.asarray(samples)


def _median_seconds(loop, state, iters: int, repeats: int) -> float:
    return float(np.median(_seconds(loop, state, iters, repeats)))


def step_seconds(model: Model, n_seq: int, max_len: int, iters: int = 20, repeats: int = 5,
                 batch: int = 1) -> np.ndarray:
    """Seconds of one forward step over n_seq tokens (1 = decode, K+1 = verify), one per repeat;
    with batch > 1, of one step of `batch` sequences together, each at its own position.

    Measured as a device-side loop of `iters` steps, divided by iters, so the figure is the
    model's step time without Python dispatch: what the device-loop decoders pay per step.
    """
    config = model.config
    cache = init_cache(config, max_len, model.params["wte"].dtype)
    pos = jnp.int32(max(0, max_len // 2 - n_seq))  # any position costs the same: the whole cache is read
    if batch == 1:
        loop = lambda s: _step_loop_jit(model.params, s[0], s[1], pos, iters, config)
        return _seconds(loop, (cache, jnp.zeros(n_seq, jnp.int32)), iters, repeats)
    cache = jax.tree_util.tree_map(lambda x: jnp.zeros((batch,) + x.shape, x.dtype), cache)
    positions = jnp.full(batch, pos)  # a vector, as in batched decoding, so the cache writes are scatters
    loop = lambda s: _batch_step_loop(model.params, s[0], s[1], positions, iters, config)
    return _seconds(loop, (cache, jnp.zeros((batch, n_seq), jnp.int32)), iters, repeats)


def time_step(model: Model, n_seq: int, max_len: int, iters: int = 20, repeats: int = 5) -> float:
    """Median of step_seconds: the step time the theory columns use."""
    return float(np.median(step_seconds(model, n_seq, max_len, iters, repeats)))


@functools.partial(jax.jit, static_argnames=("config",), donate_argnames=("cache",))
def _plain_step(params, cache, tokens, pos, config: GPT2Config):
    logits, cache = step(params, cache, tokens, pos, config)
    return cache, jnp.full_like(tokens, argmax(logits[-1]).astype(tokens.dtype))


def time_plain_step(model: Model, max_len: int, iters: int = 20, repeats: int = 5) -> float:
    """Median seconds per token of the plain way: one jitted 1-token step per Python call (no
    sync until the end), the baseline that the device loops are compared with."""
    cache = init_cache(model.config, max_len, model.params["wte"].dtype)
    pos = jnp.int32(max(0, max_len // 2 - 1))

    def loop(state):
        cache, tokens = state
        for _ in range(iters):
            cache, tokens = _plain_step(model.params, cache, tokens, pos, model.config)
        return cache, tokens

    return _median_seconds(loop, (cache, jnp.zeros(1, jnp.int32)), iters, repeats)


def _hold_position(step_fn):
    """A decoding step that leaves `n` where it was, so it can be repeated any number of times
    at the same cost (the work of a round does not depend on how many drafts it accepts)."""
    return lambda _, state: {**step_fn(state), "n": state["n"]}


@functools.partial(jax.jit, static_argnames=("iters", "drafter", "target_config", "warp", "K", "batched"),
                   donate_argnames=("state",))
def _rounds_loop(draft_params, target_params, state, iters, drafter, target_config, warp, K, batched=False):
    if batched:
        one = lambda s: batching._spec_round(draft_params, target_params, s, drafter, target_config, warp, K)
    else:
        one = lambda s: decoding._spec_round(draft_params, target_params, s, drafter, target_config, warp, K)[0]
    return lax.fori_loop(0, iters, _hold_position(one), state)


@functools.partial(jax.jit, static_argnames=("iters", "drafter", "K", "n_vocab"))
def _propose_loop(tokens, n, iters, drafter, K, n_vocab):
    """`iters` lookup proposals, each fed the previous one's first draft so none can be hoisted;
    tokens [B, L] and n [B] for a batch."""
    def one(tokens, n):
        _, drafts, p, _ = drafters.propose(drafter, {}, {}, tokens, n, None, Warp(), K, n_vocab)
        return tokens.at[n - 1].set(drafts[0] + (jnp.sum(p) > 1e9).astype(jnp.int32))
    propose = jax.vmap(one) if tokens.ndim == 2 else one
    return lax.fori_loop(0, iters, lambda _, t: propose(t, n), tokens)


def _batch_of(prompts: list[list[int]], max_len: int):
    """(prompt buffers, lengths) of one sequence or, for several, of the batch (batch.py)."""
    if len(prompts) == 1:
        return decoding._prompt_buffer(prompts[0], max_len)
    return batching._buffers(prompts, max_len)


def time_draft(drafter, draft: Model | None, target: Model, prompt_ids, K: int, max_len: int,
               iters: int = 20, repeats: int = 5, batch_prompts: list[list[int]] | None = None) -> np.ndarray:
    """Seconds per draft token of the drafter actually used, one per repeat: a 1-token step of the
    draft model or of the target's first L layers; for lookup, one proposal of K tokens / K. With
    batch_prompts, the same for the whole batch (one step of B sequences)."""
    prompts = batch_prompts or [prompt_ids]
    B = len(prompts)
    if drafter.kind == "model":
        return step_seconds(draft, 1, max_len, iters, repeats, B)
    if drafter.kind == "layerskip":
        return step_seconds(Model(f"{target.name}[:{drafter.config.n_layer}]", drafter.config, target.params,
                                  target.source), 1, max_len, iters, repeats, B)
    buf, _ = _batch_of(prompts, max_len)
    tokens = jnp.zeros(buf.shape[:-1] + (max_len,), jnp.int32).at[..., : buf.shape[-1]].set(buf)
    n = jnp.full(buf.shape[:-1], max_len // 2, jnp.int32)  # a search over half the buffer: mid-generation
    loop = lambda t: _propose_loop(t, n, iters, drafter, K, target.config.n_vocab)
    return _seconds(loop, tokens, iters, repeats) / K


@functools.partial(jax.jit, static_argnames=("iters", "config", "warp", "batched"), donate_argnames=("state",))
def _ar_loop(params, state, iters, config, warp, batched=False):
    one = batching._ar_step if batched else decoding._ar_step
    return lax.fori_loop(0, iters, _hold_position(lambda s: one(params, s, config, warp)), state)


def time_round(draft: Model | None, target: Model, prompt_ids, K: int, warp: Warp, max_len: int, seed: int = 0,
               iters: int = 5, repeats: int = 5, drafter=None,
               batch_prompts: list[list[int]] | None = None) -> np.ndarray:
    """Seconds of one whole speculative round (K draft steps, verify, warping, accept/reject,
    bookkeeping) as the device loop runs it, one per repeat; with batch_prompts, one round of
    the whole batch."""
    drafter = drafter or drafters.model_drafter(draft.config)
    draft_params = decoding.draft_params_for(drafter, draft, target)
    prompts = batch_prompts or [prompt_ids]
    buf, n_prompt = _batch_of(prompts, max_len)
    kw = dict(drafter=drafter, target_config=target.config, warp=warp, max_len=max_len, K=K)
    if len(prompts) == 1:
        state = decoding.spec_start_jit(draft_params, target.params, buf, n_prompt, jax.random.PRNGKey(seed), **kw)
    else:
        state = batching.spec_start_jit(draft_params, target.params, buf, n_prompt,
                                        batching._keys(seed, len(prompts)), **kw)
    loop = lambda s: _rounds_loop(draft_params, target.params, s, iters, drafter, target.config, warp, K,
                                  len(prompts) > 1)
    return _seconds(loop, state, iters, repeats)


def time_ar_token(target: Model, prompt_ids, warp: Warp, max_len: int, seed: int = 0, iters: int = 10,
                  repeats: int = 5, batch_prompts: list[list[int]] | None = None) -> float:
    """Median seconds of one autoregressive token (decode step, warping, sampling) in the device
    loop; with batch_prompts, of one token for every sequence of the batch."""
    prompts = batch_prompts or [prompt_ids]
    buf, n_prompt = _batch_of(prompts, max_len)
    kw = dict(config=target.config, warp=warp, max_len=max_len)
    if len(prompts) == 1:
        state = decoding.start_jit(target.params, buf, n_prompt, jax.random.PRNGKey(seed), **kw)
    else:
        state = batching.ar_start_jit(target.params, buf, n_prompt, batching._keys(seed, len(prompts)), **kw)
    loop = lambda s: _ar_loop(target.params, s, iters, target.config, warp, len(prompts) > 1)
    return _median_seconds(loop, state, iters, repeats)


# ---------------------------------------------------------------------------------------------
# One configuration: AR against SD


@dataclasses.dataclass
class BenchmarkResult:
    ar_times_s: list[float]
    sd_times_s: list[float]
    ar_tokens: list[int]
    sd_tokens: list[int]
    stats: DecodeStats
    t_draft_s: float
    t_target_s: float
    t_verify_s: float
    t_round_s: float
    t_ar_token_s: float
    compile_s: float
    n_compiles: int
    t_overhead_err_s: float = 0.0  # σ of t_round - K t_draft - t_verify, from the spread of each timing
    batch: int = 1  # sequences decoded together; with B > 1 the token lists are [B][N] and times are per batch


def summarize(times: list[float]) -> dict[str, float]:
    t = np.asarray(times)
    return {"mean_s": float(t.mean()), "std_s": float(t.std(ddof=1)) if len(t) > 1 else 0.0,
            "min_s": float(t.min()), "max_s": float(t.max()), "median_s": float(np.median(t))}


def run_benchmark(draft: Model | None, target: Model, prompt_ids: list[int], n_tokens: int, K: int, warp: Warp,
                  seed: int = 123, repeats: int = 5, warmup: int = 1, device_loop: bool = True,
                  on_progress=None, drafter=None, batch_prompts: list[list[int]] | None = None) -> BenchmarkResult:
    """Warm up (compile, excluded and timed apart), then AR and SD alternately `repeats` times.

    Both decode the same prompt with the same seed, N and models; each call returns host token
    ids, so its time includes the device sync. Tokenisation is the caller's, outside the clock.
    With batch_prompts (B >= 2 of them) both decode the B sequences together (batch.py), and every
    step time is measured at that batch size. on_progress(done, total, what) is called as the work
    advances.
    """
    drafter = drafter or drafters.model_drafter(draft.config)
    models = [target] + ([draft] if drafter.kind == "model" else [])
    B = len(batch_prompts) if batch_prompts else 1
    if B > 1:
        max_len = batching.plan_batch(batch_prompts, n_tokens, K, models)
        ar = lambda: batching.autoregressive(target, batch_prompts, n_tokens, warp, seed, max_len=max_len)
        sd = lambda: batching.speculative(draft, target, batch_prompts, n_tokens, K, warp, seed, max_len=max_len,
                                          drafter=drafter)
    else:
        prompt_ids = batch_prompts[0] if batch_prompts else prompt_ids
        validate(prompt_ids, n_tokens, K, models, None)
        max_len = plan_max_len(len(prompt_ids), n_tokens, K, min(m.config.n_ctx for m in models))
        ar = lambda: autoregressive(target, prompt_ids, n_tokens, warp, seed, max_len=max_len,
                                    device_loop=device_loop)
        sd = lambda: speculative(draft, target, prompt_ids, n_tokens, K, warp, seed, max_len=max_len,
                                 device_loop=device_loop, drafter=drafter)
    batch_kw = dict(batch_prompts=batch_prompts) if B > 1 else {}
    total = warmup + repeats + 5
    progress = on_progress or (lambda *a: None)
    with CompileCounter() as compiles:
        t0 = time.perf_counter()
        for _ in range(max(warmup, 1)):
            ar(), sd()
        compile_s = time.perf_counter() - t0
        progress(warmup, total, "warm-up done")
        ar_times, sd_times = [], []
        for i in range(repeats):
            t0 = time.perf_counter()
            ar_tokens, _ = ar()
            ar_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sd_tokens, stats = sd()
            sd_times.append(time.perf_counter() - t0)
            progress(warmup + i + 1, total, "timing AR and SD")
        done = warmup + repeats
        progress(done, total, "step time: draft")
        draft_s = time_draft(drafter, draft, target, prompt_ids, K, max_len, **batch_kw)
        progress(done + 1, total, "step time: target")
        target_s = step_seconds(target, 1, max_len, batch=B)
        progress(done + 2, total, f"step time: verify ({K + 1} tokens)")
        verify_s = step_seconds(target, K + 1, max_len, batch=B)
        progress(done + 3, total, "step time: whole round")
        round_s = time_round(draft, target, prompt_ids, K, warp, max_len, seed, drafter=drafter, **batch_kw)
        progress(done + 4, total, "step time: AR token")
        t_ar_token = time_ar_token(target, prompt_ids, warp, max_len, seed, **batch_kw)
        progress(total, total, "done")
    # the overhead is a difference of separately timed medians: carry its uncertainty with it
    sd_of = lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
    overhead_err = float(np.sqrt(sd_of(round_s) ** 2 + (K * sd_of(draft_s)) ** 2 + sd_of(verify_s) ** 2))
    return BenchmarkResult(ar_times, sd_times, ar_tokens.tolist(), sd_tokens.tolist(), stats,
                           float(np.median(draft_s)), float(np.median(target_s)), float(np.median(verify_s)),
                           float(np.median(round_s)), t_ar_token, compile_s, compiles.count, overhead_err, B)


def device_memory_bytes() -> int | None:
    """Memory free for a run on the default device: the accelerator's allocator limit less what
    it holds, or on the CPU the host's available memory; None where neither can be read."""
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:  # Linux: what can be had without swapping, page cache included
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# ---------------------------------------------------------------------------------------------
# Context that every result row carries


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def device_kind() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind}"


def context() -> dict:
    from specbench import __version__

    return {"specbench_version": __version__, "git_commit": git_commit(), "jax_version": jax.__version__,
            "device": device_kind(), "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def result_row(res: BenchmarkResult, *, draft: str, target: str, dtype: str, K: int, warp: Warp, seed: int,
               prompt_id: str, prompt: str | list[str], n_tokens: int, repeats: int, warmup: int, loop: str,
               decode=None, drafter=None, batch_prompt_ids: list[str] | None = None) -> dict:
    """One flat row: the full context, the measurements, and the theory from the same measurements.

    For a batch (res.batch = B > 1) `prompt` is the list of the B prompts, and the JSON-only
    prompt, token id and text fields are lists with one entry per sequence; tokens/s count all
    B x N tokens, and every step time is the batch's.
    """
    from specbench import theory
    from specbench.prompts import prompt_hash

    st, B = res.stats, res.batch
    ar, sd = summarize(res.ar_times_s), summarize(res.sd_times_s)
    speedups = np.asarray(res.ar_times_s) / np.asarray(res.sd_times_s)
    seed_theory = theory.speedup_from_r(st.r, K, res.t_draft_s, res.t_target_s)
    # a batch waits for its slowest sequence: what it yields per round it runs (one sequence: tokens/round)
    refined = theory.refined_speedup(st.tokens_per_batch_round, K, res.t_draft_s, res.t_target_s, res.t_verify_s)
    described = drafter.describe() if drafter is not None else \
        {"drafter": "model", "ngram": None, "draft_layers": None, "dynamic_K": False, "draft_confidence": None}
    row = {**context(), "dtype": dtype, "draft": draft, "target": target, **described, "K": K,
           "temperature": warp.temperature,
           "top_k": warp.top_k, "top_p": warp.top_p, "seed": seed, "prompt_id": prompt_id,
           "prompt_sha": prompt_hash(prompt if isinstance(prompt, str) else "\n".join(prompt)),
           "n_tokens": n_tokens, "repeats": repeats, "warmup": warmup, "loop": loop, "batch": B}
    row.update({f"ar_{k}": v for k, v in ar.items()})
    row.update({f"sd_{k}": v for k, v in sd.items()})
    row.update({
        "ar_tokens_per_s": B * n_tokens / ar["mean_s"], "sd_tokens_per_s": B * n_tokens / sd["mean_s"],
        "speedup": float(speedups.mean()), "speedup_std": float(speedups.std(ddof=1)) if len(speedups) > 1 else 0.0,
        "n_rounds": st.n_rounds, "tokens_per_round": st.tokens_per_round, "r": st.r, "alpha": st.alpha,
        "batch_rounds": st.rounds_run,
        "tokens_per_batch_round": st.tokens_per_batch_round, "idle_fraction": st.idle_fraction,
        "accept_rate_drafted": st.accept_rate_drafted,
        "t_draft_s": res.t_draft_s, "t_target_s": res.t_target_s, "t_verify_s": res.t_verify_s,
        "t_round_s": res.t_round_s, "t_overhead_s": res.t_round_s - K * res.t_draft_s - res.t_verify_s,
        "t_overhead_err_s": res.t_overhead_err_s,
        "t_ar_token_s": res.t_ar_token_s,
        "theory_speedup": seed_theory, "refined_speedup": refined,
        # stragglers hold a batch back: the rounds it runs, not each sequence's own, cost time
        "round_model_speedup": st.tokens_per_batch_round * res.t_ar_token_s / res.t_round_s,
        "measured_over_theory": float(speedups.mean()) / seed_theory,
        "measured_over_refined": float(speedups.mean()) / refined,
        "compile_s": res.compile_s,
        "identical": (res.ar_tokens == res.sd_tokens) if warp.temperature == 0 else None,
        # JSON only
        "prompt": prompt, "ar_times_s": res.ar_times_s, "sd_times_s": res.sd_times_s,
        "accepted_hist": st.accepted_hist.tolist(), "per_position_acceptance": st.per_position,
        "drafted_hist": st.drafted_hist.tolist() if st.drafted_hist is not None else None,
        "mean_drafted": float(np.dot(np.arange(K + 1), st.drafted_hist) / max(1, st.n_rounds))
        if st.drafted_hist is not None else float(K),
        "ar_token_ids": res.ar_tokens, "sd_token_ids": res.sd_tokens,
    })
    if B > 1:
        row["batch_prompt_ids"] = batch_prompt_ids
    if decode is not None:
        text = decode if B == 1 else (lambda seqs: [decode(ids) for ids in seqs])
        row["ar_text"], row["sd_text"] = text(res.ar_tokens), text(res.sd_tokens)
    return row


# ---------------------------------------------------------------------------------------------
# Roofline: why verifying K+1 tokens costs about as much as decoding 1

# Peak memory bandwidth in GB/s by device-kind substring (vendor datasheets). Unknown -> None.
PEAK_GBPS = {"H200": 4800.0, "H100 PCIe": 2000.0, "H100": 3350.0, "A100-SXM4-80GB": 2039.0, "A100": 1555.0,
             "L4": 300.0, "A10G": 600.0, "T4": 320.0, "V100": 900.0, "RTX 4090": 1008.0}


def peak_gbps(device: str | None = None) -> float | None:
    device = device or jax.devices()[0].device_kind
    for name, gbps in PEAK_GBPS.items():
        if name.lower() in device.lower():
            return gbps
    return None


def step_bytes(model: Model, max_len: int) -> int:
    """Bytes one step must read: every weight once, plus the whole K/V cache (read under the mask)."""
    c = model.config
    itemsize = model.params["wte"].dtype.itemsize
    return param_bytes(model.params) + 2 * c.n_layer * max_len * c.n_embd * itemsize


def roofline(model: Model, n_max: int, max_len: int, iters: int = 20, repeats: int = 5,
             on_timing=None) -> list[dict]:
    """Step time for 1 .. n_max tokens, bytes moved, bandwidth achieved, and t(n)/t(1); for 1
    token also the plain host-dispatched step and its ratio to the device loop. on_timing() is
    called after each of the n_max + 1 timings."""
    moved = step_bytes(model, max_len)
    peak = peak_gbps()
    done = on_timing or (lambda: None)
    t_plain = time_plain_step(model, max_len, iters, repeats)
    done()
    rows = []
    for n in range(1, n_max + 1):
        t = time_step(model, n, max_len, iters, repeats)
        done()
        gbps = moved / t / 1e9
        rows.append({"n_tokens_per_step": n, "t_step_s": t, "bytes_per_step": moved, "achieved_gbps": gbps,
                     "peak_gbps": peak, "fraction_of_peak": gbps / peak if peak else None,
                     "bound_s": moved / (peak * 1e9) if peak else None,
                     "t_over_t1": t / rows[0]["t_step_s"] if rows else 1.0,
                     "t_plain_step_s": t_plain if n == 1 else None,
                     "plain_over_loop": t_plain / t if n == 1 else None})
    return rows
