"""The decode step with the packed kernel against the kernel before it (commit bb10b9c), alternated
in one process, so that the host's drift hits both alike (between processes it moved step times
by 20-40% on this project's CPU).

The earlier kernel read the weights as loaded (stacked, HF orientation) and the output head as
wte.T; build its library from that commit and pass its path:

    git show bb10b9c:specbench/model/cpu_kernels.cc > /tmp/old.cc
    FFI="$(python -c 'import jax; print(jax.ffi.include_dir())')"
    g++ -O3 -std=c++17 -Wno-psabi -shared -fPIC -isystem "$FFI" /tmp/old.cc -o /tmp/old_kernel.so
    python scripts/kernel_ab.py /tmp/old_kernel.so tiny-target --rows 1,2,5
    python scripts/kernel_ab.py /tmp/old_kernel.so 124M --rows 1,2,5     # random weights if not downloaded
    python scripts/kernel_ab.py /tmp/old_kernel.so tiny-target --rows 1 --batch 4

Prints the median step time of each (timing.step_seconds: device loops of 10 steps, 7 samples
each, the order of the two swapped every repeat) and t(n)/t(first).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specbench.measure import timing
from specbench.model import gpt2, kernels, layouts, weights

OLD_TARGET = "specbench_matmul_before_packing"


def old_matmul(x, w, b=None, layer=0):
    """The earlier kernel's call: w as loaded, [L, n_in, n_out] or [n_in, n_out]."""
    out = jax.ShapeDtypeStruct(x.shape[:-1] + (w.shape[-1],), jnp.float32)
    bias = jnp.zeros((0,), jnp.float32) if b is None else b
    call = jax.ffi.ffi_call(OLD_TARGET, out, vmap_method="expand_dims")
    return call(x, w, bias, jnp.asarray(layer, jnp.int32))


def use_old_kernel_without_packed_copies():
    """gpt2.linear and gpt2.head call the earlier kernel where a matrix has no packed copy."""
    linear, head = gpt2.linear, gpt2.head

    def old_linear(x, bias, weight, weight_t=None, packed=None, layer=None):
        if layer is not None and packed is None and x.shape[0] <= kernels.ROWS_MAX:
            return old_matmul(x, weight, bias, layer)
        return linear(x, bias, weight, weight_t, packed, layer)

    def old_head(params, x):
        if "weight" in params.get("head", {}) and x.shape[0] <= kernels.ROWS_MAX:
            return old_matmul(x, params["head"]["weight"])
        return head(params, x)

    gpt2.linear, gpt2.head = old_linear, old_head


def load(name: str) -> weights.Model:
    """The model in the kernel's layout; a registry size not on disk with random weights."""
    spec = weights.resolve(name)
    if isinstance(spec, weights.ModelSpec) and not weights.local_path(spec).exists():
        spec = spec if spec.random_seed is not None else dataclasses.replace(spec, random_seed=0)
        model = weights.Model(spec.name, spec.config, weights.random_model_params(spec), "random")
        return weights.for_decoding_model(model, "cpu")
    return weights.load_model(name, kernels_choice="cpu")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_library", help="the earlier kernel's library (see the module docstring)")
    parser.add_argument("model", nargs="?", default="tiny-target")
    parser.add_argument("--rows", default="1,2,5", help="step shapes, tokens per sequence")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    library = ctypes.cdll.LoadLibrary(args.old_library)
    jax.ffi.register_ffi_target(OLD_TARGET, jax.ffi.pycapsule(library.specbench_matmul), platform="cpu")
    use_old_kernel_without_packed_copies()
    new = load(args.model)
    old_params = {**layouts.as_loaded(new.params), "head": {"weight": jnp.asarray(new.params["wte"].T)}}
    models = {"before": dataclasses.replace(new, params=old_params), "packed": new}
    rows = [int(n) for n in args.rows.split(",")]
    time = lambda m, n, warm: timing.step_seconds(m, n, 128, 10, 1, args.batch, warm=warm)
    for n in rows:  # compiles, untimed
        for m in models.values():
            time(m, n, True)
    samples = {(k, n): [] for k in models for n in rows}
    for r in range(args.repeats):
        order = list(models) if r % 2 == 0 else list(reversed(models))
        for n in rows:
            for k in order:
                samples[k, n].extend(time(models[k], n, False))
    print(f"{args.model}, batch {args.batch}, steps of {args.rows} tokens (median of {args.repeats}):")
    for k in models:
        t = {n: float(np.median(samples[k, n])) for n in rows}
        print(f"  {k:7s} " + "  ".join(f"t({n}) {t[n] * 1e3:.2f} ms ({t[n] / t[rows[0]]:.2f})" for n in rows))


if __name__ == "__main__":
    main()
