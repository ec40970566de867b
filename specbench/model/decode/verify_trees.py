"""How the target judges a round's token tree (verify.py has the chains and k drafts, and picks
a drafter's rule: verdict_of). Both rules are exact, and each reduces at T = 0 to
greedy_tree_verdict:

  * tree       tree_verdict: recursive rejection sampling from the root (SpecInfer, Miao et al.
               2024; without replacement, Jeon et al. 2024).
  * traversal  traversal_verdict: Traversal Verification from the leaves (Weng et al., NeurIPS
               2025), whole paths judged as block verification judges a chain.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model.decode.sampling import race, residual


def tree_verdict(
    key,
    tree,
    node_tokens,
    p,
    q,
    update_residual: bool = True,
    without_replacement: bool = True,
    certain: bool = False,
):
    """One round's verdict over a token tree (tree.Tree): recursive rejection sampling down the
    tree. The children of node u were drawn from the draft's distribution there, p[u], without
    replacement (draft_trees.tree_propose: distinct siblings, which i.i.d. draws of a peaked p are
    not); at u they are tried in order, child c with token x accepted with probability
    min(1, r(x) / p_c(x)), starting from r = q[u], where p_c is p[u] with the earlier siblings'
    tokens removed and renormalised: the distribution c was drawn from. Each rejection replaces r
    by norm(max(r - p_c, 0)). An accepted child becomes u; when every child is rejected the
    emitted token is drawn from r, and at a leaf it is the bonus from q[leaf]. Each step is a
    rejection sampler of the current r, so each emitted token follows the target (Recursive
    Rejection Sampling without replacement: Jeon et al. 2024, arXiv:2402.14160; with independent
    children and p_c = p[u] it is SpecInfer's, Miao et al. 2024, Algorithm 2). A paper's
    algorithm, written as one function as the paper writes it.

    node_tokens [n] (the root's is the pending token, not judged), p [n, V] and q [n, V]: the
    draft's and the target's distributions after each node (the target's from one tree step).
    A fixed count of depths, each a fixed count of candidates: no data-dependent loop. With
    `certain` each child was proposed with certainty (a dynamic tree's most likely tokens): p_c is
    one-hot at its token, so it is accepted with probability r(x) and a rejection removes x from r.
    `tree` is a tree.Tree or a round's tree.Shape.
    Returns (n_accepted, emitted, last): the accepted drafts, the token after them, and the node
    the accepted path ends at. update_residual=False, and without_replacement=False on siblings
    drawn without replacement, are the tests' broken variants.
    """
    table = jnp.asarray(tree.child_table)
    width, depth = table.shape[1], np.shape(tree.on_path)[1] - 1
    k_coins, k_emit = jax.random.split(key)
    coins = jax.random.uniform(k_coins, (max(depth, 1), width))

    def level(d, carry):
        u, r, stopped, n_accepted = carry
        found, nxt, p_c = jnp.bool_(False), u, p[u]
        for j in range(width):  # the candidates in order, unrolled: the width is static
            c = table[u, j]
            x = node_tokens[jnp.maximum(c, 0)]
            if certain:
                p_c = jax.nn.one_hot(x, q.shape[-1], dtype=q.dtype)
            # a sibling the draft could not have drawn (p had fewer tokens than children) is skipped
            tested = ~stopped & ~found & (c >= 0) & (p_c[x] > 0)
            accepted = tested & (coins[d, j] * p_c[x] < r[x])
            nxt = jnp.where(accepted, c, nxt)
            if update_residual:
                r = jnp.where(tested & ~accepted, residual(r, p_c), r)
            if without_replacement and not certain:  # the next sibling was drawn from what is left
                rest = p_c.at[x].set(0.0)
                p_c = jnp.where(tested, rest / jnp.maximum(jnp.sum(rest), 1e-30), p_c)
            found = found | accepted
        leaf = table[nxt, 0] < 0
        r = jnp.where(found, q[nxt], r)  # the next node's target row, or the residual to emit from
        return nxt, r, stopped | ~found | leaf, n_accepted + found.astype(jnp.int32)

    init = (jnp.int32(0), q[0], jnp.bool_(table[0, 0] < 0), jnp.int32(0))
    last, r, _, n_accepted = lax.fori_loop(0, depth, level, init)
    return n_accepted, race(k_emit, r), last


def traversal_verdict(key, tree, node_tokens, p, q, correct: bool = True):
    """One round's verdict over a token tree by Traversal Verification (Weng, Hu, Chen, Liu, Mei,
    Qiu, Tian and Shi, NeurIPS 2025, arXiv:2505.12398): leaf to root, judging whole paths. A
    paper's algorithm, written as one function as the paper writes it.

    Every node v carries a weight, eta_v = min(1, eta_u q_u(x_v) / p_u(x_v)) from its parent u
    (eta_root = 1), block verification's eta along each path. The leftmost leaf in depth-first
    order is accepted, with its path, with probability eta_leaf (the root always); the bonus is
    drawn from its row r_leaf (q_leaf at first). When a leaf c under u is rejected it leaves the
    tree, and u is corrected as block verification corrects a rejected block:

        r_u <- norm(max(eta_u r_u - p_u, 0)),  eta_u <- Z / (Z + 1 - eta_u),  Z = sum max(eta_u r_u - p_u, 0),

    p_u loses c's token (the next sibling was drawn without it: draft_trees.tree_propose), and the
    weights below u are computed again. On a chain it is block verification; on a tree it keeps
    subtrees that a top-down walk discards with their rejected parent. Exact: each emitted token
    follows the target (the paper's Theorem).

    Same arguments and result as tree_verdict: (n_accepted, emitted, last node). correct=False is
    the tests' broken variant: a rejected leaf's parent keeps its row and weight.
    """
    n = tree.size
    parent = jnp.asarray(np.maximum(np.asarray(tree.parents), 0))
    depths = jnp.asarray(tree.depths)
    order = np.zeros(n, np.int32)  # depth-first (pre-order) rank, children in the order drawn
    stack, rank = [0], 0
    while stack:
        u = stack.pop()
        order[u], rank = rank, rank + 1
        stack.extend(reversed(tree.children[u]))
    order = jnp.asarray(order)
    kids = jnp.asarray(np.asarray(tree.parents)[None, :] == np.arange(n)[:, None])  # kids[u, v]: v under u
    below = jnp.asarray(tree.ancestors.T & ~np.eye(n, dtype=bool))  # below[u, v]: v a descendant of u
    coins = jax.random.uniform(jax.random.fold_in(key, 0), (n,))

    def weights(eta, r, pr, update):
        """eta recomputed, parents first, at the nodes in `update`."""
        for d in range(1, tree.depth + 1):
            r_x, p_x = r[parent, node_tokens], pr[parent, node_tokens]
            ratio = jnp.where(p_x > 0, r_x / jnp.where(p_x > 0, p_x, 1.0), 0.0)
            eta = jnp.where(update & (depths == d), jnp.minimum(1.0, eta[parent] * ratio), eta)
        return eta

    def visit(carry):
        i, alive, eta, r, pr, _, _ = carry
        leaf = alive & ~jnp.any(kids & alive[None, :], axis=1)
        c = jnp.argmin(jnp.where(leaf, order, n)).astype(jnp.int32)
        accepted = (c == 0) | (coins[i] < eta[c])  # strictly: a coin of 0.0 never passes eta = 0
        u = parent[c]
        if correct:
            eta_u = jnp.minimum(eta[u], 1.0)
            res = jnp.maximum(eta_u * r[u] - pr[u], 0.0)
            z = jnp.sum(res)
            r = r.at[u].set(jnp.where(accepted | (z <= 0), r[u], res / jnp.maximum(z, 1e-30)))
            eta = eta.at[u].set(jnp.where(accepted, eta[u], jnp.where(z > 0, z / (z + 1.0 - eta_u), 0.0)))
        rest = pr[u].at[node_tokens[c]].set(0.0)
        pr = pr.at[u].set(jnp.where(accepted, pr[u], rest / jnp.maximum(jnp.sum(rest), 1e-30)))
        alive = alive.at[c].set(alive[c] & accepted)
        eta = jnp.where(accepted, eta, weights(eta, r, pr, below[u] & alive))
        return i + 1, alive, eta, r, pr, accepted, c

    eta = weights(jnp.ones(n, jnp.float32), q, p, depths > 0)
    init = (jnp.int32(0), jnp.ones(n, bool), eta, q, p, jnp.bool_(False), jnp.int32(0))
    *_, r, _, _, last = lax.while_loop(lambda c: ~c[5], visit, init)
    return depths[last], race(jax.random.fold_in(key, 1), r[last]), last


def greedy_tree_verdict(tree, node_tokens, target_tokens):
    """tree_verdict at temperature 0, on token ids: from the root, the child whose token is the
    target's argmax at its parent is accepted, until none is or a leaf is reached; the argmax
    there is emitted. target_tokens [n]: the argmax of the target's row after each node.
    Returns (n_accepted, emitted, last node)."""
    table = jnp.asarray(tree.child_table)

    def level(_, carry):
        u, stopped, n_accepted = carry
        kids = table[u]
        match = (kids >= 0) & (node_tokens[jnp.maximum(kids, 0)] == target_tokens[u]) & ~stopped
        found = jnp.any(match)
        u = jnp.where(found, kids[jnp.argmax(match)], u)
        return u, stopped | ~found, n_accepted + found.astype(jnp.int32)

    depth = np.shape(tree.on_path)[1] - 1
    last, _, n_accepted = lax.fori_loop(0, depth, level, (jnp.int32(0), jnp.bool_(False), jnp.int32(0)))
    return n_accepted, target_tokens[last], last
