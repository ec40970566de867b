"""Who proposes the K tokens of a speculative round: a draft model, prompt lookup, or layer-skip.

Every drafter has the same two pure functions, which the round in decoding.py calls:

    start(drafter, params, prompt_buf, max_len, features)            -> dstate
    propose(drafter, params, dstate, tokens, n, key, warp, K, n_vocab)
        -> dstate, drafts [K] int32, p [K, V] float32, n_drafted int32 scalar

`tokens[0 .. n-1]` are committed (tokens[n-1] pending, as decoding.py explains). `p` holds the
distribution each draft was drawn from (at T = 0 it has no columns: p_width); rows at and after
`n_drafted` are zero and their tokens are not proposed, so the target's own distribution decides
those positions (sampling.accept_reject). The accept/reject rule is the same for every drafter,
which is what keeps each of them exact.

  * model     a separate draft model with its own cache (Leviathan et al. 2023; Chen et al. 2023).
  * layerskip the target's first L blocks, then its final layer norm and head, reading the
              target's own weights: self-speculation as in LayerSkip (Elhoushi et al. 2024),
              without its early-exit training. Its cache holds L layers.
  * eagle     a draft head that reads the target's hidden states (EAGLE, Li et al. 2024;
              eagle.py): one block over [feature, token], then the target's norm and head. Its
              state holds its one-layer cache and the target's features of the committed
              tokens, which the round hands it after each verify step (observe).
  * dial      specbench's acceptance dial, an instrument and not a drafter to deploy (T = 0):
              it proposes the target's own greedy continuation (params["reference"], from an
              AR generation made beforehand) and keeps each token with probability
              `acceptance`, else puts a token that is not it. The acceptance per position is
              then `acceptance` exactly, the output is AR's, and drafting costs nothing.
  * lookup    prompt lookup decoding (Saxena 2023): the longest suffix of at most `ngram`
              tokens that occurred earlier in prompt + generated text, most recent match first;
              the tokens that followed it are proposed. Deterministic, so p is one-hot: the
              target accepts a draft x with probability q(x) and otherwise resamples from
              norm(max(q - p, 0)). With no match nothing is proposed and the round is one
              target step.

k drafts (`drafts`): a model or layer-skip drafter proposes k sequences of K tokens from the same
state (decoding.py runs propose under vmap, k keys); verify.multi_draft_verdict judges them.

Dynamic K (`confidence`): a model or layer-skip drafter stops after the first draft whose own top
probability (softmax of its logits, before warping) falls below the threshold, as HF's assisted
generation does with `assistant_confidence_threshold`. The stopping rule depends only on the
draft's side, so exactness holds; the verify step keeps its one K+1 shape.

A draft vocabulary (`vocab`): a model or layer-skip drafter whose head keeps only the most
frequent tokens (draft_vocab.py, FR-Spec) draws among them, and p is zero at every other token,
so the accept/reject rule keeps it exact too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench.model import eagle, network
from specbench.model.gpt2 import GPT2Config, init_cache
from specbench.model.sampling import Warp, draw, probs, sample
from specbench.model.sampling import argmax as first_argmax
from specbench.model.tree import Dynamic, Tree
from specbench.model.tree import shape_of as tree_shape_of
from specbench.model.verify import METHODS as VERIFY_METHODS
from specbench.model.verify import SHAPES as VERIFY_SHAPES


@dataclasses.dataclass(frozen=True)
class Drafter:
    """What drafts a round and how the target judges it, hashable so it is static under jit.
    `config` is the network the drafter runs: the draft model's, or for layerskip the target's
    with n_layer = L (its cache depth). `verify` names the rule (verify.py), `drafts` the
    sequences proposed per round, `acceptance` the dial's setting."""

    kind: str = "model"
    config: GPT2Config | None = None
    ngram: int = 3
    confidence: float | None = None  # dynamic K: stop drafting below this top probability
    verify: str = "token"
    drafts: int = 1
    acceptance: float | None = None
    vocab: int | None = None  # a network drafter's head covers only this many tokens (FR-Spec)
    tree: Tree | None = None  # a token tree of drafts (tree.py), verified in one step; K is its depth

    @property
    def shape(self) -> str:
        """What a round proposes: a chain of drafts, a token tree, or k draft sequences (drafts);
        verify.SHAPES says which methods judge each."""
        return "tree" if self.tree is not None else "drafts" if self.drafts > 1 else "chain"

    def reach(self, K: int) -> int:
        """Cache slots a round writes past the pending token: K, or for a tree the most of its
        nodes and the rows its drafting step writes (a dynamic tree's candidates), but the root."""
        return K if self.tree is None else max(self.tree.size, self.tree.draft_rows) - 1

    @property
    def reach_setting(self) -> str:
        """The setting that sets reach: "K", or "tree" (decoding.validate blames it)."""
        return "K" if self.tree is None else "tree"

    @property
    def spec(self) -> Kind:
        """What this kind of drafter needs and can do (its KINDS record)."""
        return KINDS[self.kind]

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"drafter must be one of {', '.join(KINDS)} (got {self.kind!r})")
        if self.spec.network and self.config is None:
            raise ValueError(f"the {self.kind} drafter needs a network config")
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1 (got {self.ngram})")
        if self.confidence is not None and not 0 < self.confidence < 1:
            raise ValueError(f"draft confidence must be in (0, 1) (got {self.confidence})")
        if self.verify not in VERIFY_METHODS:
            raise ValueError(f"verify must be one of {', '.join(VERIFY_METHODS)} (got {self.verify!r})")
        if self.drafts < 1 or (self.drafts > 1 and not self.spec.network):
            raise ValueError(
                f"drafts must be 1 for the {self.kind} drafter, >= 1 for a network (got {self.drafts})"
            )
        if self.shape not in VERIFY_SHAPES[self.verify]:
            raise ValueError(
                f"{self.verify} verification judges {' or '.join(VERIFY_SHAPES[self.verify])}, "
                f"not {self.shape} (token judges every shape)"
            )
        if self.spec.acceptance != (self.acceptance is not None):
            raise ValueError("the dial drafter, and it alone, takes an acceptance")
        if self.acceptance is not None and not 0 <= self.acceptance <= 1:
            raise ValueError(f"acceptance must be in [0, 1] (got {self.acceptance})")
        if self.vocab is not None and (not self.spec.network or self.vocab < 1):
            raise ValueError(f"a draft vocabulary is >= 1 tokens of a network drafter (got {self.vocab})")
        if self.tree is not None:
            if not self.spec.trees:
                raise ValueError(
                    f"the {self.kind} drafter proposes no trees ({', '.join(kinds_that('trees'))} do)"
                )
            if self.drafts > 1 or self.confidence is not None:
                raise ValueError("a tree is one proposal of its own shape: no k drafts or dynamic K")
        if self.verify == "traversal" and self.tree is not None and self.tree.dynamic:
            raise ValueError("traversal judges a fixed tree: a dynamic one is judged from its root")
        if self.verify == "gbv" and self.confidence is not None:
            raise ValueError("gbv ranks k whole sequences: no dynamic K")


