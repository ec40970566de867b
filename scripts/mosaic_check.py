#!/usr/bin/env python
"""The Mosaic GPU products (specbench/model/kernels/mosaic.py) on this machine's device against plain
JAX in float32, bfloat16, at GPT-2 124M's and 1558M's widths, one step and a batch of 4; on a CPU
they run in GPU interpret mode (the smallest width only: interpreting is slow). The first stage of
scripts/gpu_session.sh's Mosaic measuring: one line a product, and the largest error.

    python scripts/mosaic_check.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specbench.model.kernels import mosaic


def check(n_in: int, n_out: int, batch: int) -> float:
    """The largest error of mosaic.linear over its float32 reference, relative to the largest value."""
    rng = np.random.default_rng(n_in + n_out + batch)
    x = jnp.asarray(rng.standard_normal((batch, 16, n_in)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((2, n_in, n_out)) / np.sqrt(n_in), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((2, n_out)), jnp.bfloat16)
    got = jax.jit(jax.vmap(lambda one: mosaic.linear(one, w, b, 1)))(x)
    want = jnp.einsum("bri,io->bro", x.astype(jnp.float32), w[1].astype(jnp.float32)) + b[1].astype(
        jnp.float32
    )
    return float(jnp.abs(got.astype(jnp.float32) - want).max() / jnp.abs(want).max())


def main() -> None:
    shapes = [(768, 2304), (768, 768), (3072, 768), (1600, 4800), (6400, 1600)]
    if jax.default_backend() != "gpu":
        shapes = [(128, 192)]
    worst = 0.0
    for n_in, n_out in shapes:
        for batch in (1, 4):
            err = check(n_in, n_out, batch)
            worst = max(worst, err)
            print(f"{n_in:>5} x {n_out:<5} batch {batch}: relative error {err:.2e}")
    verdict = "ok" if worst < 2e-2 else "TOO LARGE"
    print(f"largest relative error {worst:.2e} ({verdict}; bfloat16's step is 7.8e-3)")


if __name__ == "__main__":
    main()
