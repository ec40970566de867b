"""How specbench's programs are compiled: `jit` is jax.jit with the compiler options of the
backend that runs it.

On a GPU, XLA runs a loop whose trip count is traced (the generation's `while_loop`, a verdict's
loop) by copying its predicate to the host every iteration, and a conditional likewise: 26 µs an
iteration on an H200 against 12 µs for a loop of fixed count (docs/gpu.md, issue 48). XLA's
command buffers (CUDA graphs) that take in WHILE and CONDITIONAL keep both on the device. They
are asked for on GPU backends only; on the CPU nothing changes. SPECBENCH_XLA_LOOPS=default
compiles with XLA's own defaults instead, for a comparison on the same machine.
"""

from __future__ import annotations

import functools

import jax

from specbench import environment

GPU_OPTIONS = {
    "xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL",
    "xla_gpu_graph_min_graph_size": 1,
}


def compiler_options(backend: str) -> dict | None:
    """The options a program is compiled with on `backend`: GPU_OPTIONS on a GPU (unless
    SPECBENCH_XLA_LOOPS=default), None (XLA's defaults) elsewhere."""
    if backend in ("gpu", "cuda", "rocm") and environment.XLA_LOOPS.get() != "default":
        return GPU_OPTIONS
    return None


def loops_setting() -> str:
    """What a row records of it: 'command buffers' where GPU_OPTIONS apply, else 'xla default'."""
    return "command buffers" if compiler_options(jax.default_backend()) else "xla default"


class jit:  # noqa: N801 -- used as jax.jit is, as a function and a decorator
    """jax.jit(fun, **kwargs), compiled with compiler_options(the default backend). The backend is
    read at the first call, not at import, so importing the model never starts JAX's backend."""

    def __init__(self, fun, **kwargs):
        self.fun, self.kwargs = fun, kwargs
        functools.update_wrapper(self, fun)

    @functools.cached_property
    def jitted(self):
        return jax.jit(self.fun, compiler_options=compiler_options(jax.default_backend()), **self.kwargs)

    def __call__(self, *args, **kwargs):
        return self.jitted(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self.jitted.lower(*args, **kwargs)
