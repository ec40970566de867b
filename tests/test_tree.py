"""Token trees (model/decode/tree.py): their shape, and one target step over a whole tree under the
ancestor mask, whose logits equal each root-to-leaf path run on its own as a chain."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specbench.model import generate
from specbench.model.decode.tree import Tree
from specbench.model.kernels import cpu
from specbench.model.nets.gpt2 import GPT2Config, init_cache, step
from specbench.model.nets.layouts import kernel_layout
from specbench.model.nets.network import Model

from conftest import make_small_target, random_model

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
    if layout == "kernel" and cpu.unavailable():
        pytest.skip(f"the CPU kernel cannot run here: {cpu.unavailable()}")
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


def tree_tokens(tree, p, q, n_rounds, **variant):
    """n_rounds independent rounds on a context-free tree (the draft's and the target's
    distributions after node u are p[u] and q[u], whatever came before): each node's children
    drawn from p[node] without replacement (Gumbel top-k, as draft_trees.tree_propose), the round
    judged by verify.tree_verdict(**variant). Returns, for depth d = 1 .. D, the round's d-th
    emitted token and the node whose target row it must follow (-1 where the round emitted fewer
    than d tokens)."""
    from specbench.model.decode.verify_trees import tree_verdict

    D = tree.depth
    on_path = np.full((tree.size, D + 1), -1, np.int32)  # on_path[u, d]: the depth-d node above u
    for u in range(tree.size):
        for j in np.flatnonzero(tree.ancestors[u]):
            on_path[u, tree.depths[j]] = j
    on_path = jnp.asarray(on_path)

    def one(key):
        k_draft, k_verdict = jax.random.split(key)
        tokens = jnp.zeros(tree.size, jnp.int32)
        for u, kids in enumerate(tree.children):
            if kids:
                keyed = jnp.log(p[u]) + jax.random.gumbel(jax.random.fold_in(k_draft, u), p[u].shape)
                tokens = tokens.at[np.asarray(kids)].set(jax.lax.top_k(keyed, len(kids))[1])
        n_accepted, emitted, last = tree_verdict(k_verdict, tree, tokens, p, q, **variant)
        out = []
        for d in range(1, D + 1):
            token = jnp.where(n_accepted >= d, tokens[jnp.maximum(on_path[last, d], 0)], emitted)
            judge = on_path[last, d - 1]  # the node whose target row the d-th token follows
            out += [jnp.where(n_accepted >= d - 1, token, -1), jnp.where(n_accepted >= d - 1, judge, -1)]
        return out

    keys = jax.random.split(jax.random.PRNGKey(21), n_rounds)
    draws = [np.asarray(a) for a in jax.jit(jax.vmap(one))(keys)]
    return list(zip(draws[::2], draws[1::2]))


VARIANTS = {  # name: (tree_verdict's keywords, exact?); the role test below fails the third control,
    # siblings judged as if drawn independently, which these random rows seldom expose
    "without-replacement": ({}, True),
    "no-residual-update": ({"update_residual": False}, False),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_token_of_a_tree_round_follows_the_target_and_the_broken_controls_do_not(variant):
    from exactness import P_THRESHOLD, chi_square_p

    keywords, exact = VARIANTS[variant]
    tree, V = Tree.branching((3, 2)), 6
    rng = np.random.default_rng(4)
    p = jnp.asarray(rng.dirichlet(np.ones(V), tree.size), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(V), tree.size), jnp.float32)
    p_values = []
    for tokens, judges in tree_tokens(tree, p, q, 20000, **keywords):
        seen = judges >= 0
        expected = np.asarray(q)[judges[seen]].sum(axis=0)  # each token against its own node's row
        p_values.append(chi_square_p(tokens[seen], expected))
    print(f"\n{variant}: p = {p_values}")
    assert len(p_values) == 2 and (judges >= 0).sum() > 2000  # both depths, the second often reached
    assert (min(p_values) > P_THRESHOLD) == exact, p_values


# ---------------------------------------------------------------------------------------------
# Trees in decoding: the greedy identity, and every role of a tree round at T = 1


@pytest.mark.parametrize("kind", ["model", "layerskip", "model-traversal"])
@pytest.mark.parametrize("shape", [(2, 2, 1), (3, 1)], ids=lambda s: "x".join(map(str, s)))
def test_greedy_tree_decoding_gives_autoregressive_tokens(pair, kind, shape):
    import dataclasses

    from specbench.model import generate
    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp

    draft, target = pair
    tree = Tree.branching(shape)
    base = (
        drafters.layerskip_drafter(target.config, 1)
        if kind == "layerskip"
        else drafters.model_drafter(draft.config)
    )
    drafter = dataclasses.replace(base, tree=tree, verify="traversal" if "traversal" in kind else "token")
    for prompt in ([5, 17, 3, 9], [1, 2, 3, 1, 2, 3, 1]):
        ar, _ = generate.autoregressive(target, prompt, 24, Warp(), 0)
        sd, stats = generate.speculative(draft, target, prompt, 24, len(shape), Warp(), 0, drafter=drafter)
        np.testing.assert_array_equal(sd, ar)
        assert stats.n_rounds < 23  # drafts were accepted: the tree is not a round per token


def broken_tree_verdict(key, tree, node_tokens, p, q):
    """Negative control: siblings drawn without replacement, judged as if drawn independently
    (each against the whole p of their parent)."""
    from specbench.model.decode.verify_trees import tree_verdict

    return tree_verdict(key, tree, node_tokens, p, q, without_replacement=False)


@pytest.mark.slow
def test_every_role_of_a_tree_round_follows_the_target_and_the_broken_control_does_not():
    import dataclasses

    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.decode.verify_trees import tree_verdict

    from exactness import P_THRESHOLD, noisy_copy, role_p_values, round_samples

    target = make_small_target()
    draft = noisy_copy(target, 0.3, 13)
    tree, prompt, warp = Tree.branching((2, 1, 1)), [3, 7, 1], Warp(1.0)
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), tree=tree)
    draws = round_samples(draft.params, target, prompt, warp, 3, drafter, (tree_verdict, broken_tree_verdict))
    for (tokens, accepted, drafted), exact in zip(draws, (True, False)):
        p_values = role_p_values(target, prompt, warp, tokens, accepted, drafted, 3)
        print(
            f"\n{'exact' if exact else 'broken'}: "
            + ", ".join(f"{r} {p:.2g}" for r, p in sorted(p_values.items()))
        )
        assert {"draft 1", "draft 2", "draft 3", "bonus", "after rejection"} <= set(p_values)
        assert (min(p_values.values()) > P_THRESHOLD) == exact


@pytest.mark.slow
def test_a_tree_drafted_over_a_restricted_head_is_exact_too():
    # the draft's head keeps some tokens only (draft_vocab.py): siblings are drawn among them, p
    # is zero elsewhere, and every role still follows the target
    import dataclasses

    from specbench.model.checkpoints import draft_vocab
    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.decode.verify_trees import tree_verdict

    from exactness import P_THRESHOLD, SMALL_T, noisy_copy, role_p_values, round_samples

    target = make_small_target()
    draft = noisy_copy(target, 0.3, 13)
    tree, prompt, warp = Tree.branching((2, 1, 1)), [3, 7, 1], Warp(1.0)
    vocab = SMALL_T.n_vocab - 3
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), tree=tree, vocab=vocab)
    params = generate.draft_params_for(drafter, draft, target)
    assert (
        params.head.tokens.shape == (vocab,)
        and draft_vocab.frequent_ids(vocab, SMALL_T.n_vocab).size == vocab
    )
    ((tokens, accepted, drafted),) = round_samples(params, target, prompt, warp, 3, drafter, (tree_verdict,))
    p_values = role_p_values(target, prompt, warp, tokens, accepted, drafted, 3)
    print("\nrestricted head: " + ", ".join(f"{r} {p:.2g}" for r, p in sorted(p_values.items())))
    assert min(p_values.values()) > P_THRESHOLD


def skipped_correction(key, tree, node_tokens, p, q):
    """Negative control: Traversal Verification without its correction (a rejected leaf's parent
    keeps its row and weight)."""
    from specbench.model.decode.verify_trees import traversal_verdict

    return traversal_verdict(key, tree, node_tokens, p, q, correct=False)


@pytest.fixture(scope="module")
def traversal_draws():
    import dataclasses

    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.decode.verify_trees import traversal_verdict, tree_verdict

    from exactness import noisy_copy, round_samples

    target = make_small_target()
    draft = noisy_copy(target, 0.3, 13)
    tree = Tree.branching((2, 2, 1))
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), tree=tree, verify="traversal")
    verdicts = (traversal_verdict, skipped_correction, tree_verdict)
    draws = round_samples(draft.params, target, [3, 7, 1], Warp(1.0), 3, drafter, verdicts)
    return target, dict(zip(("traversal", "traversal-uncorrected", "recursive"), draws))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["traversal", "traversal-uncorrected"])
def test_every_role_of_a_traversal_round_follows_the_target_and_the_uncorrected_one_does_not(
    traversal_draws, variant, record_property
):
    from specbench.model.decode.sampling import Warp

    from exactness import P_THRESHOLD, role_p_values

    target, draws = traversal_draws
    p_values = role_p_values(target, [3, 7, 1], Warp(1.0), *draws[variant], 3)
    record_property("p_values", p_values)
    print(f"\n{variant}: " + ", ".join(f"{r} {p:.2g}" for r, p in sorted(p_values.items())))
    assert {"draft 1", "draft 2", "draft 3", "bonus", "after rejection"} <= set(p_values)
    assert (min(p_values.values()) > P_THRESHOLD) == (variant == "traversal")


@pytest.mark.slow
def test_traversal_accepts_more_per_round_than_the_recursion_from_the_root(traversal_draws):
    _, draws = traversal_draws
    mean = {name: draws[name][1].mean() for name in ("traversal", "recursive")}
    print(f"\naccepted per round, tree 2,2,1: {mean}")
    assert mean["traversal"] > mean["recursive"]


def test_traversal_on_a_chain_is_block_verification():
    """On a one-path tree Traversal Verification is block verification (Sun et al. 2025): the
    same probabilities of accepting 0..K drafts, computed here in closed form from the hazards."""
    import jax
    import jax.numpy as jnp

    from specbench.model.decode.verify import block_hazards
    from specbench.model.decode.verify_trees import traversal_verdict

    rng = np.random.default_rng(3)
    K, V = 3, 5
    p = rng.dirichlet(np.ones(V), K).astype(np.float32)
    q = rng.dirichlet(np.ones(V), K + 1).astype(np.float32)
    drafts = np.array([int(np.argmax(p[i])) for i in range(K)], np.int32)
    h, _ = block_hazards(jnp.asarray(drafts), jnp.asarray(p), jnp.asarray(q))
    h = np.asarray(h)
    # tau = the last i whose independent coin passes h_i
    exact = [np.prod(1 - h[i + 1 : K + 1]) * (h[i] if i else 1.0) for i in range(K + 1)]
    tree = Tree.chain(K)
    nodes = jnp.asarray(np.concatenate([[0], drafts]))
    p_rows = jnp.asarray(np.concatenate([p, np.zeros((1, V), np.float32)]))
    n = 20000
    run = jax.jit(jax.vmap(lambda k: traversal_verdict(k, tree, nodes, p_rows, jnp.asarray(q))[0]))
    counts = np.bincount(np.asarray(run(jax.random.split(jax.random.PRNGKey(0), n))), minlength=K + 1)
    np.testing.assert_allclose(counts / n, exact, atol=4 * np.sqrt(0.25 / n))


# ---------------------------------------------------------------------------------------------
# Dynamic trees (EAGLE-2): the shape grown each round from the draft's most likely tokens


@pytest.mark.parametrize(
    "shape", [(2, 2, 1), (3, 1), (1, 1, 1), (2, 1, 3)], ids=lambda s: "x".join(map(str, s))
)
def test_a_shape_computed_on_the_device_has_the_static_trees_tables(shape):
    import jax.numpy as jnp

    from specbench.model.decode.tree import shape_of

    tree = Tree.branching(shape)
    got = shape_of(jnp.asarray(tree.parents), tree.depth, tree.child_table.shape[1])
    for name in ("depths", "ancestors", "child_table", "on_path"):
        np.testing.assert_array_equal(getattr(got, name), getattr(tree, name), err_msg=name)


@pytest.mark.parametrize("kind", ["model", "layerskip"])
def test_greedy_dynamic_trees_give_autoregressive_tokens(pair, kind):
    import dataclasses

    from specbench.model import generate
    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.decode.tree import Dynamic

    draft, target = pair
    base = (
        drafters.model_drafter(draft.config)
        if kind == "model"
        else drafters.layerskip_drafter(target.config, 1)
    )
    drafter = dataclasses.replace(base, tree=Dynamic(3, 3, 10))
    for prompt in ([5, 17, 3, 9], [1, 2, 3, 1, 2, 3, 1]):
        ar, _ = generate.autoregressive(target, prompt, 24, Warp(), 0)
        sd, stats = generate.speculative(draft, target, prompt, 24, 3, Warp(), 0, drafter=drafter)
        np.testing.assert_array_equal(sd, ar)
        assert stats.n_rounds < 23


def test_a_dynamic_tree_whose_candidates_outgrow_its_nodes_gets_a_cache_that_holds_them(pair):
    """The draft writes every candidate grown (53 here) into its cache, more than the 10 nodes
    verified: the cache is planned for the candidates (Drafter.reach), not the nodes only, which
    overran a cache of 64 here."""
    import dataclasses

    from specbench.model import generate
    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.decode.tree import Dynamic

    draft, target = pair
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), tree=Dynamic(4, 4, 10))
    assert drafter.reach(4) == Dynamic(4, 4, 10).candidates - 1 == 52
    prompt = [5, 17, 3, 9]
    ar, _ = generate.autoregressive(target, prompt, 24, Warp(), 0)
    sd, _ = generate.speculative(draft, target, prompt, 24, 4, Warp(), 0, drafter=drafter)
    np.testing.assert_array_equal(sd, ar)


def test_a_dynamic_tree_keeps_the_candidates_of_highest_cumulative_probability():
    """The kept nodes are the `nodes` best of every candidate grown, by the product of the draft's
    probabilities along their path, and each kept node's parent is kept (EAGLE-2's reranking)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from specbench.model.decode import draft_trees, drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.decode.tree import Dynamic
    from specbench.model.nets import gpt2

    from exactness import TARGET

    draft = random_model(TARGET, 5, "d", scale=3)
    spec = Dynamic(3, 2, 6)
    drafter = dataclasses.replace(drafters.model_drafter(TARGET), tree=spec)
    prompt = jnp.asarray([5, 17, 3, 9, 0, 0, 0, 0], jnp.int32)
    state = drafters.start(drafter, draft.params, prompt, len(prompt), 64)
    tokens = jnp.zeros(64, jnp.int32).at[:8].set(prompt)
    n = jnp.int32(4)
    # compiled, as the tool runs them (eagerly, each took hundreds of one-operation programs)
    propose = jax.jit(draft_trees.tree_propose, static_argnums=(0, 6, 7))
    _, nodes, _, shape = propose(
        drafter, draft.params, state, tokens, n, jax.random.PRNGKey(0), Warp(1.0), 97
    )
    nodes, parents = np.asarray(nodes), np.asarray(shape.parents)
    assert all(0 <= parents[i] < i for i in range(1, spec.size))
    log_probs = jax.jit(lambda seq: jax.nn.log_softmax(gpt2.gpt2(draft.params, seq, TARGET)))

    def logprob(path):  # the draft's log-probability of a path of tokens after the prefix
        logp = log_probs(jnp.concatenate([tokens[:3], jnp.asarray(path, jnp.int32)]))
        return float(sum(logp[2 + i, t] for i, t in enumerate(path[1:])))

    def path_of(i):
        out = []
        while i >= 0:
            out.append(int(nodes[i]))
            i = parents[i] if i else -1
        return out[::-1]

    kept = sorted(logprob(path_of(i)) for i in range(1, spec.size))
    # every candidate the expansion could grow: depth 1 is the 2 best under the root; deeper ones
    # the 2 best under each of the 2 best of the level before
    level, grown = [[int(nodes[0])]], []
    for _ in range(spec.depth):
        children = []
        for path in level:
            logp = np.asarray(log_probs(jnp.concatenate([tokens[:3], jnp.asarray(path, jnp.int32)]))[-1])
            for t in np.argsort(-logp, kind="stable")[: spec.top]:
                children.append(path + [int(t)])
        scored = sorted(children, key=logprob, reverse=True)
        grown += children
        level = scored[: spec.top]
    best = sorted(logprob(p) for p in grown)[-spec.nodes :]
    np.testing.assert_allclose(kept, best, rtol=1e-4, atol=1e-4)


