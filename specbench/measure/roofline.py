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
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.measure import collectives, device, timing
from specbench.measure.step_costs import layout_extra_bytes, step_bytes, step_flops
from specbench.model.kernels import cpu, pallas
from specbench.model.kernels.pallas_layers import backend, product
from specbench.model.nets import gpt2, layouts, mesh, network
from specbench.model.nets.network import Model


def _median_seconds(fn, arg, repeats: int, *rest) -> float:
    jax.block_until_ready(fn(arg, *rest))  # compile
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(arg, *rest))
        seconds.append(time.perf_counter() - t0)
    return float(np.median(seconds))


class Reads(NamedTuple):
    """The read bandwidth, GB/s, by each reader: XLA's sum, and the CPU kernel's streaming reader
    (None where the kernel cannot run). The memory roof is the faster: a roof no code here beats."""

    xla: float
    kernel: float | None

    @property
    def best(self) -> float:
        return max(self.xla, self.kernel or 0.0)


def read_gbps(megabytes: int = 512, repeats: int = 7) -> Reads:
    """The device's achievable read bandwidth, GB/s, over a float32 buffer of `megabytes` (far
    beyond the caches), by XLA's sum and by the CPU kernel's reader (cpu.stream_read, where it
    runs), alternated; medians of `repeats` timed runs after a compile."""
    buf = jnp.ones(megabytes * 2**20 // 4, jnp.float32)
    readers = {"xla": jax.jit(jnp.sum)}
    if cpu.unavailable() is None:
        readers["kernel"] = jax.jit(cpu.stream_read)
    seconds = {name: [] for name in readers}
    for f in readers.values():
        jax.block_until_ready(f(buf))  # compile
    for _ in range(repeats):
        for name, f in readers.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(buf))
            seconds[name].append(time.perf_counter() - t0)
    gbps = {name: buf.size * 4 / float(np.median(s)) / 1e9 for name, s in seconds.items()}
    return Reads(gbps["xla"], gbps.get("kernel"))


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
    measured_gbps: Reads | None = None,
    measured_gflops: float | None = None,
) -> list[dict]:
    """For each model, one row per step of 1 .. n_max tokens: its time, bytes and FLOPs, both roofs
    and its limit, and t(n)/t(1); for 1 token also the plain host-dispatched step and its ratio to
    the device loop. The models (one network in several layouts, say) are timed alternately, repeat
    by repeat, so that drift hits them alike. The memory roof is the datasheet peak where the device
    is known (a GPU), else the measured read bandwidth (read_gbps, or `measured_gbps`); the compute
    roof the measured product rate (matmul_gflops, or `measured_gflops`). on_timing() is called after
    each model's timings of each step shape. A model split over a mesh also has each step's
    collectives timed alone (collectives.comm_seconds), and their share of the step."""
    peak = device.peak_gbps()
    reads = measured_gbps if measured_gbps is not None else read_gbps()
    measured = reads.best
    gflops = measured_gflops or matmul_gflops(dtype=network.dtype_of(models[0].params, models[0].config))
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
    for i, m in enumerate(models):  # on a mesh: each step's collectives alone (collectives.py)
        for n in range(1, n_max + 1) if mesh.name(m.params) else ():
            samples[i, "comm", n] = collectives.comm_seconds(m, n, iters=iters, repeats=repeats)
    roofs = {"peak": peak, "reads": reads, "bound": (bound_gbps, source), "gflops": gflops}
    return [row for i, m in enumerate(models) for row in step_rows(m, samples, i, n_max, max_len, roofs)]


