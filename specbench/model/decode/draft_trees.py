"""Drafting a token tree (a drafter's kind's propose_tree; drafters.py has the registry): a
static Tree drawn level by level without replacement, or EAGLE-2's Dynamic tree grown each round
from the draft's most likely tokens (Li et al., EMNLP 2024). decoding.py's tree round calls
tree_propose; verify.tree_verdict and traversal_verdict judge what it returns."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model.decode import sampling
from specbench.model.decode.drafter import Drafter
from specbench.model.decode.sampling import Warp, probs, sample
from specbench.model.decode.sampling import argmax as first_argmax
from specbench.model.decode.tree import Dynamic, Tree
from specbench.model.decode.tree import shape_of as tree_shape_of
from specbench.model.nets import eagle, layouts, network


def tree_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, n_vocab: int):
    """A token tree of drafts under the pending token (drafter.tree; its kind's propose_tree):
    (dstate, node tokens [N], p [N, V], the round's shape). A static Tree is its own shape; a
    Dynamic tree's is grown this round (dynamic_propose), its p all zero: its children are the
    draft's most likely tokens, proposed with certainty (verify.tree_verdict(certain=True))."""
    if isinstance(drafter.tree, Dynamic):
        return dynamic_propose(drafter, params, dstate, tokens, n, warp, n_vocab)
    return (*drafter.spec.propose_tree(drafter, params, dstate, tokens, n, key, warp, n_vocab), drafter.tree)


def dynamic_propose(drafter: Drafter, params, dstate, tokens, n, warp: Warp, n_vocab: int):
    """A Dynamic tree (EAGLE-2: Li et al., EMNLP 2024, arXiv:2406.16858; a paper's algorithm,
    written as one function): `depth` levels over a static layout of candidates (the root; `top`
    at depth 1; `top` * `top` at each depth after, the children of that level's frontier), the
    network run over every candidate so far under tree attention at each level; then the `nodes`
    candidates of highest cumulative log-probability (ties: the earlier, so parents come first)."""
    spec = drafter.tree
    C, top = spec.candidates, spec.top
    net = drafter.spec.features
    head_tokens = layouts.head_tokens(params)
    cand = jnp.zeros(C, jnp.int32).at[0].set(tokens[n - 1])
    parents = jnp.full(C, -1, jnp.int32)
    score = jnp.full(C, -jnp.inf, jnp.float32).at[0].set(0.0)
    frontier = jnp.zeros(1, jnp.int32)
    if net:  # the head's window, as eagle_tree_propose reads it
        s, window, before, row = eagle.window(dstate.feats, tokens, n, spec.depth + 1)
        _, _, cache = eagle.step(params, dstate.cache, before, window, s, drafter.config, logits_at=row)
        root = eagle.combine(params, before[row], drafter.config)  # f_{n-2} as the head reads it
        reads = jnp.zeros((C, drafter.config.n_embd), before.dtype).at[0].set(root)
    start = 1
    for _ in range(spec.depth):  # each level expands the frontier of the one before
        if net:
            shape = tree_shape_of(parents, spec.depth, top)
            logits, h, _ = eagle.step(params, cache, reads, cand, n - 1, drafter.config, tree=shape)
        else:  # tokens[n-2] above the root, as tree_propose runs it
            above = tree_shape_of(
                jnp.concatenate([jnp.full(1, -1), jnp.where(parents >= 0, parents + 1, 0)]),
                spec.depth + 1,
                top,
            )
            x = jnp.concatenate([lax.dynamic_slice(tokens, (n - 2,), (1,)), cand])
            logits, cache = network.step(params, dstate.cache, x, n - 2, drafter.config, tree=above)
            logits = logits[1:]
        width = frontier.shape[0] * top
        for f in range(frontier.shape[0]):
            u = frontier[f]
            logp = jnp.log(
                jnp.maximum(probs(logits[u], warp) if not warp.greedy else jax.nn.softmax(logits[u]), 1e-30)
            )
            left = logp
            for j in range(top):  # the top most likely tokens, one pass each
                c = first_argmax(left)
                slot = start + f * top + j
                cand = cand.at[slot].set((c if head_tokens is None else head_tokens[c]).astype(jnp.int32))
                parents = parents.at[slot].set(u)
                score = score.at[slot].set(score[u] + left[c])
                left = left.at[c].set(-jnp.inf)
            if net:
                reads = reads.at[start + f * top : start + (f + 1) * top].set(h[u].astype(reads.dtype))
        level_scores = lax.dynamic_slice(score, (start,), (width,))
        frontier = start + lax.top_k(level_scores, min(top, width))[1].astype(jnp.int32)
        start += width
    idx = jnp.arange(C)
    order = jnp.lexsort((idx, -jnp.where(idx > 0, score, -jnp.inf)))  # best first, the root last
    kept = jnp.sort(order[: spec.nodes])  # in candidate order: parents before children
    new_index = jnp.zeros(C, jnp.int32).at[kept].set(jnp.arange(1, spec.nodes + 1, dtype=jnp.int32))
    nodes = jnp.concatenate([cand[:1], cand[kept]])
    node_parents = jnp.concatenate([jnp.full(1, -1, jnp.int32), new_index[parents[kept]]])
    p = jnp.zeros((spec.size, sampling.p_width(warp, n_vocab)), jnp.float32)
    shape = tree_shape_of(node_parents, spec.depth, top)
    if not net:  # the cache in node order, for decoding.compact: one more step over the kept tree
        above = tree_shape_of(jnp.concatenate([jnp.full(1, -1), node_parents + 1]), spec.depth + 1, top)
        x = jnp.concatenate([lax.dynamic_slice(tokens, (n - 2,), (1,)), nodes])
        _, cache = network.step(params, dstate.cache, x, n - 2, drafter.config, tree=above)
    return dstate._replace(cache=cache), nodes, p, shape


def network_tree_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, n_vocab: int):
    """A token tree of drafts under the pending token tokens[n-1] (drafter.tree, node 0), level
    by level: at each depth the network runs over the tree so far in one step (tree attention,
    gpt2.step(tree=)), and each node of that depth gets its children. At T = 0 they are the
    network's most likely distinct tokens there (a greedy tree; the verdict keeps the one that is
    the target's argmax). At T > 0 the children are drawn from the network's distribution there,
    p[node], without replacement (each from what the earlier siblings left), so siblings are
    distinct, as verify.tree_verdict's recursion expects.

    The step also re-reads tokens[n-2] at n-2 (as a chain's first step does), so that a round
    whose accepted path ended at a leaf writes that leaf into the cache. Returns (dstate, node
    tokens [N], p [N, V]: zero for leaves and at T = 0); the cache holds node i at n-1+i, for
    decoding to move the accepted path to consecutive positions (decoding.compact).
    """
    tree, config = drafter.tree, drafter.config
    above = Tree((-1, *(parent + 1 for parent in tree.parents)))  # tokens[n-2], then the tree
    nodes = jnp.zeros(tree.size, jnp.int32).at[0].set(tokens[n - 1])
    p = jnp.zeros((tree.size, sampling.p_width(warp, n_vocab)), jnp.float32)
    keys = jax.random.split(key, max(tree.depth, 1))
    cache = dstate.cache
    for d in range(tree.depth):  # static: the tree's shape is known when traced
        x = jnp.concatenate([lax.dynamic_slice(tokens, (n - 2,), (1,)), nodes])
        logits, cache = network.step(params, dstate.cache, x, n - 2, config, tree=above)
        nodes, p = grow(tree, d, logits[1:], nodes, p, keys[d], warp, layouts.head_tokens(params))
    return dstate._replace(cache=cache), nodes, p


def eagle_tree_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, n_vocab: int):
    """network_tree_propose for an EAGLE head: it re-reads the window up to the pending token as its chain
    does (eagle_propose), then grows the tree level by level, each step over the tree so far at
    n-1 under tree attention, every node reading its parent's predicted feature (the root, the
    target's f_{n-2}). Only the window's cache entries are kept: the next round's window rewrites
    from the target's features whatever the path accepted, so the head's cache needs no compacting;
    decoding compacts the features the verify step returns instead."""
    tree, config = drafter.tree, drafter.config
    s, window, before, row = eagle.window(dstate.feats, tokens, n, tree.depth + 1)
    _, _, cache = eagle.step(params, dstate.cache, before, window, s, config, logits_at=row)
    nodes = jnp.zeros(tree.size, jnp.int32).at[0].set(tokens[n - 1])
    root = eagle.combine(params, before[row], config)  # f_{n-2}, as the head's rows read it
    reads = jnp.zeros((tree.size, config.n_embd), before.dtype).at[0].set(root)
    p = jnp.zeros((tree.size, sampling.p_width(warp, n_vocab)), jnp.float32)
    keys = jax.random.split(key, max(tree.depth, 1))
    for d in range(tree.depth):
        logits, h, _ = eagle.step(params, cache, reads, nodes, n - 1, config, tree=tree)
        nodes, p = grow(tree, d, logits, nodes, p, keys[d], warp, layouts.head_tokens(params))
        for u in np.flatnonzero(tree.depths == d):
            if tree.children[u]:
                reads = reads.at[np.asarray(tree.children[u])].set(h[u].astype(reads.dtype))
    return dstate._replace(cache=cache), nodes, p


