"""Why verifying K+1 tokens costs about as much as decoding 1: step time against the memory bound.

A decode step must read every weight and the whole K/V cache once, whatever the number of
tokens; while it is memory-bound, t(n)/t(1) stays near 1 (Williams et al. 2009, "Roofline").
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from specbench.measure import device, timing
from specbench.model.gpt2 import param_bytes
from specbench.model.weights import Model


def step_bytes(model: Model, max_len: int) -> int:
    """Bytes one step must read: every weight once, plus the whole K/V cache (read under the mask)."""
    c = model.config
    itemsize = model.params["wte"].dtype.itemsize
    return param_bytes(model.params) + 2 * c.n_layer * max_len * c.n_embd * itemsize


def read_gbps(megabytes: int = 512, repeats: int = 7) -> float:
    """The device's achievable read bandwidth, GB/s: an XLA sum over a float32 buffer of
    `megabytes` (far beyond the caches), median of `repeats` timed runs after a compile."""
    buf = jnp.ones(megabytes * 2**20 // 4, jnp.float32)
    total = jax.jit(jnp.sum)
    jax.block_until_ready(total(buf))
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(total(buf))
        seconds.append(time.perf_counter() - t0)
    return float(buf.size * 4 / np.median(seconds) / 1e9)


def roofline(
    model: Model,
    n_max: int,
    max_len: int,
    iters: int = 20,
    repeats: int = 5,
    on_timing=None,
    measured_gbps: float | None = None,
) -> list[dict]:
    """Step time for 1 .. n_max tokens, bytes moved, bandwidth achieved, and t(n)/t(1); for 1
    token also the plain host-dispatched step and its ratio to the device loop. The bound is
    bytes / bandwidth: the datasheet peak where the device is known (a GPU), else the measured
    read bandwidth (read_gbps, or `measured_gbps` when given); every row names which.
    on_timing() is called after each of the n_max + 1 timings."""
    moved = step_bytes(model, max_len)
    peak = device.peak_gbps()
    measured = measured_gbps if measured_gbps is not None else read_gbps()
    bound_gbps, source = (peak, "datasheet") if peak else (measured, "measured")
    done = on_timing or (lambda: None)
    t_plain = float(np.median(timing.plain_step_seconds(model, max_len, iters, repeats)))
    done()
    rows = []
    for n in range(1, n_max + 1):
        t = float(np.median(timing.step_seconds(model, n, max_len, iters, repeats)))
        done()
        gbps, bound = moved / t / 1e9, moved / (bound_gbps * 1e9)
        rows.append(
            {
                "n_tokens_per_step": n,
                "t_step_s": t,
                "bytes_per_step": moved,
                "achieved_gbps": gbps,
                "peak_gbps": peak,
                "measured_gbps": measured,
                "bound_gbps": bound_gbps,
                "bound_source": source,
                "bound_s": bound,
                "fraction_of_bound": bound / t,
                "t_over_t1": t / rows[0]["t_step_s"] if rows else 1.0,
                "t_plain_step_s": t_plain if n == 1 else None,
                "plain_over_loop": t_plain / t if n == 1 else None,
            }
        )
    return rows