def step_rows(model: Model, samples: dict, i: int, n_max: int, max_len: int, roofs: dict) -> list[dict]:
    """roofline's rows of one model (the i-th timed): each step shape's time against both roofs."""
    peak, reads, (bound_gbps, source), gflops = roofs["peak"], roofs["reads"], roofs["bound"], roofs["gflops"]
    moved, t_plain = step_bytes(model, max_len), float(np.median(samples[i, "plain"]))
    t1 = float(np.median(samples[i, 1]))
    comm = lambda n: float(np.median(samples[i, "comm", n])) if (i, "comm", n) in samples else None
    rows = []
    for n in range(1, n_max + 1):
        t = float(np.median(samples[i, n]))
        flops = step_flops(model, n, max_len)
        memory_s, compute_s = moved / (bound_gbps * 1e9), flops / (gflops * 1e9)
        limit = max(memory_s, compute_s)
        rows.append(
            {
                "model": model.name,
                "mesh": mesh.name(model.params),
                "part": "step",
                "kernels": layouts.kernels_used(model.params),
                "pallas_backend": backend() if layouts.kernels_used(model.params) == "pallas" else None,
                "layout": layouts.as_weights(model.params).layout.value,
                "layout_extra_bytes": layout_extra_bytes(model),
                "n_tokens_per_step": n,
                "t_step_s": t,
                "bytes_per_step": moved,
                "flops_per_step": flops,
                "achieved_gbps": moved / t / 1e9,
                "achieved_gflops": flops / t / 1e9,
                "peak_gbps": peak,
                "measured_gbps": reads.best,
                "read_gbps_xla": reads.xla,
                "read_gbps_kernel": reads.kernel,
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
                "t_comm_s": comm(n),
                "comm_share": None if comm(n) is None else comm(n) / t,
            }
        )
    return rows


PARTS = ("ln+qkv", "attention", "proj+residual", "ln+fc+gelu", "fc proj+residual")
"""The fused Pallas kernels of a layer (pallas_layers.block), as roofline rows name them."""


def loop_seconds(fn, x, weights, iters: int, layers: int = 1, repeats: int = 5) -> float:
    """Seconds per call of fn(x, weights, layer) in a device loop of `iters` iterations, each
    calling it for layers 0..layers-1 in turn, each call's input depending on the last one's output
    (a term too small to change it); median of `repeats` timed loops. The weights are the loop's
    argument, not constants folded into the compiled program (1558M's would put gigabytes into
    it). Several layers a turn spread a loop iteration's own cost (about 12 µs on a GPU,
    docs/gpu.md) over several calls and make each call read weights that are not in the cache."""

    def loop(x, w):
        def body(_, x):
            for layer in range(layers):
                x = x.at[0, 0].add(fn(x, w, layer)[0, 0].astype(x.dtype) * 1e-30)
            return x

        return lax.fori_loop(0, iters, body, x)

    return _median_seconds(jax.jit(loop), x, repeats, weights) / (iters * layers)


LAYERS_A_TURN = 8  # 8 of 1558M's layers hold 490 MB in bfloat16: ten times an H100's L2


def kernel_row(model: Model, part: str, n: int, t: float, moved: int, bound_gbps: float) -> dict:
    """One kernel's row in the roofline's schema: its time against the memory bound of its bytes."""
    bound = moved / (bound_gbps * 1e9)
    return {
        "model": model.name,
        "kernels": "pallas",
        "pallas_backend": backend(),
        "layout": layouts.as_weights(model.params).layout.value,
        "part": part,
        "n_tokens_per_step": n,
        "t_step_s": t,
        "bytes_per_step": moved,
        "achieved_gbps": moved / t / 1e9,
        "bound_gbps": bound_gbps,
        "bound_s": bound,
        "limit_s": bound,
        "limited_by": "memory",
        "fraction_of_bound": bound / t,
        "t_over_limit": t / bound,
    }


