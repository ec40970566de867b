"""Every verdict at the edge of its coins: jax.random.uniform returns exactly 0.0 with probability
2^-23 per draw, and a draft the target forbids (q(x) = 0: outside top-k, say) must still never be
accepted. The coins are forced to 0.0 by replacing jax.random.uniform while each verdict is
traced; a comparison u <= h in place of u < h accepts every forbidden draft here."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model.decode import sampling, verify, verify_trees
from specbench.model.decode.tree import Tree

K, V, k = 3, 8, 2
FORBIDDEN = (1, 2, 3)  # the drafted tokens, each of target probability 0 at every position


def zero_coins(key, shape=(), dtype=jnp.float32, minval=0.0, maxval=1.0):
    return jnp.zeros(shape, dtype)


def rows(rng, n):
    """n target rows with q = 0 at every FORBIDDEN token, and positive elsewhere."""
    q = rng.dirichlet(np.ones(V), n)
    q[:, list(FORBIDDEN)] = 0.0
    return jnp.asarray(q / q.sum(-1, keepdims=True), jnp.float32)


def chain_case(rng):
    drafts = jnp.asarray(FORBIDDEN[:K], jnp.int32)
    p = jnp.asarray(rng.dirichlet(np.ones(V), K), jnp.float32)  # every token possible to draft
    return (drafts, p, rows(rng, K + 1))


def drafts_case(rng):
    drafts = jnp.asarray([FORBIDDEN[:K], FORBIDDEN[::-1][:K]], jnp.int32)
    p = jnp.asarray(rng.dirichlet(np.ones(V), (k, K)), jnp.float32)
    return (drafts, p, jnp.stack([rows(rng, K + 1)] * k), jnp.full(k, K))


TREE = Tree.branching((2, 2, 1))


def tree_case(rng):
    nodes = np.array([0] + [FORBIDDEN[i % len(FORBIDDEN)] for i in range(TREE.size - 1)], np.int32)
    return (
        TREE,
        jnp.asarray(nodes),
        jnp.asarray(rng.dirichlet(np.ones(V), TREE.size), jnp.float32),
        rows(rng, TREE.size),
    )


VERDICTS = {  # name: (verdict, the case it judges)
    "token": (sampling.accept_reject, chain_case),
    "token all-rows": (sampling.all_rows_accept_reject, chain_case),
    "block": (verify.block_verdict, chain_case),
    "block all-rows": (verify.all_rows_block_verdict, chain_case),
    "drafts": (verify.multi_draft_verdict, drafts_case),
    "drafts all-rows": (verify.all_rows_multi_draft_verdict, drafts_case),
    "gbv": (verify.gbv_verdict, drafts_case),
    "gbv all-rows": (verify.all_rows_gbv_verdict, drafts_case),
    "tree": (verify_trees.tree_verdict, tree_case),
    "tree certain": (functools.partial(verify_trees.tree_verdict, certain=True), tree_case),
    "traversal": (verify_trees.traversal_verdict, tree_case),
}


@pytest.mark.parametrize("name", list(VERDICTS))
def test_a_coin_of_zero_never_accepts_a_draft_the_target_forbids(name, monkeypatch):
    verdict, case = VERDICTS[name]
    monkeypatch.setattr(jax.random, "uniform", zero_coins)
    rng = np.random.default_rng(7)
    for seed in range(3):
        args = case(rng)
        out = verdict(jax.random.PRNGKey(seed), *args)
        n_accepted, emitted = int(out[0]), int(out[1])
        assert n_accepted == 0, f"{name}: accepted {n_accepted} forbidden drafts on a coin of 0.0"
        q = args[2][0] if case is drafts_case else args[-1]  # the target's row at the root
        assert float(q[0, emitted]) > 0, f"{name}: emitted token {emitted}, of target probability 0"
