"""The decode step with the packed kernel against the kernel before it (commit bb10b9c), alternated
in one process, so that the host's drift hits both alike (between processes it moved step times
by 20-40% on this project's CPU).

It patches gpt2.linear and gpt2.head as they were while the layouts were dicts told apart by their
keys: run it from a checkout of commit 3d9e5f7 (`git worktree add /tmp/ab 3d9e5f7`).

The earlier kernel read the weights as loaded (stacked, HF orientation) and the output head as
wte.T; build its library from that commit and pass its path:

    git show bb10b9c:specbench/model/cpu_kernels.cc > /tmp/old.cc
    FFI="$(python -c 'import jax; print(jax.ffi.include_dir())')"
    g++ -O3 -std=c++17 -Wno-psabi -shared -fPIC -isystem "$FFI" /tmp/old.cc -o /tmp/old_kernel.so
    python scripts/kernel_ab.py /tmp/old_kernel.so tiny-target --rows 1,2,5
    python scripts/kernel_ab.py /tmp/old_kernel.so 124M --rows 1,2,5     # random weights if not downloaded
    python scripts/kernel_ab.py /tmp/old_kernel.so tiny-target --rows 1 --batch 4
    python scripts/kernel_ab.py /tmp/old_kernel.so tiny-target --draft tiny-draft --temperature 1

Prints the median step time of each (timing.step_seconds: device loops of 10 steps, 7 samples
each, the order of the two swapped every repeat) and t(n)/t(first); with --draft, the median
time of a whole speculative round of K = 4 on the default prompt (timing.round_seconds: device
loops of 8 rounds) instead.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specbench import prompts
from specbench.measure import timing
from specbench.measure.prepared import Prepared, RunConfig
from specbench.model.checkpoints import weights
from specbench.model.checkpoints.tokenizer import encode
from specbench.model.decode import drafters
from specbench.model.decode.sampling import Warp
from specbench.model.kernels import cpu
from specbench.model.nets import gpt2, layouts

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
        if layer is not None and packed is None and x.shape[0] <= cpu.ROWS_MAX:
            return old_matmul(x, weight, bias, layer)
        return linear(x, bias, weight, weight_t, packed, layer)

    def old_head(params, x):
        if "weight" in params.get("head", {}) and x.shape[0] <= cpu.ROWS_MAX:
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


def before_packing(model: weights.Model) -> weights.Model:
    """The same model in the earlier kernel's layout: the weights as loaded and the head as wte.T."""
    params = {**layouts.as_loaded(model.params), "head": {"weight": jnp.asarray(model.params["wte"].T)}}
    return dataclasses.replace(model, params=params)


def rounds(args):
    """A speculative round of K = 4 on the default prompt with each kernel, alternated."""
    draft, target = load(args.draft), load(args.model)
    ids = [encode(prompts.DEFAULT_PROMPT)]
    preps, pairs = {}, {"before": (before_packing(draft), before_packing(target)), "packed": (draft, target)}
    for name, (d, t) in pairs.items():
        config = RunConfig(d, t, drafters.model_drafter(d.config), 4, Warp(temperature=args.temperature))
        preps[name] = Prepared.make(config, ids)
    for prep in preps.values():  # compiles, untimed
        timing.round_seconds(prep, iters=8, repeats=1)
    samples = {name: [] for name in preps}
    for r in range(args.repeats):
        for name in list(preps) if r % 2 == 0 else list(reversed(preps)):
            samples[name].extend(timing.round_seconds(preps[name], iters=8, repeats=1, warm=False))
    print(f"{args.draft} -> {args.model}, K = 4, T = {args.temperature}, a round (median of {args.repeats}):")
    for name, t in samples.items():
        print(f"  {name:7s} {float(np.median(t)) * 1e3:.2f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_library", help="the earlier kernel's library (see the module docstring)")
    parser.add_argument("model", nargs="?", default="tiny-target")
    parser.add_argument("--rows", default="1,2,5", help="step shapes, tokens per sequence")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--draft", help="time a speculative round of this draft and the model instead")
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    library = ctypes.cdll.LoadLibrary(args.old_library)
    jax.ffi.register_ffi_target(OLD_TARGET, jax.ffi.pycapsule(library.specbench_matmul), platform="cpu")
    use_old_kernel_without_packed_copies()
    if args.draft:
        return rounds(args)
    new = load(args.model)
    models = {"before": before_packing(new), "packed": new}
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