def kernel_parts(model: Model, max_len: int, iters: int, bound_gbps: float) -> list[dict]:
    """For a model in the Pallas layout, each of its five kernels a layer (PARTS) timed alone, over
    its first LAYERS_A_TURN layers in turn, for steps of 1 and 5 tokens (padded to pallas.ROWS:
    the same work, as a memory-bound step should be), with the bytes a call must read and write:
    its layer's weights, its rows, and for attention the cache before pos = max_len - n. Rows in
    the roofline's schema, with `part` naming the kernel."""
    c, p = model.config, model.params
    layers = min(c.n_layer, LAYERS_A_TURN)
    blocks, dtype, rows = p["blocks"], p["wte"].dtype, pallas.ROWS
    item, e = jnp.dtype(dtype).itemsize, c.n_embd
    rng = np.random.default_rng(0)
    normal = lambda n: jnp.asarray(rng.standard_normal((rows, n)), dtype)
    cache = gpt2.init_cache(c, max_len, dtype)
    attn, mlp = blocks["attn"], blocks["mlp"]
    product_bytes = lambda w, extra=0: (w["weight"][0].size + w["bias"][0].size + extra) * item
    out = []
    for n in (1, 5):
        pos, sees = max_len - n, jnp.asarray(pallas.padded_sees(np.tril(np.ones((n, n), bool))))
        eps = c.layer_norm_epsilon
        parts = {  # name: (kernel of its input and weights, its input, its weights, bytes it must move)
            "ln+qkv": (
                lambda x, w, i: product(x, w["c_attn"], i, norm=w["ln_1"], eps=eps),
                normal(e),
                {"c_attn": attn["c_attn"], "ln_1": blocks["ln_1"]},
                product_bytes(attn["c_attn"], 2 * e + rows * 4 * e),
            ),
            "attention": (
                lambda qkv, w, i: pallas.attention(qkv, w["k"], w["v"], i, jnp.int32(pos), sees, c.n_head),
                normal(3 * e),
                {"k": cache["k"], "v": cache["v"]},
                (2 * pos * e + rows * 4 * e) * item,
            ),
            "proj+residual": (
                lambda a, w, i: product(a, w, i, residual=a),
                normal(e),
                attn["c_proj"],
                product_bytes(attn["c_proj"], rows * 3 * e),
            ),
            "ln+fc+gelu": (
                lambda x, w, i: product(x, w["c_fc"], i, norm=w["ln_2"], activation=gpt2.gelu, eps=eps),
                normal(e),
                {"c_fc": mlp["c_fc"], "ln_2": blocks["ln_2"]},
                product_bytes(mlp["c_fc"], 2 * e + rows * 5 * e),
            ),
            "fc proj+residual": (
                lambda h, w, i: product(h, w, i, residual=h[:, :e]),
                normal(4 * e),
                mlp["c_proj"],
                product_bytes(mlp["c_proj"], rows * 6 * e),
            ),
        }
        for name, (fn, x, weights, moved) in parts.items():
            out.append(
                kernel_row(model, name, n, loop_seconds(fn, x, weights, iters, layers), moved, bound_gbps)
            )
    first = {r["part"]: r["t_step_s"] for r in out if r["n_tokens_per_step"] == 1}
    return [r | {"t_over_t1": r["t_step_s"] / first[r["part"]]} for r in out]


def measure_runs(
    runs: list[tuple[Model, str]], K: int, context: int, iters: int, progress, on_network=None
) -> list[dict]:
    """The roofline of every (model, dtype) in runs, steps of 1..K+1 tokens over a cache of
    `context`, each row with the device's context: the read bandwidth and the matrix-product rate
    first (once, before the steps they bound), then each network with its --kernels layouts timed
    alternately. progress(advance=, what=) is told of every timing (2 + len(runs) (K + 2) in all);
    on_network(rows so far), if given, after each network (a run cut off keeps what it measured)."""
    progress(what="read bandwidth (512 MB: XLA's sum, the CPU kernel's reader)")
    gbps = read_gbps()
    progress(advance=1, what="matrix-product rate (XLA, 2048² float32)")
    gflops = {"float32": matmul_gflops()}
    progress(advance=1)
    groups: dict[tuple, list[Model]] = {}  # one network in each --kernels layout
    for model, dtype in runs:
        groups.setdefault((model.name, dtype), []).append(model)
    rows = []
    for (name, dtype), models in groups.items():
        progress(what=f"timing {name} {dtype} ({', '.join(layouts.kernels_used(m.params) for m in models)})")
        if dtype not in gflops:
            gflops[dtype] = matmul_gflops(dtype=network.dtype_of(models[0].params, models[0].config))
        tick = lambda: progress(advance=1)  # roofline() calls it once per model and step shape
        measured = roofline(
            models, K + 1, context, iters, on_timing=tick, measured_gbps=gbps, measured_gflops=gflops[dtype]
        )
        for model in models:  # each fused kernel of a Pallas layout alone, after the steps
            if layouts.kernels_used(model.params) == "pallas":
                progress(what=f"timing {name} {dtype}: each Pallas kernel of a layer, 1 and 5 tokens")
                bound = measured[0]["bound_gbps"]
                measured += kernel_parts(model, context, iters, bound)
        weights = "random (timing only)" if models[0].source == "random" else models[0].source
        rows += [
            {**device.context(), "weights": weights, "dtype": dtype, "context": context, **r}
            for r in measured
        ]
        if on_network:
            on_network(rows)
    return rows
