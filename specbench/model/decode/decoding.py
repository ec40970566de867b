"""Autoregressive and speculative decoding over the cached GPT-2, with the statistics that explain them.

Speculative sampling: Chen et al. (DeepMind, 2023), "Accelerating Large Language Model
Decoding with Speculative Sampling", arXiv:2302.01318; Leviathan et al. (2023), "Fast Inference
from Transformers via Speculative Decoding", arXiv:2211.17192. p = draft, q = target.

Both methods start the same way: prefill the prompt and draw the first new token from the
target. The state then always has a *pending* token, the last one committed, that neither
cache has processed yet:

    tokens[0 .. n-1] committed;  caches valid for positions < n-1;  tokens[n-1] pending.

Autoregressive step: the target reads the pending token at n-1 and a token is drawn from q.

Speculative round (K drafts):
  1. The draft reads [tokens[n-2], tokens[n-1]] at n-2, n-1, then its own samples, K steps in
     all, keeping p for each. Re-reading tokens[n-2] is what makes an all-accepted round
     correct: the draft never read its K-th draft token, and this step writes it into its cache
     (when the previous round rejected, it rewrites an entry that was already right).
  2. The target verifies [tokens[n-1], x_1..x_K] at n-1 .. n+K-1 in one step: q_1..q_{K+1}.
  3. the verdict (verify.py; token by token by default): a accepted drafts, then one emitted token
     (residual or bonus). With k drafts (drafters.py) steps 1-3 run on k sequences at once.
  4. n += a + 1. Rollback is only the position: entries past it are masked, later overwritten.

Each round is one jitted program of fixed shape; `n`, positions and the token buffer are device
values, so nothing recompiles per round or per N. The whole generation is one `lax.while_loop`
(AR: `lax.fori_loop`), so no Python dispatch per token; batched.py runs the same functions under
`jax.vmap`, and generate.py is the front door that drives either. Generation stops at exactly N
new tokens; a last round that overshoots is cut.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from specbench.model.decode import draft_trees, drafters
from specbench.model.decode.sampling import TargetRows, Warp, argmax, draw, greedy_verdict, probs
from specbench.model.decode.verify import verdict_of
from specbench.model.decode.verify_trees import greedy_tree_verdict
from specbench.model.kernels import programs
from specbench.model.nets import network

# ---------------------------------------------------------------------------------------------
# State: typed pytrees. Shapes are for one sequence; a batch (batched.py) adds a leading [B].


class ARState(NamedTuple):
    tokens: jax.Array  # [max_len] int32: prompt, then the committed tokens; tokens[n-1] is pending
    n: jax.Array  # [] int32: tokens committed so far, the prompt included
    key: jax.Array  # [2] uint32: the random stream
    target_cache: dict  # the network's cache (network.start_cache): {"k", "v"}, for T5 with the source's


class RoundCounts(NamedTuple):
    """What the rounds did, counted on the device."""

    rounds: jax.Array  # [] int32: speculative rounds run
    accepted_hist: jax.Array  # [K+1] int32: rounds in which 0 .. K drafts were accepted
    drafted_hist: jax.Array  # [K+1] int32: rounds in which 0 .. K drafts were proposed
    evaluated: jax.Array  # [K] int32: rounds in which draft position i was tested
    accepted: jax.Array  # [K] int32: rounds in which draft position i was accepted


class SpecState(NamedTuple):
    tokens: jax.Array  # [max_len] int32, as in ARState
    n: jax.Array  # [] int32
    key: jax.Array  # [2] uint32
    target_cache: dict  # gpt2 cache, as in ARState
    draft: tuple  # the drafter's own state (drafters.start): its kind's draft_states type
    counts: RoundCounts


class Round(NamedTuple):
    """One round as it happened, for `trace`."""

    drafts: jax.Array  # [K] int32: the proposed tokens
    n_accepted: jax.Array  # [] int32: accepted before the first rejection
    emitted: jax.Array  # [] int32: the resampled or bonus token
    n_drafted: jax.Array  # [] int32: drafts proposed (< K with dynamic K or no lookup match)


# ---------------------------------------------------------------------------------------------
# The pure programs of one sequence (jitted below with static configs and sizes)


def start(params, prompt_buf, n_prompt, key, config, warp: Warp, max_len: int, hidden=False):
    """Prefill the prompt (padded to a bucket) and draw the first new token from q. With `hidden`,
    returns (state, the prompt rows' features [len(prompt_buf), n_embd]) for an EAGLE head.
    An encoder-decoder (T5) encodes the prompt as its source and prefills its decoder's start
    token instead (network.py): its token buffer holds the decoder's sequence."""
    cache = network.start_cache(params, prompt_buf, n_prompt, config, max_len)
    own, n_own = network.decoder_prompt(prompt_buf, config), network.decoder_prompt_length(config, n_prompt)
    logits, cache, *features = network.step(params, cache, own, 0, config, logits_at=n_own - 1, hidden=hidden)
    key, k_first = jax.random.split(key)
    first, _ = draw(k_first, logits[0], warp)
    tokens = jnp.zeros(max_len, jnp.int32).at[: own.shape[0]].set(own).at[n_own].set(first)
    state = ARState(tokens, jnp.asarray(n_own + 1, jnp.int32), key, cache)
    return (state, features[0]) if hidden else state


def ar_step(params, state: ARState, config, warp: Warp) -> ARState:
    """One autoregressive token: the target reads the pending token and a token is drawn from q."""
    key, k = jax.random.split(state.key)
    n, tokens = state.n, state.tokens
    logits, cache = network.step(
        params, state.target_cache, lax.dynamic_slice(tokens, (n - 1,), (1,)), n - 1, config
    )
    token, _ = draw(k, logits[0], warp)
    return ARState(tokens.at[n].set(token), n + 1, key, cache)


def spec_start(
    draft_params, target_params, prompt_buf, n_prompt, key, drafter, target_config, warp, max_len, K
) -> SpecState:
    """start(), then the drafter reads the prompt too (a network drafter re-reads its last token
    in round 1; an EAGLE head reads the prefill's features)."""
    out = start(target_params, prompt_buf, n_prompt, key, target_config, warp, max_len, drafter.reads)
    s, features = out if drafter.reads else (out, None)
    source = network.reads_source(target_config)
    dstate = drafters.start(drafter, draft_params, prompt_buf, n_prompt, max_len, features, source)
    return SpecState(s.tokens, s.n, s.key, s.target_cache, dstate, no_counts(K))


def no_counts(K: int, batch: tuple[int, ...] = ()) -> RoundCounts:
    """The counts before the first round (of each sequence of a batch of shape `batch`)."""
    zeros = lambda *n: jnp.zeros(batch + n, jnp.int32)
    return RoundCounts(zeros(), zeros(K + 1), zeros(K + 1), zeros(K), zeros(K))


def spec_start_in_two(
    target_start, drafter_start, draft_params, target_params, prompt_buf, n_prompt, key, **kw
):
    """spec_start as two compiled programs, to the same state: the target's start, which AR's
    start shares (the prompt's features too, for a drafter that reads them), then the drafter's
    own (Drafter.at_start), which every K, verify method, draft count and tree of that drafter
    shares. `target_start` and `drafter_start` are one sequence's programs or a batch's."""
    drafter, config, max_len = kw["drafter"], kw["target_config"], kw["max_len"]
    hidden = drafter.reads
    # `hidden` is passed only where it is set, so that AR's call (without it) and this one are one
    # compiled program: jit keys its cache by the arguments as they are spelt
    out = target_start(
        target_params,
        prompt_buf,
        n_prompt,
        key,
        config=config,
        warp=kw["warp"],
        max_len=max_len,
        **({"hidden": hidden} if hidden else {}),
    )
    s, features = out if hidden else (out, None)
    source = network.reads_source(config)
    dstate = drafter_start(
        draft_params, prompt_buf, n_prompt, features, drafter=drafter.at_start, max_len=max_len, source=source
    )
    return SpecState(s.tokens, s.n, s.key, s.target_cache, dstate, no_counts(kw["K"], s.n.shape))


def spec_round(
    draft_params, target_params, state, drafter, target_config, warp, K, verdict=None, proposal=None
) -> tuple[SpecState, Round]:
    """One speculative round (module docstring, steps 1-4).

    `verdict` is the drafter's verify rule by default (verify.verdict_of); the tests swap in
    broken ones to show they can fail. `proposal`: step 1's (drafts, p, n_drafted) of a chain,
    proposed by a draft on a device of its own (placed.py) with this round's key; the round then
    runs steps 2-4 and leaves the drafter's state as it is.
    """
    key, k_draft, k_verdict = jax.random.split(state.key, 3)
    n, tokens = state.n, state.tokens
    steps = (draft_params, target_params, state, drafter, target_config, warp)
    if drafter.drafts > 1:
        judged = _k_drafts_round(*steps, K, k_draft, k_verdict, verdict)
    elif drafter.tree is not None:
        judged = _tree_round(*steps, k_draft, k_verdict, verdict)
    else:
        judged = _chain_round(*steps, K, k_draft, k_verdict, verdict, proposal)
    dstate, target_cache, drafts, n_accepted, emitted, n_drafted = judged

    # 4. commit a + 1 tokens (the rest of the cache write is overwritten later)
    idx = jnp.arange(K + 1)
    out = jnp.where(idx < n_accepted, jnp.concatenate([drafts, drafts[:1]]), emitted)
    tokens = lax.dynamic_update_slice(tokens, out, (n,))

    c = state.counts
    tested = (idx[:K] <= n_accepted) & (idx[:K] < n_drafted)  # drafts after a rejection were never tested
    counts = RoundCounts(
        c.rounds + 1,
        c.accepted_hist.at[n_accepted].add(1),
        c.drafted_hist.at[n_drafted].add(1),
        c.evaluated + tested,
        c.accepted + (idx[:K] < n_accepted),
    )
    new_state = SpecState(tokens, n + n_accepted + 1, key, target_cache, dstate, counts)
    return new_state, Round(drafts, n_accepted, emitted, n_drafted)


def _chain_round(
    draft_params, target_params, state, drafter, target_config, warp, K, k_draft, k_verdict, verdict, proposal
):
    """Steps 1-3 of a chain (spec_round's `proposal`: step 1 done elsewhere). Returns (drafter
    state, target cache, drafts [K], n_accepted, emitted, n_drafted)."""
    n, tokens = state.n, state.tokens
    # 1. the drafter proposes up to K tokens, with the p each was drawn from (drafters.py)
    if proposal is None:
        dstate, drafts, p, n_drafted = drafters.propose(
            drafter, draft_params, state.draft, tokens, n, k_draft, warp, K, target_config.n_vocab
        )
    else:
        dstate, (drafts, p, n_drafted) = state.draft, proposal

    # 2. the target scores all K+1 positions at once
    verify_in = jnp.concatenate([lax.dynamic_slice(tokens, (n - 1,), (1,)), drafts])
    logits, target_cache, dstate = verify_step(
        target_params, state.target_cache, verify_in, n - 1, target_config, drafter, dstate
    )

    # 3. accept / reject (at T = 0 on token ids: every verdict's greedy case)
    if warp.greedy:
        n_accepted, emitted = greedy_verdict(drafts, argmax(logits), n_drafted)
    else:
        judge = verdict or verdict_of(drafter)  # warps the rows it reads (TargetRows)
        n_accepted, emitted = judge(k_verdict, drafts, p, TargetRows(logits, warp), n_drafted)
    return dstate, target_cache, drafts, n_accepted, emitted, n_drafted


def verify_step(target_params, cache, tokens, pos, target_config, drafter, dstate, tree=None):
    """The target's step over the tokens to verify: (logits, cache, the drafter's state after it).
    A drafter that reads features is handed the step's (drafters.observe), from the same pass."""
    if not drafter.spec.features:
        logits, cache = network.step(target_params, cache, tokens, pos, target_config, tree=tree)
        return logits, cache, dstate
    logits, cache, features = network.step(
        target_params, cache, tokens, pos, target_config, tree=tree, hidden=drafter.reads
    )
    return logits, cache, drafters.observe(drafter, dstate, features, pos)


def _k_drafts_round(
    draft_params, target_params, state, drafter, target_config, warp, K, k_draft, k_verdict, verdict
):
    """Steps 1-3 with k draft sequences: the drafter proposes k times from the same state (vmap
    over k keys; each sequence writes its own copy of the drafter's cache), the target verifies
    the k (K+1) tokens in one step over the shared prefix cache (again one copy per sequence),
    and verify.multi_draft_verdict picks the accepted prefix. Only the chosen sequence's caches
    are kept. Returns (drafter state, target cache, its drafts [K], n_accepted, emitted, n_drafted)."""
    n, tokens, k = state.n, state.tokens, drafter.drafts
    propose = lambda key: drafters.propose(
        drafter, draft_params, state.draft, tokens, n, key, warp, K, target_config.n_vocab
    )
    dstates, drafts, p, n_drafted = jax.vmap(propose)(jax.random.split(k_draft, k))
    pending = jnp.broadcast_to(lax.dynamic_slice(tokens, (n - 1,), (1,)), (k, 1))
    verify = lambda x, dstate: verify_step(
        target_params, state.target_cache, x, n - 1, target_config, drafter, dstate
    )
    logits, target_caches, dstates = jax.vmap(verify)(jnp.concatenate([pending, drafts], axis=1), dstates)
    if warp.greedy:  # every sequence is the same greedy one
        n_accepted, emitted = greedy_verdict(drafts[0], argmax(logits[0]), n_drafted[0])
        branch = jnp.int32(0)
    else:
        judge = verdict or verdict_of(drafter)  # warps the rows it visits (TargetRows)
        n_accepted, emitted, branch = judge(k_verdict, drafts, p, TargetRows(logits, warp), n_drafted)
    chosen = lambda tree: jax.tree_util.tree_map(lambda x: x[branch], tree)
    return chosen(dstates), chosen(target_caches), drafts[branch], n_accepted, emitted, n_drafted[branch]


def _tree_round(
    draft_params, target_params, state, drafter, target_config, warp, k_draft, k_verdict, verdict
):
    """Steps 1-3 with a token tree (drafter.tree, of depth K): the drafter proposes the tree level
    by level (draft_trees.tree_propose), the target scores every node in one step under the
    ancestor mask (gpt2.step(tree=)), and verify.tree_verdict (at T = 0 greedy_tree_verdict)
    walks it from the root. Both caches then hold the accepted path at consecutive positions
    (compact). Returns (drafter state, target cache, the path's drafts [K], n_accepted, emitted,
    K), as a chain's round has them."""
    n, tokens = state.n, state.tokens
    dstate, nodes, p, tree = draft_trees.tree_propose(
        drafter, draft_params, state.draft, tokens, n, k_draft, warp, target_config.n_vocab
    )
    logits, target_cache, dstate = verify_step(
        target_params, state.target_cache, nodes, n - 1, target_config, drafter, dstate, tree
    )
    if warp.greedy:
        n_accepted, emitted, last = greedy_tree_verdict(tree, nodes, argmax(logits))
    else:
        judge = verdict or verdict_of(drafter)
        n_accepted, emitted, last = judge(k_verdict, tree, nodes, p, probs(logits, warp))
    path = jnp.asarray(tree.on_path)[last]  # [K + 1]: the root, then the accepted nodes (then last again)
    if drafter.spec.features:  # the path's features; the head's cache is rewritten by its next window
        dstate = dstate._replace(feats=compact_rows(dstate.feats, n - 1, path))
    else:
        dstate = dstate._replace(cache=compact(dstate.cache, n - 1, path))
    K = path.shape[0] - 1
    # the drafts as a chain shows them: the accepted path, then (trace's rejected draft) the first
    # child tried at the node where the walk stopped
    tried = jnp.asarray(tree.child_table)[last, 0]
    drafts = (
        nodes[path[1:]]
        .at[jnp.minimum(n_accepted, K - 1)]
        .set(jnp.where((n_accepted < K) & (tried >= 0), nodes[jnp.maximum(tried, 0)], nodes[path[1:]][-1]))
    )
    return dstate, compact(target_cache, n - 1, path), drafts, n_accepted, emitted, jnp.int32(K)


def compact(cache, start, path):
    """The cache with the entries of the tree nodes `path` [m] (written at start + node) moved to
    start, start + 1, ...: the accepted path, at the positions its tokens now have. Every source
    slot is at or after its destination, and all are read before any is written."""
    k = jnp.take(cache["k"], start + path, axis=-1)  # [L, n_head, hd, m]
    v = jnp.take(cache["v"], start + path, axis=1)  # [L, m, n_head, hd]
    return {
        "k": lax.dynamic_update_slice(cache["k"], k, (0, 0, 0, start)),
        "v": lax.dynamic_update_slice(cache["v"], v, (0, start, 0, 0)),
    }


def compact_rows(rows, start, path):
    """compact for a [max_len, ...] buffer: rows start + path moved to start, start + 1, ..."""
    return lax.dynamic_update_slice_in_dim(rows, jnp.take(rows, start + path, axis=0), start, 0)


AR_STATIC = ("config", "max_len")
SPEC_STATIC = ("drafter", "target_config", "max_len", "K", "verdict")
start_jit = programs.jit(start, static_argnames=AR_STATIC + ("hidden",))
drafter_start_jit = programs.jit(
    lambda params, prompt_buf, n_prompt, features, drafter, max_len, source: drafters.start(
        drafter, params, prompt_buf, n_prompt, max_len, features, source
    ),
    static_argnames=("drafter", "max_len", "source"),
)
ar_step_jit = programs.jit(ar_step, static_argnames=("config",), donate_argnames=("state",))
spec_start_jit = functools.partial(spec_start_in_two, start_jit, drafter_start_jit)
spec_round_jit = programs.jit(
    spec_round,
    static_argnames=("drafter", "target_config", "K", "verdict"),
    donate_argnames=("state",),
)
