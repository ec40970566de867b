"""A target sharded over a device mesh with JAX's SPMD: Megatron-style tensor parallelism
(Shoeybi et al. 2019, "Megatron-LM"), written as logical-axis rules in the manner of
jax-llm-examples and left to XLA's partitioner, which inserts the collectives.

Each split weight names the logical axes of its dimensions by the end of its path (LOGICAL: the
decoders' layout and T5's); RULES maps the logical axes that are split, the heads and the
feed-forward's width, onto the mesh axis "tp", and every other dimension is replicated. So:
- the q/k/v product is split by column, by head, and so is the feed-forward's first product;
- the attention's output projection and the feed-forward's second product are split by row, and
  their partial sums are all-reduced (XLA's, one per product);
- each device attends over its own heads, and the cache is split by head too (it follows the keys
  and values written into it).

A fused product's columns are regrouped once, at placement, so that each device's block of
columns holds its own heads' q, k and v (GPT-2: [q | k | v] becomes [q_0 k_0 v_0 | q_1 k_1 v_1 | ..]):
a plain split of the fused columns would cut across q, k and v. The step undoes the grouping
after its product (gpt2.ungroup), which on one device (one group) is the identity.

A GPT-2 whose heads do not split is padded first (gpt2.pad_heads, network.shard). The draft is not
sharded: it is replicated on the mesh's devices, each running it whole (vLLM measured that a
sharded small draft is slower than none: PR #4840), or placed on one device (decode/placed.py).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from specbench.model.nets.layouts import Layout, Weights, as_weights

AXIS = "tp"
RULES = {"heads": AXIS, "ffn": AXIS}  # logical axis -> mesh axis; every other axis is replicated
WORDS = {"heads": "heads'", "ffn": "feed-forward"}  # a split axis, as a refusal names it
COLUMNS, ROWS = ("layers", "embed", "heads"), ("layers", "heads", "embed")  # by head: in, out
FFN_IN, FFN_OUT = ("layers", "embed", "ffn"), ("layers", "ffn", "embed")
LOGICAL = {
    # the decoders' layout (layouts.MATRICES: GPT-2's, which the Llama family's shares)
    ("attn", "c_attn", "weight"): COLUMNS,
    ("attn", "c_attn", "bias"): ("layers", "heads"),
    ("attn", "c_proj", "weight"): ROWS,
    ("mlp", "c_fc", "weight"): FFN_IN,
    ("mlp", "c_fc", "bias"): ("layers", "ffn"),
    ("mlp", "c_proj", "weight"): FFN_OUT,
    # T5's (t5.py): each stack's self-attention, the decoder's cross-attention, the feed-forward
    **{(part, name): COLUMNS for part in ("attn", "cross") for name in ("q", "k", "v")},
    ("attn", "o"): ROWS,
    ("cross", "o"): ROWS,
    **{("ff", name): FFN_IN for name in ("wi", "wi_0", "wi_1")},
    ("ff", "wo"): FFN_OUT,
}
"""The logical axes of each split weight, by the end of its path in the weights; a weight whose
path ends otherwise (embeddings, norms, the row-split products' biases, T5's position biases, the
head) is replicated."""


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """`--mesh tp=N`: the target split N ways by tensor parallelism."""

    tp: int

    @classmethod
    def parse(cls, text: str) -> MeshSpec:
        """'tp=4' -> MeshSpec(4); ValueError naming what is allowed otherwise."""
        name, _, value = text.partition("=")
        if name.strip() != AXIS or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"must be tp=N with N a whole number >= 1 (got {text!r})")
        return cls(int(value))

    def __str__(self) -> str:
        return f"{AXIS}={self.tp}"


def make_mesh(spec: MeshSpec) -> Mesh:
    """The first spec.tp devices as a one-axis mesh; ValueError where there are fewer."""
    devices = jax.devices()
    if spec.tp > len(devices):
        raise ValueError(
            f"{spec} needs {spec.tp} devices; JAX sees {len(devices)} (on a CPU, XLA_FLAGS="
            f"--xla_force_host_platform_device_count={spec.tp} makes host devices)"
        )
    return Mesh(np.asarray(devices[: spec.tp]), (AXIS,))


def groups(params) -> int:
    """Into how many groups the fused products' columns are regrouped: the mesh's tp, else 1."""
    mesh = as_weights(params).mesh
    return 1 if mesh is None else mesh.shape[AXIS]


def split_over(params) -> Mesh | None:
    """The mesh a model's weights are split over (a decoder's Weights say; a T5's arrays are
    placed split), or None: on one device, or replicated (a draft's)."""
    for x in jax.tree_util.tree_leaves(params):
        sharding = getattr(x, "sharding", None)
        if isinstance(sharding, NamedSharding) and any(axis is not None for axis in sharding.spec):
            return sharding.mesh
    return None


def name(params) -> str | None:
    """The split the rows record: "tp=N" on a mesh, None on one device."""
    on = split_over(params)
    return None if on is None else f"{AXIS}={on.shape[AXIS]}"


def per_device_bytes(params) -> int:
    """Bytes of the weights one device holds: each array's shard on a mesh, the whole elsewhere."""
    return sum(
        int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
        for x in jax.tree_util.tree_leaves(params)
    )


def device_count(params) -> int:
    """The devices a model's weights are on."""
    return len({d for x in jax.tree_util.tree_leaves(params) for d in x.devices()})


def spec_of(logical: tuple[str, ...]) -> P:
    """A PartitionSpec from logical axes, through RULES."""
    return P(*(RULES.get(name) for name in logical))


def check_divides(config, tp: int) -> None:
    """ValueError unless the heads (padded ones too) and the key/value heads split tp ways."""
    kv = getattr(config, "n_kv_head", config.heads)
    for what, n in (("heads", config.heads), ("key/value heads", kv)):
        if n % tp:
            raise ValueError(f"{n} {what} do not split {tp} ways: use a tp that divides {n}")


def grouped(weight, tp: int, parts: tuple[int, ...]):
    """A fused product's columns [..., sum(parts)], each part's columns cut into tp equal pieces,
    regrouped device-major: [part0_0 part1_0 .. | part0_1 part1_1 .. | ..]."""
    pieces = jnp.split(weight, np.cumsum(parts)[:-1], axis=-1)
    per = [jnp.split(p, tp, axis=-1) for p in pieces]
    return jnp.concatenate([per[i][d] for d in range(tp) for i in range(len(parts))], axis=-1)


def logical_axes(path) -> tuple[str, ...] | None:
    """A weight's logical axes (LOGICAL), from its path in the weights' tree; None: replicated."""
    names = tuple(getattr(k, "key", None) for k in path)
    return next((axes for end, axes in LOGICAL.items() if names[-len(end) :] == end), None)


def place(arrays: dict, on: Mesh, fused: dict | None = None) -> dict:
    """Weights as loaded (a dict of arrays), placed on the mesh: every weight split by its logical
    axes (LOGICAL, RULES), the rest replicated; the fused products' columns first regrouped by
    device (`fused`: {matrix: the widths of its parts}, from the network's module)."""
    tp, fused = on.shape[AXIS], fused or {}

    def put(path, x):
        names = tuple(getattr(k, "key", None) for k in path)
        axes = logical_axes(path)
        for size, axis in zip(x.shape, axes or ()):
            if RULES.get(axis) and size % tp:
                raise ValueError(
                    f"the {size} {WORDS[axis]} columns of {'.'.join(names)} do not split {tp} ways: "
                    f"use a tp that divides {size}"
                )
        if names[-3:-1] in fused:
            x = grouped(x, tp, fused[names[-3:-1]])
        return _put(x, on, P() if axes is None else spec_of(axes))

    return jax.tree_util.tree_map_with_path(put, arrays)


def shard_target(arrays: dict, config, on: Mesh, fused: dict) -> Weights:
    """A decoder's weights as loaded, placed on the mesh (place) as the Weights a step reads, its
    mesh static so that the step undoes the fused products' grouping."""
    check_divides(config, on.shape[AXIS])
    return Weights(place(arrays, on, fused), Layout.HF, None, on)


def replicate(params, mesh: Mesh):
    """Weights (a draft's) copied whole onto every device of the mesh, in their layout."""
    return jax.tree_util.tree_map(lambda x: _put(x, mesh, P()), params)


def _put(x, mesh: Mesh, spec: P):
    return jax.device_put(x, NamedSharding(mesh, spec))


def constrain_cache(cache: dict, params) -> dict:
    """The cache split by head on the target's mesh (k [L, H, hd, T], v [L, T, H, hd]); as it is
    without one."""
    mesh = as_weights(params).mesh
    if mesh is None:
        return cache
    k = jax.lax.with_sharding_constraint(cache["k"], NamedSharding(mesh, P(None, AXIS, None, None)))
    v = jax.lax.with_sharding_constraint(cache["v"], NamedSharding(mesh, P(None, None, AXIS, None)))
    return {"k": k, "v": v}