def grow(tree: Tree, d: int, logits, nodes, p, key, warp: Warp, head_tokens=None):
    """The children of the tree's nodes at depth d, from their rows of `logits` [N, V'] (in the
    head's columns: token head_tokens[c] for column c, where the head is restricted). At T = 0 they
    are the most likely distinct tokens; at T > 0 draws from the node's distribution without
    replacement, each from what the earlier siblings left, and the node's p row is that
    distribution. Returns (nodes, p)."""
    as_token = (lambda c: c) if head_tokens is None else (lambda c: head_tokens[c])
    greedy, V = warp.greedy, p.shape[1]
    for u in np.flatnonzero(tree.depths == d):
        kids = tree.children[u]
        if not kids:
            continue
        row = logits[u]
        pr = None if greedy else probs(row, warp)  # over the head's columns
        # one child after another, each excluded from the next draw: at T = 0 the next most
        # likely token, else a draw from what is left (sampling.sample, unnormalised weights).
        # A few passes over the vocabulary, where lax.top_k sorted all of it on the CPU.
        left = row if greedy else pr
        for j, kid in enumerate(kids):
            x = first_argmax(left) if greedy else sample(jax.random.fold_in(key, u * 64 + j), left)
            nodes = nodes.at[kid].set(as_token(x).astype(jnp.int32))
            left = left.at[x].set(-jnp.inf if greedy else 0.0)
        if not greedy:
            p = p.at[u].set(pr if head_tokens is None else jnp.zeros(V, jnp.float32).at[head_tokens].set(pr))
    return nodes, p
