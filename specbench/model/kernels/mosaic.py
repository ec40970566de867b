"""The decode step's products as Mosaic GPU kernels (plgpu.kernel, Pallas's own GPU lowering),
swap-AB in bfloat16: the Triton kernels' alternative, chosen by SPECBENCH_PALLAS_BACKEND=mosaic
until a card has measured both (pallas_layers.product).

    y^T [n_out, ROWS] = W^T [n_out, n_in] @ x^T [n_in, ROWS]

Why swap: a warpgroup's wgmma takes 64 rows of its left operand, and a decode step has 1 to 16.
With the weight on the left its output columns fill the 64 rows and the step's tokens are the
right operand's 16 columns, so nothing is padded to 64 (mirage's Linear_SwapAB_Hopper, DeepGEMM
and SGLang do the same for M <= 16).

How: a program per block of BN = 64 output columns, one warpgroup, streams its [64, n_in] panel of
W^T and x^T through shared memory in TK-wide tiles (emit_pipeline: TMA copies, two in flight) and
accumulates wgmma's [64, ROWS] float32 tile, written out as bfloat16. Both tiles are 32-byte
swizzled: wgmma takes one swizzle for both operands, and a row of x^T is 16 bfloat16s. The norm
before and the bias, activation and residual after run in XLA over [ROWS, n] arrays (a few
microseconds); the weight stream is the product's cost.

The weight's transpose is a copy kept beside it (layouts.pallas_layout: `weight_t`, [n_layer,
n_out, n_in]), which costs the block matrices again in memory. A variant that reads W in place
through a transposed view of its shared-memory tile (plgpu.transpose_ref) lowers for CUDA too, but
GPU interpret mode cannot run a transposed wgmma operand, so its numerics could not be tested
without a card; it waits for one. On the CPU the kernel runs in GPU interpret mode (the tests'
path); tests/test_mosaic_kernels.py also lowers it for CUDA with jax.export.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from specbench.model.kernels.norms import layer_norm
from specbench.model.kernels.pallas import traced_for

BN = 64  # output columns a program computes: wgmma's M
TK = 64  # the n_in a pipeline step streams (at most; a power of two dividing n_in)


def unsupported(n_in: int, n_out: int, dtype) -> str | None:
    """None where the kernel takes a product of this shape and dtype; else why not."""
    if jnp.dtype(dtype) != jnp.bfloat16:
        return f"it multiplies bfloat16 (wgmma would round {jnp.dtype(dtype).name} to tf32)"
    if n_out % BN or n_in % 16:
        return f"n_out {n_out} must be a multiple of {BN} and n_in {n_in} of 16"
    return None


# The JAX releases [from, to) whose private InterpretGPUParams interpret_params reads, tested here
# (tests/test_mosaic_kernels.py): the one jax._src import of the package, for GPU interpret mode on
# the CPU only; a card runs the kernels without it.
INTERPRET_JAX = ((0, 10), (0, 11))


def tk(n_in: int) -> int:
    """The pipeline's step along n_in: the largest power of two dividing it, at most TK."""
    return min(n_in & -n_in, TK)


def interpret_params():
    """GPU interpret mode's parameters where the kernel is traced for the CPU, else None (compiled
    for a GPU, or lowered for CUDA: pallas.lowering_for)."""
    if traced_for() != "cpu":
        return None
    version = tuple(int(v) for v in jax.__version__.split(".")[:2])
    if not INTERPRET_JAX[0] <= version < INTERPRET_JAX[1]:
        raise RuntimeError(
            f"Mosaic GPU's interpret mode is JAX's private InterpretGPUParams, tested with JAX "
            f"{INTERPRET_JAX[0][0]}.{INTERPRET_JAX[0][1]}.x; this is {jax.__version__}"
        )
    from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # public in no release yet

    return InterpretGPUParams()


