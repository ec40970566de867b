"""Token trees (model/tree.py): their shape, and one target step over a whole tree under the
ancestor mask, whose logits equal each root-to-leaf path run on its own as a chain."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model import kernels
from specbench.model.gpt2 import GPT2Config, init_cache, step
from specbench.model.layouts import kernel_layout
from specbench.model.tree import Tree
from specbench.model.weights import Model

from conftest import random_model

CONFIG = GPT2Config(n_layer=2, n_head=4, n_embd=32, n_ctx=64, n_vocab=97)
step_jit = jax.jit(step, static_argnames=("config", "tree"))  # keeps the cache: each path reads it


def test_a_tree_knows_its_depths_ancestors_children_and_paths():
    tree = Tree.branching((2, 1))  # root; two children; one grandchild under each
    assert tree.parents == (-1, 0, 0, 1, 2) and tree.depths.tolist() == [0, 1, 1, 2, 2]
    assert tree.children == ((1, 2), (3,), (4,), (), ())
    assert tree.paths() == [[0, 1, 3], [0, 2, 4]]
    assert tree.ancestors[3].tolist() == [True, True, False, True, False]
    chain = Tree.chain(4)
    assert (chain.ancestors == np.tril(np.ones((5, 5), bool))).all() and chain.depths.tolist() == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert Tree.branching((4, 2, 2, 1)).size == 1 + 4 + 8 + 16 + 16
    for bad in ((0,), (-1, 1), (-1, 0, 3)):
        with pytest.raises(ValueError):
            Tree(bad)


@pytest.mark.parametrize("layout", ["hf", "kernel"])
@pytest.mark.parametrize("shape", [(3, 2), (2, 2, 1), (1, 1, 1)], ids=lambda s: "x".join(map(str, s)))
def test_a_tree_step_gives_each_path_the_logits_of_that_path_run_alone(layout, shape):
    if layout == "kernel" and kernels.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {kernels.unavailable()}")
    model = random_model(CONFIG, seed=5, scale=5)
    params = kernel_layout(model.params) if layout == "kernel" else model.params
    model = Model(model.name, CONFIG, params, model.source)
    rng = np.random.default_rng(7)
    prompt = jnp.asarray(rng.integers(0, CONFIG.n_vocab, 8), jnp.int32)
    tree = Tree.branching(shape)
    nodes = jnp.asarray(rng.integers(0, CONFIG.n_vocab, tree.size), jnp.int32)
    _, cache = step_jit(params, init_cache(CONFIG, CONFIG.n_ctx), prompt, jnp.int32(0), config=CONFIG)
    pos = jnp.int32(8)
    logits, _ = step_jit(params, cache, nodes, pos, config=CONFIG, tree=tree)
    for path in tree.paths():
        alone, _ = step_jit(params, cache, nodes[jnp.asarray(path)], pos, config=CONFIG)
        np.testing.assert_allclose(logits[jnp.asarray(path)], alone, atol=2e-5, rtol=2e-5)
    # a chain is the tree whose mask is causal: the same logits as a step without a tree
    chain, _ = step_jit(params, cache, nodes[:4], pos, config=CONFIG, tree=Tree.chain(3))
    plain, _ = step_jit(params, cache, nodes[:4], pos, config=CONFIG)
    np.testing.assert_array_equal(chain, plain)


# ---------------------------------------------------------------------------------------------
# The verdict over a tree: each emitted token follows the target


def tree_tokens(tree, p, q, n_rounds, update_residual=True):
    """n_rounds independent rounds on a context-free tree (the draft's and the target's
    distributions after node u are p[u] and q[u], whatever came before): each node's token drawn
    from p[its parent], the round judged by verify.tree_verdict. Returns, for depth d = 1 .. D,
    the round's d-th emitted token and the node whose target row it must follow (-1 where the
    round emitted fewer than d tokens)."""
    from specbench.model.verify import tree_verdict

    D = int(tree.depths.max())
    on_path = np.full((tree.size, D + 1), -1, np.int32)  # on_path[u, d]: the depth-d node above u
    for u in range(tree.size):
        for j in np.flatnonzero(tree.ancestors[u]):
            on_path[u, tree.depths[j]] = j
    on_path, parents = jnp.asarray(on_path), jnp.asarray(tree.parents[1:])

    def one(key):
        k_draft, k_verdict = jax.random.split(key)
        drawn = jax.random.categorical(k_draft, jnp.log(p[parents])).astype(jnp.int32)
        tokens = jnp.concatenate([jnp.zeros(1, jnp.int32), drawn])
        n_accepted, emitted, last = tree_verdict(k_verdict, tree, tokens, p, q, update_residual)
        out = []
        for d in range(1, D + 1):
            token = jnp.where(n_accepted >= d, tokens[jnp.maximum(on_path[last, d], 0)], emitted)
            judge = on_path[last, d - 1]  # the node whose target row the d-th token follows
            out += [jnp.where(n_accepted >= d - 1, token, -1), jnp.where(n_accepted >= d - 1, judge, -1)]
        return out

    keys = jax.random.split(jax.random.PRNGKey(21), n_rounds)
    draws = [np.asarray(a) for a in jax.jit(jax.vmap(one))(keys)]
    return list(zip(draws[::2], draws[1::2]))


@pytest.mark.parametrize("update_residual", [True, False], ids=["specinfer", "no-residual-update"])
def test_every_token_of_a_tree_round_follows_the_target_and_the_broken_control_does_not(update_residual):
    from exactness import P_THRESHOLD, chi_square_p

    tree, V = Tree.branching((3, 2)), 6
    rng = np.random.default_rng(4)
    p = jnp.asarray(rng.dirichlet(np.ones(V), tree.size), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(V), tree.size), jnp.float32)
    p_values = []
    for tokens, judges in tree_tokens(tree, p, q, 20000, update_residual):
        seen = judges >= 0
        expected = np.asarray(q)[judges[seen]].sum(axis=0)  # each token against its own node's row
        p_values.append(chi_square_p(tokens[seen], expected))
    print(f"\n{'exact' if update_residual else 'broken'}: p = {p_values}")
    assert len(p_values) == 2 and (judges >= 0).sum() > 2000  # both depths, the second often reached
    if update_residual:
        assert min(p_values) > P_THRESHOLD, p_values
    else:
        assert min(p_values) < P_THRESHOLD, p_values
