"""Why verifying K+1 tokens can cost about as much as decoding 1: step time against both roofs.

A decode step of n tokens must read every weight and the whole K/V cache once, whatever n, and
does 2 n floating-point operations per weight it multiplies. Its limit is the larger of the two
roofs (Williams et al. 2009, "Roofline"), both measured on the device in the same run:

    limit(n) = max(bytes / read bandwidth, FLOPs(n) / matrix-product rate)

While the first term wins, t(n)/t(1) should stay near 1 (DESIGN.md §15). Each row gives its step's
time over its own limit, so a step shape that falls behind shows where, whatever its size.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from specbench.measure import device, timing
from specbench.model import kernels
from specbench.model.layouts import layout, param_bytes, resident_bytes
from specbench.model.weights import Model


def step_bytes(model: Model, max_len: int) -> int:
    """Bytes one step must read: every weight once, plus the whole K/V cache (read under the mask)."""
    c = model.config
    itemsize = model.params["wte"].dtype.itemsize
    return param_bytes(model.params) + 2 * c.n_layer * max_len * c.n_embd * itemsize


def step_flops(model: Model, n_tokens: int, max_len: int) -> float:
    """Floating-point operations of one step over n_tokens: two per multiply-add, in every block
    matrix (12 n_embd² a layer), the output head (n_vocab n_embd) and the attention over a cache
    of max_len (scores and values, 2 max_len n_embd a layer), for each token."""
    c = model.config
    per_token = c.n_layer * (12 * c.n_embd**2 + 2 * max_len * c.n_embd) + c.n_vocab * c.n_embd
    return 2.0 * n_tokens * per_token


def layout_extra_bytes(model: Model) -> int:
    """Memory the weights' layout costs beyond the weights themselves: decode_layout's copy of
    every block matrix, or kernel_layout's packed copies of every block matrix and the output head."""
    return resident_bytes(model.params) - param_bytes(model.params)


def _median_seconds(fn, arg, repeats: int) -> float:
    jax.block_until_ready(fn(arg))  # compile
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(arg))
        seconds.append(time.perf_counter() - t0)
    return float(np.median(seconds))


