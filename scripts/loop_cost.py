"""What one iteration of a device loop costs beyond its body, by the kind of loop:

    python scripts/loop_cost.py                # on the default device
    python scripts/loop_cost.py --n 200 --repeats 30

The step timers loop a fixed number of times (`lax.fori_loop` with a constant bound), whereas a
generation stops when its tokens are done and the verdict when a draft is rejected (`lax.while_loop`
on a traced condition). On a GPU, XLA is expected to run the second kind by copying the condition
to the host and waiting, every iteration (docs/gpu.md, "the bundled pair's time account"). This
times both around the same small body (one [1, 256] x [256, 256] product), and a bare body with
no loop for scale, alternated in one process; prints microseconds per iteration, medians.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def body(x, w):
    return jnp.tanh(x @ w)


def programs(n: int):
    """The two loops of n iterations each, compiled; the traced bound is an argument."""
    fixed = jax.jit(lambda x, w: lax.fori_loop(0, n, lambda i, x: body(x, w), x))

    def traced(x, w, bound):
        cond = lambda c: c[0] < bound
        step = lambda c: (c[0] + 1, body(c[1], w))
        return lax.while_loop(cond, step, (jnp.int32(0), x))[1]

    return {"fori_loop (constant bound)": fixed, "while_loop (traced bound)": jax.jit(traced)}


def seconds(f, *args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="iterations per loop")
    parser.add_argument("--repeats", type=int, default=20)
    a = parser.parse_args()
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 256))
    w = jax.random.normal(jax.random.PRNGKey(1), (256, 256)) / 16
    loops = programs(a.n)
    bare = jax.jit(body)
    calls = {name: (f, (x, w) if "fori" in name else (x, w, jnp.int32(a.n))) for name, f in loops.items()}
    calls["one body, no loop"] = (bare, (x, w))
    np.testing.assert_allclose(*(np.asarray(f(*args)) for f, args in list(calls.values())[:2]), rtol=1e-5)
    times = {name: [] for name in calls}
    for _ in range(2):  # compile and warm every program
        for f, args in calls.values():
            seconds(f, *args)
    for _ in range(a.repeats):  # alternated, so that drift hits all alike
        for name, (f, args) in calls.items():
            times[name].append(seconds(f, *args))
    print(f"device {jax.devices()[0].device_kind} · {a.n} iterations · {a.repeats} repeats, medians")
    one = float(np.median(times["one body, no loop"]))
    print(f"  {'one body, no loop':28s} {one * 1e6:9.1f} µs a call")
    for name in loops:
        t = float(np.median(times[name]))
        print(f"  {name:28s} {t / a.n * 1e6:9.1f} µs an iteration ({t * 1e3:.2f} ms a call)")


if __name__ == "__main__":
    main()
