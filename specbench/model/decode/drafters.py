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
  * pard      a PARD draft (An et al. 2025; pard.py): a draft model taught a mask token, whose one
              step over the last real tokens and K - 1 masks proposes all K drafts.
  * mtp       the multi-token-prediction layer a model ships in its own checkpoint (DeepSeek-V3,
              MiMo, Qwen3-Next; mtp.py): an EAGLE-style head over the target's features, its
              format's own norms, projection and carried feature, drafting through eagle.py.
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
from typing import NamedTuple

from jax import lax

from specbench.draft_cost import DraftCost
from specbench.model.decode import draft_chains, draft_trees, lookup, pard
from specbench.model.decode.drafter import Drafter, Kind
from specbench.model.decode.sampling import Warp
from specbench.model.nets import eagle, network
from specbench.model.nets.gpt2 import GPT2Config


def model_drafter(config: GPT2Config, confidence: float | None = None) -> Drafter:
    return Drafter(KINDS["model"], config, confidence=confidence)


def layerskip_drafter(target_config: GPT2Config, layers: int, confidence: float | None = None) -> Drafter:
    if not 1 <= layers < target_config.n_layer:
        n = target_config.n_layer
        raise ValueError(f"must be in 1..{n - 1}: the target has {n} layers (got {layers})")
    return Drafter(
        KINDS["layerskip"], dataclasses.replace(target_config, n_layer=layers), confidence=confidence
    )


def default_layers(target_config: GPT2Config) -> int:
    """Layer-skip's depth where none is set: a third of the target's layers, at least one."""
    return max(1, target_config.n_layer // 3)


def eagle_drafter(target_config: GPT2Config, confidence: float | None = None, head=None) -> Drafter:
    """An EAGLE head's drafter: `head` is the head's config (None: an EAGLE-1 block of the target's)."""
    return Drafter(KINDS["eagle"], eagle.drafting_config(head, target_config), confidence=confidence)


def mtp_drafter(target_config, confidence: float | None = None, head=None) -> Drafter:
    """An MTP head's drafter: `head` is the head's config (mtp.MtpConfig, read from the target's
    own folder: checkpoints/mtp_files.py)."""
    return Drafter(KINDS["mtp"], eagle.drafting_config(head, target_config), confidence=confidence)


def pard_drafter(config, confidence: float | None = None) -> Drafter:
    """A PARD draft's drafter: `config` is the draft's (its vocabulary the target's and the mask)."""
    return Drafter(KINDS["pard"], config, confidence=confidence)


def lookup_drafter(ngram: int = 3) -> Drafter:
    return Drafter(KINDS["lookup"], ngram=ngram)


def dial_drafter(acceptance: float) -> Drafter:
    return Drafter(KINDS["dial"], acceptance=acceptance)


class Setup(NamedTuple):
    """What the command line sets of a drafter before its verify method and draft count; each
    kind's Kind.make reads its own."""

    ngram: int = 3  # lookup's
    layers: int | None = None  # layer-skip's; None: a third of the target's, at least one
    confidence: float | None = None  # a network drafter's dynamic K
    acceptance: float = 0.0  # the dial's


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
    feats = lax.dynamic_update_slice_in_dim(dstate.feats, features.astype(dstate.feats.dtype), pos, 0)
    return dstate._replace(feats=feats)


# ---------------------------------------------------------------------------------------------
# propose


def propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """Up to K draft tokens for positions n .. n+K-1, with the distributions they came from (its
    kind's propose)."""
    return drafter.spec.propose(drafter, params, dstate, tokens, n, key, warp, K, n_vocab)


# ---------------------------------------------------------------------------------------------
# The registry: one record per kind of drafter


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "model",
            "draft model",
            draft_chains.model_weights,
            lambda d, name: f"{network.shape(d.config)}{d.head_words}",
            lambda s, draft, target: model_drafter(draft, s.confidence),
            lambda d, draft, target: draft,
            draft_chains.network_start,
            draft_chains.network_propose,
            draft_model=True,
            network=True,
            propose_tree=draft_trees.network_tree_propose,
        ),
        Kind(
            "lookup",
            "prompt lookup",
            lookup.no_weights,
            lambda d, name: f"n-gram ≤ {d.ngram}",
            lambda s, draft, target: lookup_drafter(s.ngram),
            lambda d, draft, target: f"lookup(n={d.ngram})",
            lookup.lookup_start,
            lookup.lookup_propose,
            flags=("ngram",),
            fewer=True,
            draft_cost=DraftCost.FREE,
        ),
        Kind(
            "layerskip",
            "layer-skip",
            draft_chains.target_weights,
            lambda d, name: f"{name}: its first {d.config.n_layer} blocks{d.head_words}",
            lambda s, draft, target: layerskip_drafter(
                target, s.layers or default_layers(target), s.confidence
            ),
            lambda d, draft, target: f"{target}[:{d.config.n_layer}]",
            draft_chains.network_start,
            draft_chains.network_propose,
            network=True,
            flags=("draft_layers",),
            propose_tree=draft_trees.network_tree_propose,
        ),
        Kind(
            "dial",
            "acceptance dial",
            lookup.dial_weights,
            lambda d, name: f"a = {d.acceptance:g}: an instrument, not a drafter to deploy",
            lambda s, draft, target: dial_drafter(s.acceptance),
            lambda d, draft, target: "dial",
            lookup.no_state,
            lookup.dial_propose,
            acceptance=True,
            draft_cost=DraftCost.FREE,
        ),
        Kind(
            "eagle",
            "EAGLE head",
            draft_chains.eagle_weights,
            lambda d, name: f"{name}: {eagle.words(d.config)}{d.head_words}",
            lambda s, draft, target: eagle_drafter(target, s.confidence, draft),
            lambda d, draft, target: draft,
            draft_chains.eagle_start,
            draft_chains.eagle_propose,
            network=True,
            flags=("eagle_head",),
            features=True,
            propose_tree=draft_trees.eagle_tree_propose,
        ),
        Kind(
            "pard",
            "PARD draft",
            pard.pard_weights,
            lambda d, name: f"{name}: one pass of {network.shape(d.config)} over K masks{d.head_words}",
            lambda s, draft, target: pard_drafter(draft, s.confidence),
            lambda d, draft, target: draft,
            draft_chains.network_start,
            pard.pard_propose,
            draft_model=True,
            network=True,
            draft_cost=DraftCost.ONE_PASS,
            pass_rows=pard.pass_rows,
            own_draft=pard.own_draft,
        ),
        Kind(
            "mtp",
            "MTP head",
            draft_chains.eagle_weights,
            lambda d, name: f"{name}: {eagle.words(d.config)}{d.head_words}",
            lambda s, draft, target: mtp_drafter(target, s.confidence, draft),
            lambda d, draft, target: draft,
            draft_chains.eagle_start,
            draft_chains.eagle_propose,
            network=True,
            flags=("mtp_head",),
            features=True,
            propose_tree=draft_trees.eagle_tree_propose,
        ),
    )
}


def kinds_that(trait: str) -> tuple[str, ...]:
    """The names of the kinds whose record has `trait` (a Kind field or property) true."""
    return tuple(name for name, kind in KINDS.items() if getattr(kind, trait))
