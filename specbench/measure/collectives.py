"""The communication a split step pays, timed alone.

On a tensor-parallel mesh (nets/mesh.py) XLA's partitioner gives every step the same collectives:
one all-reduce of the row-split products' partial sums, [rows, width] numbers, after each of them
(all_reduces; tests/mesh_worker.py counts them in the compiled step). This module runs exactly
those collectives and nothing else, chained as the step chains them (each waits for the last),
in a device loop on the target's mesh: JAX's own all-reduce (`lax.psum` under `shard_map`), on
the same devices, of the same shape and dtype. Their time is the communication term of the time
account and of `roofline`: what a split step spends beyond its own device's share of the work,
where the collectives do not overlap that work (on a CPU's host devices they cannot; on a GPU a
layer's all-reduce sits between two products that wait for it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from specbench.measure.timing import seconds_per_iter
from specbench.model.nets import mesh, network
from specbench.model.nets.families import family_of
from specbench.model.nets.network import Model


def all_reduces(config) -> int:
    """All-reduces one split step pays, one after each row-split product (mesh.LOGICAL): two a
    decoder layer (the attention's output projection, the feed-forward's second product); a T5
    decoder block's three (its cross-attention's output projection too)."""
    return family_of(config).all_reduces * network.step_layers(config)


def width(config) -> int:
    """Numbers a token's all-reduce carries: the residual stream's width."""
    return config.width


@functools.partial(jax.jit, static_argnames=("on", "count"))
def _chain(x, on, count: int):
    """`count` all-reduces of x's per-device [1, rows, width] over the mesh `on`, each of the last
    one's result (scaled back by 1/tp, so the numbers stay where they are)."""
    tp = on.shape[mesh.AXIS]

    def one_device(part):
        return lax.fori_loop(0, count, lambda _, y: lax.psum(y, mesh.AXIS) / tp, part)

    spec = P(mesh.AXIS)
    return jax.shard_map(one_device, mesh=on, in_specs=spec, out_specs=spec, check_vma=False)(x)


def comm_seconds(
    model: Model, n: int, batch: int = 1, iters: int = 10, repeats: int = 5, warm: bool = True
) -> np.ndarray:
    """Seconds per step of a split model's collectives alone (all_reduces of [batch n, width] each,
    chained) in a device loop of `iters` steps, one value per repeat (timing.seconds_per_iter's
    rules); zeros for a model on one device."""
    on = mesh.split_over(model.params)
    if on is None:
        return np.zeros(repeats)
    tp, dtype = on.shape[mesh.AXIS], network.dtype_of(model.params, model.config)
    x = jax.device_put(
        jnp.ones((tp, batch * n, width(model.config)), dtype), jax.NamedSharding(on, P(mesh.AXIS))
    )
    loop = lambda y: _chain(y, on, all_reduces(model.config) * iters)
    return seconds_per_iter(loop, x, iters, repeats, warm)