def swizzled(dtype, columns: int):
    """The tiling and swizzle both operands' shared-memory tiles share: the widest a row of x^T's
    `columns` takes (32 bytes for one step's 16 bfloat16s)."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    swizzle = plgpu.find_swizzle(columns * jnp.dtype(dtype).itemsize * 8)
    return plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(swizzle)


def product_t(x_t, weight_t, layer: int, interpret=None):
    """W^T[layer] [n_out, n_in] @ x_t [n_in, C] -> [n_out, C] in x_t's dtype, one kernel; C is a
    step's ROWS, or a batch's B x ROWS (batched: a batch's steps are one product's columns, up to
    wgmma's 256). `layer` a Python int (the unrolled layers': the kernel reads its panel in place)."""
    fn = jax.custom_batching.custom_vmap(lambda x_t, w_t: kernel_t(x_t, w_t, layer, interpret))

    @fn.def_vmap
    def batched(axis_size, in_batched, x_t, w_t):
        n_in, cols = x_t.shape[1:]
        if in_batched[1] or axis_size * cols > 256:  # one product a sequence
            args = (x_t, w_t) if in_batched[1] else (x_t,)
            one = (lambda a: fn(*a)) if in_batched[1] else (lambda a: fn(a[0], w_t))
            return lax.map(one, args), True
        folded = jnp.moveaxis(x_t, 0, 1).reshape(n_in, axis_size * cols)  # [n_in, B x C]
        out = fn(folded, w_t)  # [n_out, B x C]
        return jnp.moveaxis(out.reshape(out.shape[0], axis_size, cols), 1, 0), True

    return fn(x_t, weight_t)


def kernel_t(x_t, weight_t, layer: int, interpret=None):
    """product_t's kernel over one x_t [n_in, C]."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    _, n_out, n_in = weight_t.shape
    cols = x_t.shape[1]
    step_k, transforms = tk(n_in), swizzled(weight_t.dtype, cols)

    def body(x_gmem, w_gmem, out_gmem):
        j = lax.axis_index("n")

        def scoped(acc):
            def step(_, w_smem, x_smem):
                plgpu.wgmma(acc, w_smem, x_smem)
                plgpu.wgmma_wait(0)

            plgpu.emit_pipeline(
                step,
                grid=(n_in // step_k,),
                in_specs=[
                    plgpu.BlockSpec((BN, step_k), lambda k: (j, k), transforms=transforms),
                    plgpu.BlockSpec((step_k, cols), lambda k: (k, 0), transforms=transforms),
                ],
                max_concurrent_steps=2,
            )(w_gmem.at[layer], x_gmem)
            out_gmem[pl.ds(j * BN, BN), :] = acc[...].astype(out_gmem.dtype)

        pl.run_scoped(scoped, plgpu.ACC((BN, cols), jnp.float32))

    kernel = plgpu.kernel(
        body,
        out_type=jax.ShapeDtypeStruct((n_out, cols), x_t.dtype),
        grid=(n_out // BN,),
        grid_names=("n",),
        interpret=interpret,
    )
    return kernel(x_t, weight_t)


def linear(x, weight, bias, layer, norm=None, activation=None, residual=None, eps=1e-5, weight_t=None):
    """pallas.linear's product through product_t: activation(layer_norm(x) @ weight[layer] +
    bias[layer]) + residual, x [ROWS, n_in] bfloat16. `weight_t` is weight's transposed copy
    (layouts.pallas_layout's), made here where the layout has none; a traced `layer` (the scanned
    layers') slices its panel out first, a copy."""
    f32 = lambda a: a.astype(jnp.float32)
    if norm is not None:
        x = layer_norm(x, norm["weight"][layer], norm["bias"][layer], eps).astype(x.dtype)
    w_t = jnp.swapaxes(weight, 1, 2) if weight_t is None else weight_t
    if not isinstance(layer, int):
        w_t, layer = lax.dynamic_index_in_dim(w_t, layer, 0), 0
    y = f32(product_t(x.T, w_t, layer, interpret_params()).T) + f32(bias[layer])[None, :]
    if activation is not None:
        y = activation(y)
    return (y if residual is None else f32(residual) + y).astype(x.dtype)


@functools.cache
def lowering_checks() -> tuple:
    """jax.export's safety checks a CUDA lowering of the kernel needs disabled (its custom call)."""
    from jax import export

    return (export.DisabledSafetyCheck.custom_call("mosaic_gpu_v2"),)
