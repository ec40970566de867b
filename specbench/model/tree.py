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
