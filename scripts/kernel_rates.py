"""The CPU kernel's product alone, x [rows, 256] @ w [256, n_out] (the bundled target's head has
n_out = 50,257), for weights that stay in the last-level cache and for weights that stream from
memory: seconds, GFLOP/s and GB/s for each number of rows, so one sees whether a multi-row product
is held back by its reads or by its arithmetic.

    python scripts/kernel_rates.py                      # n_out 4096, 16384, 50257; rows 1, 5, 8
    python scripts/kernel_rates.py --n-out 4096 --rows 1,2,5,8,16

Each product runs in a device loop of 50 (timing.seconds_per_iter), all shapes alternated within
one process, 9 samples each; the median is printed.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.measure.timing import seconds_per_iter
from specbench.model.kernels import cpu

ITERS, N_IN = 50, 256


def product_loop(packed, n_out: int):
    """ITERS products of the kernel, each one's input the previous one's output (nothing hoisted)."""

    @jax.jit
    def loop(x):
        return lax.fori_loop(0, ITERS, lambda _, x: x + 1e-9 * cpu.matmul(x, packed, n_out)[:, :N_IN], x)

    return loop


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-out", default="4096,16384,50257", help="columns of w, comma-separated")
    parser.add_argument("--rows", default="1,5,8", help="rows of x, comma-separated")
    args = parser.parse_args()
    if cpu.unavailable():
        raise SystemExit(f"the CPU kernel cannot run here: {cpu.unavailable()}")
    rng = np.random.default_rng(0)
    rows = [int(r) for r in args.rows.split(",")]
    cases = {}
    for n_out in (int(n) for n in args.n_out.split(",")):
        packed = cpu.pack(rng.standard_normal((N_IN, n_out)).astype(np.float32))
        for r in rows:
            cases[n_out, r] = (product_loop(packed, n_out), jnp.ones((r, N_IN), jnp.float32))
    samples = {case: [] for case in cases}
    for case, (loop, x) in cases.items():  # compile
        seconds_per_iter(loop, x, ITERS, 1)
    for _ in range(9):  # alternated: drift hits every shape alike
        for case, (loop, x) in cases.items():
            samples[case] += list(seconds_per_iter(loop, x, ITERS, 1, warm=False))
    for n_out in dict.fromkeys(n for n, _ in cases):
        t1 = np.median(samples[n_out, rows[0]])
        print(f"n_out {n_out} ({N_IN * n_out * 4 / 1e6:.1f} MB of w)")
        for r in rows:
            t = np.median(samples[n_out, r])
            flops, bytes_ = 2 * r * N_IN * n_out, N_IN * n_out * 4
            print(
                f"  rows {r:3d}: {t * 1e3:7.3f} ms  ({t / t1:.2f}x rows {rows[0]})"
                f"  {flops / t / 1e9:6.1f} GFLOP/s  {bytes_ / t / 1e9:6.1f} GB/s"
            )


if __name__ == "__main__":
    main()