def model_drafter(config: GPT2Config, confidence: float | None = None) -> Drafter:
    return Drafter("model", config, confidence=confidence)


def layerskip_drafter(target_config: GPT2Config, layers: int, confidence: float | None = None) -> Drafter:
    if not 1 <= layers < target_config.n_layer:
        raise ValueError(
            f"draft layers must be in 1..{target_config.n_layer - 1} (the target has {target_config.n_layer})"
        )
    return Drafter("layerskip", dataclasses.replace(target_config, n_layer=layers), confidence=confidence)


def eagle_drafter(target_config: GPT2Config, confidence: float | None = None) -> Drafter:
    return Drafter("eagle", eagle.config_for(target_config), confidence=confidence)


def lookup_drafter(ngram: int = 3) -> Drafter:
    return Drafter("lookup", ngram=ngram)


def dial_drafter(acceptance: float) -> Drafter:
    return Drafter("dial", acceptance=acceptance)


# ---------------------------------------------------------------------------------------------
# start: the drafter's own state after the prompt


def start(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """The drafter's state after reading the prompt (its kind's start), n_prompt of prompt_buf
    real. `features` are the target's features of the prompt's rows [len(prompt_buf), n_embd],
    for a kind that reads them (Kind.features), else None. `source`: the prompt is an
    encoder-decoder target's source, which its decoder's tokens do not hold (lookup keeps it)."""
    return drafter.spec.start(drafter, params, prompt_buf, n_prompt, max_len, features, source)


def observe(drafter: Drafter, dstate, features, pos):
    """The drafter's state after a verify step whose rows [m, n_embd] of target features begin
    at position pos: a kind that reads features keeps them (rows past the accepted ones are
    rewritten by a later step before they are read); any other is unchanged."""
    if not drafter.spec.features:
        return dstate
    feats = lax.dynamic_update_slice_in_dim(dstate["feats"], features.astype(dstate["feats"].dtype), pos, 0)
    return {**dstate, "feats": feats}


def no_state(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """The dial keeps no state of its own between rounds."""
    return {}


def lookup_start(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """Prompt lookup keeps nothing over a decoder-only target, whose tokens hold the prompt; over
    an encoder-decoder's, the source, so that its drafts can copy from it (lookup_propose)."""
    return {"source": prompt_buf, "n_source": jnp.int32(n_prompt)} if source else {}


def eagle_start(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """The head's state after the prompt: its cache over the prompt's rows, each reading the
    target's feature of the row before (eagle.shifted), and those features in a [max_len, n_embd]
    buffer (rows past the prompt are padding's, rewritten before they are read)."""
    cache = init_cache(drafter.config, max_len, params["wte"].dtype)
    _, _, cache = eagle.step(
        params, cache, eagle.shifted(features), prompt_buf, 0, drafter.config, logits_at=0
    )
    feats = jnp.zeros((max_len, drafter.config.n_embd), features.dtype)
    return {"cache": cache, "feats": lax.dynamic_update_slice_in_dim(feats, features, 0, 0)}


def network_start(drafter: Drafter, params, prompt_buf, n_prompt, max_len: int, features=None, source=False):
    """A network drafter's cache after the prompt: as many layers as its config has. An
    encoder-decoder draft encodes the prompt as its source and reads its decoder's start token
    (network.py)."""
    config = drafter.config
    cache = network.start_cache(params, prompt_buf, n_prompt, config, max_len)
    # runs as many layers as the cache has
    _, cache = network.step(params, cache, network.decoder_prompt(prompt_buf, config), 0, config)
    return {"cache": cache}


# ---------------------------------------------------------------------------------------------
# propose


def propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """Up to K draft tokens for positions n .. n+K-1, with the distributions they came from (its
    kind's propose)."""
    return drafter.spec.propose(drafter, params, dstate, tokens, n, key, warp, K, n_vocab)


def lookup_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """Prompt lookup's drafts (lookup), proposed with certainty: one-hot p. Over an
    encoder-decoder's decoder it searches the source followed by the decoder's tokens (with_source)."""
    if "source" in dstate:
        haystack, n_seen = with_source(dstate["source"], dstate["n_source"], tokens, n)
        drafts, n_drafted = lookup(haystack, n_seen, K, drafter.ngram)
    else:
        drafts, n_drafted = lookup(tokens, n, K, drafter.ngram)
    p = jax.nn.one_hot(drafts, p_width(warp, n_vocab), dtype=jnp.float32)
    return dstate, drafts, _zero_after(p, n_drafted), n_drafted


def dial_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """The dial's drafts (dial), proposed with certainty as lookup's: one-hot p (no columns at
    T = 0, its only use)."""
    drafts = dial(params["reference"], n, key, K, n_vocab, drafter.acceptance)
    return dstate, drafts, jax.nn.one_hot(drafts, p_width(warp, n_vocab), dtype=jnp.float32), jnp.int32(K)


def p_width(warp: Warp, n_vocab: int) -> int:
    """Columns of the p a drafter returns: the vocabulary, or none at T = 0, where the verdict reads
    the draft tokens alone (sampling.greedy_verdict) and p would be one-hot rows never read."""
    return 0 if warp.temperature == 0 else n_vocab


def _zero_after(p, n_drafted):
    return jnp.where(jnp.arange(p.shape[0])[:, None] < n_drafted, p, 0.0)


def network_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """Model and layer-skip drafting: K cached steps (fewer with dynamic K), each drawing from p.

    The first step re-reads [tokens[n-2], tokens[n-1]] at n-2, n-1: that writes the previous
    round's last draft into the cache when all of them were accepted (decoding.py, step 1).
    A head restricted to some tokens (draft_vocab.py) draws among them: its column j is token
    head_tokens[j], and p is zero at every other token.
    """
    config = drafter.config
    logits, cache = network.step(
        params, dstate["cache"], lax.dynamic_slice(tokens, (n - 2,), (2,)), n - 2, config, logits_at=1
    )
    after = lambda cache, x, pos: network.step(params, cache, x[None], pos, config)
    cache, drafts, p, n_drafted = chain(drafter, params, logits, cache, after, n, key, warp, K, n_vocab)
    return {"cache": cache}, drafts, p, n_drafted


def eagle_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """EAGLE's drafts, a chain: the head re-reads the K + 1 positions up to the pending token
    with the target's true features (eagle.window; that rewrites what the last round drafted on
    its own predictions), then each draft reads the feature the head predicted before it."""
    config = drafter.config
    s, window, before, row = eagle.window(dstate["feats"], tokens, n, K + 1)
    logits, h, cache = eagle.step(params, dstate["cache"], before, window, s, config, logits_at=row)
    h = lax.dynamic_slice_in_dim(h, row, 1)  # h_{n-1}: what the first draft's successor reads

    def after(state, x, pos):
        cache, h = state
        logits, h, cache = eagle.step(params, cache, h, x[None], pos, config)
        return logits, (cache, h)

    (cache, _), drafts, p, n_drafted = chain(
        drafter, params, logits, (cache, h), after, n, key, warp, K, n_vocab
    )
    return {**dstate, "cache": cache}, drafts, p, n_drafted


def chain(drafter: Drafter, params, logits, state, after, n, key, warp: Warp, K: int, n_vocab: int):
    """Up to K drafts from a network, the first drawn from `logits` [1, V'] and each next one from
    after(state, token, its position) -> (logits, state): K steps, fewer with dynamic K.
    Returns (state, drafts [K], p [K, V], n_drafted)."""
    keys = jax.random.split(key, K)
    V = p_width(warp, n_vocab)
    head_tokens = params.get("head_tokens")
    # p is kept in the head's own columns while drafting, and spread over the vocabulary once
    columns = V if head_tokens is None or V == 0 else head_tokens.shape[0]

    def confident(logits):
        return (
            drafter.confidence is None
            or jnp.max(jax.nn.softmax(logits.astype(jnp.float32))) >= drafter.confidence
        )

    def body(carry):
        i, state, logits, drafts, p, _ = carry
        column, p_i = draw(keys[i], logits[0], warp)
        x = column if head_tokens is None else head_tokens[column]
        drafts, p = drafts.at[i].set(x), p.at[i].set(p_i[:columns])
        go_on = confident(logits[0]) if drafter.confidence is not None else jnp.bool_(True)
        # the next draft's logits; after the K-th draft there is none to compute
        logits, state = lax.cond(go_on & (i + 1 < K), lambda: after(state, x, n + i), lambda: (logits, state))
        return i + 1, state, logits, drafts, p, go_on

    def more(carry):
        i, *_, go_on = carry
        return (i < K) & go_on

    init = (
        jnp.int32(0),
        state,
        logits,
        jnp.zeros(K, jnp.int32),
        jnp.zeros((K, columns), jnp.float32),
        jnp.bool_(True),
    )
    n_steps, state, _, drafts, p, last_confident = lax.while_loop(more, body, init)
    if columns != V:  # column j is token head_tokens[j]; p is zero at every other token
        p = jnp.zeros((K, V), jnp.float32).at[:, head_tokens].set(p)
    # with dynamic K the draft whose confidence fell short is not proposed
    n_drafted = jnp.where(last_confident, n_steps, n_steps - 1).astype(jnp.int32)
    if drafter.confidence is not None:  # without dynamic K every one of the K rows was drafted
        p = _zero_after(p, n_drafted)
    return state, drafts, p, n_drafted


def tree_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, n_vocab: int):
    """A token tree of drafts under the pending token (drafter.tree; its kind's propose_tree):
    (dstate, node tokens [N], p [N, V], the round's shape). A static Tree is its own shape; a
    Dynamic tree's is grown this round (dynamic_propose), its p all zero: its children are the
    draft's most likely tokens, proposed with certainty (verify.tree_verdict(certain=True))."""
    if isinstance(drafter.tree, Dynamic):
        return dynamic_propose(drafter, params, dstate, tokens, n, warp, n_vocab)
    return (*drafter.spec.propose_tree(drafter, params, dstate, tokens, n, key, warp, n_vocab), drafter.tree)


def dynamic_propose(drafter: Drafter, params, dstate, tokens, n, warp: Warp, n_vocab: int):
    """A Dynamic tree (EAGLE-2): `depth` levels over a static layout of candidates (the root; `top`
    at depth 1; `top` * `top` at each depth after, the children of that level's frontier), the
    network run over every candidate so far under tree attention at each level; then the `nodes`
    candidates of highest cumulative log-probability (ties: the earlier, so parents come first)."""
    spec = drafter.tree
    C, top = spec.candidates, spec.top
    net = drafter.spec.features
    head_tokens = params.get("head_tokens")
    cand = jnp.zeros(C, jnp.int32).at[0].set(tokens[n - 1])
    parents = jnp.full(C, -1, jnp.int32)
    score = jnp.full(C, -jnp.inf, jnp.float32).at[0].set(0.0)
    frontier = jnp.zeros(1, jnp.int32)
    if net:  # the head's window, as eagle_tree_propose reads it
        s, window, before, row = eagle.window(dstate["feats"], tokens, n, spec.depth + 1)
        _, _, cache = eagle.step(params, dstate["cache"], before, window, s, drafter.config, logits_at=row)
        reads = jnp.zeros((C, drafter.config.n_embd), before.dtype).at[0].set(before[row])
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
            logits, cache = network.step(params, dstate["cache"], x, n - 2, drafter.config, tree=above)
            logits = logits[1:]
        width = frontier.shape[0] * top
        for f in range(frontier.shape[0]):
            u = frontier[f]
            logp = jnp.log(
                jnp.maximum(probs(logits[u], warp) if warp.temperature else jax.nn.softmax(logits[u]), 1e-30)
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
    p = jnp.zeros((spec.size, p_width(warp, n_vocab)), jnp.float32)
    shape = tree_shape_of(node_parents, spec.depth, top)
    if not net:  # the cache in node order, for decoding.compact: one more step over the kept tree
        above = tree_shape_of(jnp.concatenate([jnp.full(1, -1), node_parents + 1]), spec.depth + 1, top)
        x = jnp.concatenate([lax.dynamic_slice(tokens, (n - 2,), (1,)), nodes])
        _, cache = network.step(params, dstate["cache"], x, n - 2, drafter.config, tree=above)
    return {**dstate, "cache": cache}, nodes, p, shape


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
    p = jnp.zeros((tree.size, p_width(warp, n_vocab)), jnp.float32)
    keys = jax.random.split(key, max(tree.depth, 1))
    cache = dstate["cache"]
    for d in range(tree.depth):  # static: the tree's shape is known when traced
        x = jnp.concatenate([lax.dynamic_slice(tokens, (n - 2,), (1,)), nodes])
        logits, cache = network.step(params, dstate["cache"], x, n - 2, config, tree=above)
        nodes, p = grow(tree, d, logits[1:], nodes, p, keys[d], warp, params.get("head_tokens"))
    return {"cache": cache}, nodes, p


def eagle_tree_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, n_vocab: int):
    """network_tree_propose for an EAGLE head: it re-reads the window up to the pending token as its chain
    does (eagle_propose), then grows the tree level by level, each step over the tree so far at
    n-1 under tree attention, every node reading its parent's predicted feature (the root, the
    target's f_{n-2}). Only the window's cache entries are kept: the next round's window rewrites
    from the target's features whatever the path accepted, so the head's cache needs no compacting;
    decoding compacts the features the verify step returns instead."""
    tree, config = drafter.tree, drafter.config
    s, window, before, row = eagle.window(dstate["feats"], tokens, n, tree.depth + 1)
    _, _, cache = eagle.step(params, dstate["cache"], before, window, s, config, logits_at=row)
    nodes = jnp.zeros(tree.size, jnp.int32).at[0].set(tokens[n - 1])
    reads = jnp.zeros((tree.size, config.n_embd), before.dtype).at[0].set(before[row])  # f_{n-2}
    p = jnp.zeros((tree.size, p_width(warp, n_vocab)), jnp.float32)
    keys = jax.random.split(key, max(tree.depth, 1))
    for d in range(tree.depth):
        logits, h, _ = eagle.step(params, cache, reads, nodes, n - 1, config, tree=tree)
        nodes, p = grow(tree, d, logits, nodes, p, keys[d], warp, params.get("head_tokens"))
        for u in np.flatnonzero(tree.depths == d):
            if tree.children[u]:
                reads = reads.at[np.asarray(tree.children[u])].set(h[u].astype(reads.dtype))
    return {**dstate, "cache": cache}, nodes, p


def grow(tree: Tree, d: int, logits, nodes, p, key, warp: Warp, head_tokens=None):
    """The children of the tree's nodes at depth d, from their rows of `logits` [N, V'] (in the
    head's columns: token head_tokens[c] for column c, where the head is restricted). At T = 0 they
    are the most likely distinct tokens; at T > 0 draws from the node's distribution without
    replacement, each from what the earlier siblings left, and the node's p row is that
    distribution. Returns (nodes, p)."""
    as_token = (lambda c: c) if head_tokens is None else (lambda c: head_tokens[c])
    greedy, V = warp.temperature == 0, p.shape[1]
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


def with_source(source, n_source, tokens, n):
    """(the source's n_source real tokens followed by the decoder's tokens, how many of it are
    real: n_source + n), one buffer of len(source) + len(tokens) for lookup."""
    idx = jnp.arange(source.shape[0] + tokens.shape[0])
    from_source = source[jnp.clip(idx, 0, source.shape[0] - 1)]
    from_tokens = tokens[jnp.clip(idx - n_source, 0, tokens.shape[0] - 1)]
    return jnp.where(idx < n_source, from_source, from_tokens), n_source + n


def lookup(tokens, n, K: int, ngram: int):
    """Prompt lookup over tokens[0 .. n-1]: (drafts [K], how many are real).

    For g = ngram .. 1, the most recent earlier j with tokens[j : j+g] == tokens[n-g : n]; the
    longest g that matches wins. The proposal is what followed the match, continued with the
    period n - g - j where it would run past n (so "a b a b" proposes "a b a b ...").
    """
    L = tokens.shape[0]
    idx = jnp.arange(L)
    best_j, found = jnp.int32(-1), jnp.int32(0)
    for g in range(ngram, 0, -1):
        match = (idx + g <= n - 1) & (idx <= n - g - 1)  # an earlier occurrence, with a token after it
        for t in range(g):
            match &= jnp.roll(tokens, -t) == tokens[jnp.maximum(n - g + t, 0)]
        match &= n - g >= 0
        j = jnp.max(jnp.where(match, idx, -1))
        take = (found == 0) & (j >= 0)
        best_j = jnp.where(take, j, best_j)
        found = jnp.where(take, g, found)
    period = jnp.maximum(n - found - best_j, 1)
    src = best_j + found + jnp.arange(K) % period
    drafts = tokens[jnp.clip(src, 0, L - 1)]
    n_drafted = jnp.where(found > 0, K, 0).astype(jnp.int32)
    return drafts.astype(jnp.int32), n_drafted


def dial(reference, n, key, K: int, n_vocab: int, acceptance: float):
    """The dial's K drafts for positions n .. n+K-1: reference[n + i] with probability
    `acceptance`, else reference[n + i] + 1 + j (mod V), j uniform in 0..V-2: never the true token."""
    k_keep, k_wrong = jax.random.split(key)
    true = lax.dynamic_slice(reference, (n,), (K,))
    keep = jax.random.uniform(k_keep, (K,)) < acceptance
    wrong = (true + 1 + jax.random.randint(k_wrong, (K,), 0, n_vocab - 1)) % n_vocab
    return jnp.where(keep, true, wrong).astype(jnp.int32)


# ---------------------------------------------------------------------------------------------
# The registry: one record per kind of drafter


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of drafter, defined once: its name and title, what it needs and can do, and the
    two functions the round calls. The command line, the header, the timers, the row and
    generate ask this record; adding a drafter is one entry here, its functions, help and docs."""

    name: str
    title: str  # how a header names it
    start: Callable  # start(drafter, params, prompt_buf, max_len, features) -> dstate
    propose: Callable  # propose(drafter, params, dstate, tokens, n, key, warp, K, n_vocab)
    draft_model: bool = False  # drafts with a separate draft model (--draft)
    network: bool = False  # drafts with a GPT-2 network and its cache, drawing from distributions:
    #                        dynamic K, k drafts, a draft vocabulary and the peers apply
    acceptance: bool = False  # takes an acceptance and drafts the target's own greedy tokens (the dial)
    flags: tuple[str, ...] = ()  # the settings only this kind reads (their flags: --ngram, --draft-layers)
    fewer: bool = False  # may propose fewer than K drafts without dynamic K (lookup without a match)
    propose_tree: Callable | None = None  # proposes token trees: (drafter, params, dstate, tokens,
    #                                       n, key, warp, n_vocab) -> dstate, nodes [N], p [N, V]
    features: bool = False  # reads the target's features: an EAGLE head (--eagle-head), the
    #                         verify step returns them and the round hands them on (observe)

    @property
    def distributions(self) -> bool:
        """Draws its drafts from distributions; else proposes with certainty (one-hot p)."""
        return self.network

    @property
    def trees(self) -> bool:
        """Proposes token trees (tree_propose)."""
        return self.propose_tree is not None

    @property
    def k_drafts(self) -> bool:
        """Can propose k draft sequences a round (verify.multi_draft_verdict)."""
        return self.network


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "model",
            "draft model",
            network_start,
            network_propose,
            draft_model=True,
            network=True,
            propose_tree=network_tree_propose,
        ),
        Kind("lookup", "prompt lookup", lookup_start, lookup_propose, flags=("ngram",), fewer=True),
        Kind(
            "layerskip",
            "layer-skip",
            network_start,
            network_propose,
            network=True,
            flags=("draft_layers",),
            propose_tree=network_tree_propose,
        ),
        Kind("dial", "acceptance dial", no_state, dial_propose, acceptance=True),
        Kind(
            "eagle",
            "EAGLE head",
            eagle_start,
            eagle_propose,
            network=True,
            flags=("eagle_head",),
            features=True,
            propose_tree=eagle_tree_propose,
        ),
    )
}


def kinds_that(trait: str) -> tuple[str, ...]:
    """The names of the kinds whose record has `trait` (a Kind field or property) true."""
    return tuple(name for name, kind in KINDS.items() if getattr(kind, trait))