def dynamic_without_residual(key, tree, node_tokens, p, q):
    """Negative control: the dynamic tree's certain proposals tried against q itself, a rejected
    token never removed from the residual."""
    from specbench.model.decode.verify_trees import tree_verdict

    return tree_verdict(key, tree, node_tokens, p, q, certain=True, update_residual=False)


@pytest.mark.slow
def test_every_role_of_a_dynamic_tree_round_follows_the_target_and_the_broken_control_does_not():
    import dataclasses
    import functools

    from specbench.model.decode import drafters
    from specbench.model.decode.sampling import Warp
    from specbench.model.decode.tree import Dynamic
    from specbench.model.decode.verify_trees import tree_verdict

    from exactness import P_THRESHOLD, noisy_copy, role_p_values, round_samples

    target = make_small_target()
    draft = noisy_copy(target, 0.3, 13)
    prompt, warp = [3, 7, 1], Warp(1.0)
    drafter = dataclasses.replace(drafters.model_drafter(draft.config), tree=Dynamic(3, 2, 5))
    exact = functools.partial(tree_verdict, certain=True)
    draws = round_samples(draft.params, target, prompt, warp, 3, drafter, (exact, dynamic_without_residual))
    for (tokens, accepted, drafted), is_exact in zip(draws, (True, False)):
        p_values = role_p_values(target, prompt, warp, tokens, accepted, drafted, 3)
        print(
            f"\n{'exact' if is_exact else 'broken'}: "
            + ", ".join(f"{r} {p:.2g}" for r, p in sorted(p_values.items()))
        )
        assert {"draft 1", "draft 2", "bonus", "after rejection"} <= set(p_values)
        assert (min(p_values.values()) > P_THRESHOLD) == is_exact
