"""specbench's CPU kernel for the decode step's matrix products, and whether it can run here.

    matmul(x, pack(w), n_out, b, layer) = x @ w[layer] + b[layer]
        x [..., n_in], w [L, n_in, n_out], b [L, n_out]

A decode step of n rows (1 token, K+1 verified tokens, B sequences) must read every weight once,
so on a memory-bound machine it should cost about what one row costs (the roofline: DESIGN.md §15,
docs/performance.md). XLA:CPU's products read a weight once per row, or copy it per call; the kernel
(cpu_kernels.cc, built by `pip install` through setup.py and registered here with jax.ffi) reads
it once and applies every row to each element it loads. It reads its weights packed in panels of
WIDTH columns (`pack`, once at load: one contiguous stream per panel), every layer's stacked, and
takes the layer's index, so a `lax.scan` over the layers copies nothing.

Where the kernel cannot run (not built, not a CPU, or its self-check fails), `unavailable()` says
why in one line and gpt2.py keeps XLA's products: the pure-JAX path, which is also the tests'
oracle.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specbench.errors import SpecbenchError
from specbench.model.kernels import pallas, q8_0

CHOICES = ("auto", "cpu", "pallas", "xla")
"""--kernels: auto (the CPU kernel where it can run, else the fused Pallas kernels where they can,
else XLA), cpu (the CPU kernel, or an error saying why it cannot run), pallas (pallas.py's
fused kernels on a Hopper GPU that passes their self-check, or an error saying why not), xla (XLA's
own products everywhere: the pure-JAX path)."""
TARGET = "specbench_matmul"
Q8_TARGET = "specbench_matmul_q8"
READ_TARGET = "specbench_stream_read"
READ_TASK = 1 << 20
"""Floats each task of stream_read sums (cpu_kernels.cc's kReadTask): 4 MB."""
LIBRARY = "_cpu_kernels"  # setup.py's extension: specbench/model/kernels/_cpu_kernels<suffix>
ROWS_MAX = 256
"""Steps of up to this many rows (per sequence) use the kernel: every decode and verify step, and
the prefill of a prompt of up to 256 tokens. A longer prefill uses XLA's GEMM on the weights as
loaded, which overtakes the kernel between 256 and 512 rows (docs/performance.md, "Prefill")."""
WIDTH = 16
"""Columns of a packed panel (cpu_kernels.cc's kWidth): 64 bytes of float32 per row of w."""


def library_path() -> Path | None:
    """The built kernel library beside this module, or None."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (here / (LIBRARY + suffix)).is_file():
            return here / (LIBRARY + suffix)
    return None


@functools.cache
def registration_error() -> str | None:
    """Load the built library and register its handler with XLA, once; None on success, else why not."""
    if jax.default_backend() != "cpu":
        return f"the device is {jax.default_backend()}, and the kernel is for the CPU"
    path = library_path()
    if path is None:
        return "its library was not built at install (pip install -e . needs g++ and jaxlib's FFI headers)"
    try:
        library = ctypes.cdll.LoadLibrary(str(path))
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.specbench_matmul), platform="cpu")
        jax.ffi.register_ffi_target(Q8_TARGET, jax.ffi.pycapsule(library.specbench_matmul_q8), platform="cpu")
        jax.ffi.register_ffi_target(
            READ_TARGET, jax.ffi.pycapsule(library.specbench_stream_read), platform="cpu"
        )
    except (OSError, AttributeError) as e:
        return f"it could not be loaded ({path.name}: {str(e).splitlines()[0]})"
    return None


@functools.cache
def unavailable() -> str | None:
    """None when the kernel is registered and checked; else one line saying why it cannot run.

    The check multiplies odd shapes (a column tail, a k tail, two layers, 3 rows, a batch under
    vmap) and compares with NumPy, so a library built against another jaxlib's FFI fails here,
    not in a measurement."""
    error = registration_error()
    if error:
        return error
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 37), (2, 37, 83), (2, 83)])
    try:
        got = np.asarray(jax.jit(jax.vmap(lambda x: matmul(x, pack(w), 83, b, 1)))(x))
    except Exception as e:  # noqa: BLE001 -- any failure of the library means: do not use it
        return f"its self-check failed ({str(e).splitlines()[0]})"
    if not np.allclose(got, x @ w[1] + b[1], rtol=1e-4, atol=1e-4):
        return "its self-check gave wrong products"
    w = rng.standard_normal((2, 64, 83)).astype(np.float32)
    q = q8_0.quantize(w)
    try:
        got = np.asarray(
            jax.jit(jax.vmap(lambda x: matmul(x, pack_q8(q), 83, b, 1)))(x[..., :1].repeat(64, -1))
        )
    except Exception as e:  # noqa: BLE001
        return f"its int8 self-check failed ({str(e).splitlines()[0]})"
    if not np.allclose(got, x[..., :1].repeat(64, -1) @ q8_0.dequantize(q)[1] + b[1], rtol=1e-4, atol=1e-4):
        return "its int8 self-check gave wrong products"
    return None


@jax.jit
def pack(w):
    """w [..., n_in, n_out] packed for the kernel: [..., n_panels, n_in, WIDTH], panel p holding
    columns p WIDTH .. p WIDTH + WIDTH - 1 of every row (zeros past n_out), n_panels = ceil(n_out /
    WIDTH). The same numbers in another order, padded by at most WIDTH - 1 columns. Jitted: one
    program per matrix shape, where the eager pad, reshape and move compiled three
    (docs/performance.md)."""
    *lead, n_in, n_out = w.shape
    n_panels = -(-n_out // WIDTH)
    padded = jnp.pad(jnp.asarray(w), [(0, 0)] * len(lead) + [(0, 0), (0, n_panels * WIDTH - n_out)])
    return jnp.moveaxis(padded.reshape(*lead, n_in, n_panels, WIDTH), -2, -3)


@jax.jit
def pack_q8(q: q8_0.Q8) -> q8_0.Q8:
    """Q8_0 weights packed for the kernel: codes [..., n_in, n_out] in panels as pack packs a
    matrix, [..., n_panels, n_in, WIDTH] int8, each four rows of a panel interleaved (row k's code
    of column c at [k // 4, c, k % 4] of a [n_in / 4, WIDTH, 4] panel: one 32-bit lane a column's
    four codes, which the kernel widens by shifts); scales [..., n_in / 32, n_out] in panels as
    pack packs them, [..., n_panels, n_in / 32, WIDTH] float32."""
    panels = pack(jnp.asarray(q.codes))  # [..., n_panels, n_in, WIDTH]
    *lead, n_in, width = panels.shape
    fours = jnp.swapaxes(panels.reshape(*lead, n_in // 4, 4, width), -1, -2)
    return q8_0.Q8(fours.reshape(panels.shape), pack(jnp.asarray(q.scales, jnp.float32)))


def reads(packed) -> bool:
    """Whether the kernel multiplies these packed weights: float32 (pack) or Q8_0 (pack_q8), not
    bfloat16."""
    return isinstance(packed, q8_0.Q8) or packed.dtype == jnp.float32


def matmul(x, packed, n_out: int, b=None, layer=0):
    """x [..., n_in] @ w[layer] + b[layer] in float32, from packed = pack(w) (float32), or from
    packed = pack_q8(quantize(w)) (Q8_0: the product over the dequantized weights, bit for bit):
    w [L, n_in, n_out] or [n_in, n_out], b [L, n_out] or [n_out] or None, layer an int32 index
    (may be traced). Under vmap the batch's rows join the product's rows, so a batch reads each
    weight once too."""
    error = registration_error()
    if error:
        raise RuntimeError(f"specbench's CPU kernel cannot run: {error}")
    out = jax.ShapeDtypeStruct(x.shape[:-1] + (n_out,), jnp.float32)
    bias = jnp.zeros((0,), jnp.float32) if b is None else b
    weights = tuple(packed) if isinstance(packed, q8_0.Q8) else (packed,)
    call = jax.ffi.ffi_call(Q8_TARGET if len(weights) == 2 else TARGET, out, vmap_method="expand_dims")
    return call(x, *weights, bias, jnp.asarray(layer, jnp.int32))


def stream_read(x):
    """The sum of x [n] float32, read by the kernel's streaming reader (every thread, the widest
    vectors): the memory roof's reader on a CPU (roofline.read_gbps). One partial sum per 4 MB
    task, added here."""
    error = registration_error()
    if error:
        raise RuntimeError(f"specbench's CPU kernel cannot run: {error}")
    tasks = -(-x.size // READ_TASK)
    return jnp.sum(jax.ffi.ffi_call(READ_TARGET, jax.ShapeDtypeStruct((tasks,), jnp.float32))(x))


def choose(params, n_head: int, choice: str = "auto") -> str:
    """What decoding these weights (a GPT-2 of n_head heads) runs, as `choice` (one of CHOICES)
    asks: "cpu", "pallas" or "xla". `auto` takes the first that can run of cpu, pallas, xla; `cpu`
    and `pallas` raise a SpecbenchError naming --kernels where theirs cannot; `xla` is always XLA."""
    if choice not in CHOICES:
        raise SpecbenchError(f"must be one of {', '.join(CHOICES)} (got {choice!r})", "kernels")
    dtype = jnp.dtype(params["wte"].dtype)
    why = {
        "cpu": lambda: (
            unavailable() or (None if dtype == jnp.float32 else f"it multiplies float32 weights, not {dtype}")
        ),
        "pallas": lambda: pallas.unsupported(params["wte"].shape[1], n_head) or pallas.unavailable(),
    }
    name = {"cpu": "specbench's CPU kernel", "pallas": "the fused Pallas kernels"}
    if choice in why:
        if reason := why[choice]():
            raise SpecbenchError(f"{name[choice]} cannot run: {reason}", "kernels")
        return choice
    if choice == "auto":
        return next((kind for kind in ("cpu", "pallas") if not why[kind]()), "xla")
    return "xla"