def read_gbps(megabytes: int = 512, repeats: int = 7) -> float:
    """The device's achievable read bandwidth, GB/s: an XLA sum over a float32 buffer of
    `megabytes` (far beyond the caches), median of `repeats` timed runs after a compile."""
    buf = jnp.ones(megabytes * 2**20 // 4, jnp.float32)
    return buf.size * 4 / _median_seconds(jax.jit(jnp.sum), buf, repeats) / 1e9


def matmul_gflops(size: int = 2048, dtype=jnp.float32, repeats: int = 5) -> float:
    """The device's achievable matrix-product rate, GFLOP/s: XLA's product of two size x size
    matrices (2 size³ operations), median of `repeats` timed runs after a compile."""
    a = jnp.ones((size, size), dtype)
    return 2 * size**3 / _median_seconds(jax.jit(lambda a: a @ a), a, repeats) / 1e9


def roofline(
    models: list[Model],
    n_max: int,
    max_len: int,
    iters: int = 20,
    repeats: int = 5,
    on_timing=None,
    measured_gbps: float | None = None,
    measured_gflops: float | None = None,
) -> list[dict]:
    """For each model, one row per step of 1 .. n_max tokens: its time, bytes and FLOPs, both roofs
    and its limit, and t(n)/t(1); for 1 token also the plain host-dispatched step and its ratio to
    the device loop. The models (one network in several layouts, say) are timed alternately, repeat
    by repeat, so that drift hits them alike. The memory roof is the datasheet peak where the device
    is known (a GPU), else the measured read bandwidth (read_gbps, or `measured_gbps`); the compute
    roof the measured product rate (matmul_gflops, or `measured_gflops`). on_timing() is called after
    each model's timings of each step shape."""
    peak = device.peak_gbps()
    measured = measured_gbps if measured_gbps is not None else read_gbps()
    gflops = measured_gflops or matmul_gflops(dtype=models[0].params["wte"].dtype)
    bound_gbps, source = (peak, "datasheet") if peak else (measured, "measured")
    done = on_timing or (lambda: None)
    shapes = ["plain", *range(1, n_max + 1)]
    timer = lambda m, n, warm: (
        timing.plain_step_seconds(m, max_len, iters, 1, warm=warm)
        if n == "plain"
        else timing.step_seconds(m, n, max_len, iters, 1, warm=warm)
    )
    samples = {(i, n): [] for i in range(len(models)) for n in shapes}
    for n in shapes:  # compiles, untimed
        for m in models:
            timer(m, n, True)
    for r in range(repeats):  # each repeat: every shape of every model, the models alternating
        for n in shapes:
            for i in range(len(models)) if r % 2 == 0 else reversed(range(len(models))):
                samples[i, n].extend(timer(models[i], n, False))
                if r == repeats - 1:
                    done()
    rows = []
    for i, model in enumerate(models):
        moved, t_plain = step_bytes(model, max_len), float(np.median(samples[i, "plain"]))
        t1 = float(np.median(samples[i, 1]))
        for n in range(1, n_max + 1):
            t = float(np.median(samples[i, n]))
            flops = step_flops(model, n, max_len)
            memory_s, compute_s = moved / (bound_gbps * 1e9), flops / (gflops * 1e9)
            limit = max(memory_s, compute_s)
            rows.append(
                {
                    "model": model.name,
                    "kernels": kernels.used_by(model.params),
                    "layout": layout(model.params),
                    "layout_extra_bytes": layout_extra_bytes(model),
                    "n_tokens_per_step": n,
                    "t_step_s": t,
                    "bytes_per_step": moved,
                    "flops_per_step": flops,
                    "achieved_gbps": moved / t / 1e9,
                    "achieved_gflops": flops / t / 1e9,
                    "peak_gbps": peak,
                    "measured_gbps": measured,
                    "bound_gbps": bound_gbps,
                    "bound_source": source,
                    "matmul_gflops": gflops,
                    "bound_s": memory_s,
                    "compute_s": compute_s,
                    "limit_s": limit,
                    "limited_by": "memory" if memory_s >= compute_s else "compute",
                    "fraction_of_bound": memory_s / t,
                    "t_over_limit": t / limit,
                    "t_over_t1": t / t1,
                    "t_plain_step_s": t_plain if n == 1 else None,
                    "plain_over_loop": t_plain / t if n == 1 else None,
                }
            )
    return rows


def measure_runs(runs: list[tuple[Model, str]], K: int, context: int, iters: int, progress) -> list[dict]:
    """The roofline of every (model, dtype) in runs, steps of 1..K+1 tokens over a cache of
    `context`, each row with the device's context: the read bandwidth and the matrix-product rate
    first (once, before the steps they bound), then each network with its --kernels layouts timed
    alternately. progress(advance=, what=) is told of every timing (2 + len(runs) (K + 2) in all)."""
    progress(what="read bandwidth (XLA sum over 512 MB)")
    gbps = read_gbps()
    progress(advance=1, what="matrix-product rate (XLA, 2048² float32)")
    gflops = {"float32": matmul_gflops()}
    progress(advance=1)
    groups: dict[tuple, list[Model]] = {}  # one network in each --kernels layout
    for model, dtype in runs:
        groups.setdefault((model.name, dtype), []).append(model)
    rows = []
    for (name, dtype), models in groups.items():
        progress(what=f"timing {name} {dtype} ({', '.join(kernels.used_by(m.params) for m in models)})")
        if dtype not in gflops:
            gflops[dtype] = matmul_gflops(dtype=models[0].params["wte"].dtype)
        tick = lambda: progress(advance=len(models))
        measured = roofline(
            models, K + 1, context, iters, on_timing=tick, measured_gbps=gbps, measured_gflops=gflops[dtype]
        )
        weights = "random (timing only)" if models[0].source == "random" else models[0].source
        rows += [
            {**device.context(), "weights": weights, "dtype": dtype, "context": context, **r}
            for r in measured
        ]
    return rows
