"""A token tree of drafts, verified in one target step (SpecInfer, Miao et al., ASPLOS 2024;
EAGLE-2, Li et al. 2024): its nodes in one flat step, each attending to the cache and to its
own ancestors only.

Node 0 is the root: the round's pending token, whose next-token distribution judges its
children. Nodes are listed parents first, so `parents[i] < i`, and the root's parent is -1. A
chain of K drafts is the tree with parents (-1, 0, 1, ..., K - 1): every node's ancestors are
the nodes before it, the causal mask. The shape is static (hashable, a jit argument); the tokens
in it are not.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Tree:
    """The shape of a token tree: parents[i] is node i's parent (-1 for the root, node 0)."""

    parents: tuple[int, ...]

    def __post_init__(self):
        if not self.parents or self.parents[0] != -1:
            raise ValueError("node 0 is the root: its parent is -1")
        for i, p in enumerate(self.parents[1:], start=1):
            if not 0 <= p < i:
                raise ValueError(f"node {i}'s parent {p} must be an earlier node (parents first)")

    dynamic = False  # the shape is fixed: Dynamic's is grown each round

    @property
    def draft_rows(self) -> int:
        """Rows of one drafting step: the tree (a level at a time, over the tree so far)."""
        return self.size

    @classmethod
    def chain(cls, K: int) -> Tree:
        """K drafts in a line: the causal case."""
        return cls((-1, *range(K)))

    @classmethod
    def branching(cls, widths: tuple[int, ...]) -> Tree:
        """Every node at depth d has widths[d] children: (4, 2, 2, 1) gives 4 + 8 + 16 + 16 drafts
        under the root, level by level."""
        parents, level = [-1], [0]
        for width in widths:
            nxt = []
            for node in level:
                for _ in range(width):
                    parents.append(node)
                    nxt.append(len(parents) - 1)
            level = nxt
        return cls(tuple(parents))

    @property
    def size(self) -> int:
        return len(self.parents)

    @functools.cached_property
    def depths(self) -> np.ndarray:
        """[n] each node's depth: the root 0, a child one more than its parent."""
        depth = np.zeros(self.size, np.int32)
        for i, p in enumerate(self.parents[1:], start=1):
            depth[i] = depth[p] + 1
        return depth

    @property
    def depth(self) -> int:
        """The deepest node's depth: the drafts a round can accept, its K."""
        return int(self.depths.max())

    @functools.cached_property
    def ancestors(self) -> np.ndarray:
        """[n, n] bool: ancestors[i, j] when node j is node i or one of its ancestors, the nodes
        node i attends to in the step (besides the cache)."""
        mask = np.eye(self.size, dtype=bool)
        for i, p in enumerate(self.parents[1:], start=1):
            mask[i] |= mask[p]
        return mask

    @functools.cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """children[i]: node i's children, in order."""
        out = [[] for _ in range(self.size)]
        for i, p in enumerate(self.parents[1:], start=1):
            out[p].append(i)
        return tuple(tuple(c) for c in out)

    @functools.cached_property
    def on_path(self) -> np.ndarray:
        """[n, depth + 1] int32: on_path[u, d] is the node at depth d on the root's path to node
        u, and u itself past its depth (any valid index: those slots are never read)."""
        table = np.repeat(np.arange(self.size, dtype=np.int32)[:, None], self.depth + 1, 1)
        for u in range(self.size):
            for j in np.flatnonzero(self.ancestors[u]):
                table[u, self.depths[j]] = j
        return table

    @functools.cached_property
    def child_table(self) -> np.ndarray:
        """[n, widest] int32: each node's children in order, -1 padded."""
        width = max(1, max(len(c) for c in self.children))
        table = np.full((self.size, width), -1, np.int32)
        for u, kids in enumerate(self.children):
            table[u, : len(kids)] = kids
        return table

    def paths(self) -> list[list[int]]:
        """Every root-to-leaf path, as node indices."""
        leaves = [i for i in range(self.size) if not self.children[i]]
        return [list(np.flatnonzero(self.ancestors[leaf])) for leaf in leaves]


@dataclasses.dataclass(frozen=True)
class Dynamic:
    """A dynamic token tree in EAGLE-2's manner (Li, Wei, Zhang and Zhang, EMNLP 2024, "EAGLE-2:
    Faster Inference of Language Models with Dynamic Draft Trees", arXiv:2406.16858): the draft
    grows `depth` levels, each expanding the `top` candidates of the level with the highest
    cumulative draft probability (the product of p along their path) into their `top` most likely
    children; of every candidate grown, the `nodes` of highest cumulative probability are kept and
    verified. The shape follows the draft's confidence from round to round; the sizes are static,
    so one program serves every round. Each round's shape is a Shape of device arrays."""

    depth: int
    top: int
    nodes: int

    def __post_init__(self):
        if min(self.depth, self.top, self.nodes) < 1:
            raise ValueError("a dynamic tree has depth, top and nodes >= 1")
        if self.nodes > self.candidates - 1:
            raise ValueError(f"{self.nodes} nodes are more than the {self.candidates - 1} candidates grown")

    dynamic = True  # the shape is grown each round (draft_trees.dynamic_propose)

    @property
    def draft_rows(self) -> int:
        """Rows of one drafting step: every candidate, at each level."""
        return self.candidates

    @property
    def size(self) -> int:
        """Nodes verified, the root included."""
        return self.nodes + 1

    @property
    def candidates(self) -> int:
        """Candidates grown, the root included: top at depth 1, top * top at each depth after."""
        return 1 + self.top + (self.depth - 1) * self.top * self.top


class Shape(NamedTuple):
    """One round's tree as device arrays, read where a Tree's tables are (parents first)."""

    parents: jax.Array  # [n] int32, -1 for the root
    depths: jax.Array  # [n] int32
    ancestors: jax.Array  # [n, n] bool: ancestors[i, j] when j is i or one of its ancestors
    child_table: jax.Array  # [n, width] int32: children in order, -1 padded
    on_path: jax.Array  # [n, depth + 1] int32: the node at each depth on the path to i, then i


def shape_of(parents, depth: int, width: int) -> Shape:
    """The tables of a tree given by its parents [n] (traced; parents first, -1 for the root), of
    at most `depth` levels and `width` children per node."""
    n = parents.shape[0]
    idx = jnp.arange(n)
    up = jnp.maximum(parents, 0)
    ancestors = jnp.eye(n, dtype=bool)
    depths = jnp.zeros(n, jnp.int32)
    for _ in range(depth):  # each pass reaches one level further up
        ancestors = jnp.eye(n, dtype=bool) | jnp.where((parents >= 0)[:, None], ancestors[up], False)
        depths = jnp.where(parents >= 0, depths[up] + 1, 0)
    earlier_sibling = (parents[:, None] == parents[None, :]) & (idx[None, :] < idx[:, None])
    slot = jnp.sum(earlier_sibling, axis=1)
    child_table = jnp.full((n, width), -1, jnp.int32)
    child_table = child_table.at[jnp.where(parents >= 0, up, n), slot].set(idx.astype(jnp.int32), mode="drop")
    at_depth = ancestors[:, :, None] & (depths[None, :, None] == jnp.arange(depth + 1)[None, None, :])
    on_path = jnp.where(jnp.any(at_depth, 1), jnp.argmax(at_depth, 1), idx[:, None]).astype(jnp.int32)
    return Shape(parents.astype(jnp.int32), depths, ancestors, child_table, on_path)
