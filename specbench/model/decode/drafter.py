"""A drafter as a value: what drafts a round and how the target judges it (`Drafter`), holding
its kind's record (`Kind`). The records themselves, one per kind, are decode/drafters.py's
registry (KINDS); the modules that run a kind (draft_chains, draft_trees, lookup) import the
value from here, and nothing here imports them back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from specbench.draft_cost import DraftCost
from specbench.model.decode.tree import Tree
from specbench.model.decode.verify import METHODS as VERIFY_METHODS
from specbench.model.decode.verify import SHAPES as VERIFY_SHAPES
from specbench.model.nets.gpt2 import GPT2Config


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of drafter, defined once: its name and title, what it needs and can do, and the
    two functions the round calls. The command line, the header, the timers, the row and
    generate ask this record; adding a drafter is one entry here, its functions, help and docs."""

    name: str
    title: str  # how a header names it
    weights: Callable  # weights(drafter, draft, target, reference) -> the params it drafts with
    words: Callable  # words(drafter, name) -> what a header says of it, name being what drafts
    make: Callable  # make(setup, draft config, target config) -> Drafter (ValueError naming its flag's range)
    label: Callable  # label(drafter, draft name, target name) -> what drafts, as rows name it
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
    draft_cost: DraftCost = DraftCost.SEQUENTIAL  # how a round's drafting costs (draft_cost.py)
    pass_rows: Callable | None = None  # a one-pass kind's: pass_rows(K), the rows of its one step
    own_draft: Callable | None = None  # own_draft(draft config, name) -> the gpt2_weights/ folder
    #                                    that stands in for a --draft not of its kind, or None

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


@dataclasses.dataclass(frozen=True)
class Drafter:
    """What drafts a round and how the target judges it, hashable so it is static under jit.
    `config` is the network the drafter runs: the draft model's, or for layerskip the target's
    with n_layer = L (its cache depth). `verify` names the rule (verify.py), `drafts` the
    sequences proposed per round, `acceptance` the dial's setting."""

    kind: Kind
    config: GPT2Config | None = None
    ngram: int = 3
    confidence: float | None = None  # dynamic K: stop drafting below this top probability
    verify: str = "token"
    drafts: int = 1
    # the dial's a: a weight of the program (lookup.dial_weights), not part of its shape, so every
    # setting of the dial shares one compiled program; equal drafters may differ in it
    acceptance: float | None = dataclasses.field(default=None, compare=False)
    vocab: int | None = None  # a network drafter's head covers only this many tokens (FR-Spec)
    tree: Tree | None = None  # a token tree of drafts (tree.py), verified in one step; K is its depth

    @property
    def shape(self) -> str:
        """What a round proposes: a chain of drafts, a token tree, or k draft sequences (drafts);
        verify.SHAPES says which methods judge each."""
        return "tree" if self.tree is not None else "drafts" if self.drafts > 1 else "chain"

    def reach(self, K: int) -> int:
        """Cache slots a round writes past the pending token: K, or for a tree the most of its
        nodes and the rows its drafting step writes (a dynamic tree's candidates), but the root; for
        a one-pass drafter, its pass's rows past the pending token while few tokens are committed."""
        if self.kind.pass_rows is not None:
            return max(K, self.kind.pass_rows(K) - 1)
        return K if self.tree is None else max(self.tree.size, self.tree.draft_rows) - 1

    def verified(self, K: int) -> int:
        """Rows of the target's verify step: the pending token and what a round proposes (reach's
        rows; a one-pass drafter's pass writes past what it proposes, and K + 1 are verified)."""
        return K + 1 if self.kind.pass_rows is not None else self.reach(K) + 1

    @property
    def reach_setting(self) -> str:
        """The setting that sets reach: "K", or "tree" (sizing.validate blames it)."""
        return "K" if self.tree is None else "tree"

    @property
    def at_start(self) -> Drafter:
        """What its start reads (drafters.start): the same drafter without its rounds' settings (K
        aside, the verify method, the draft count, the tree, dynamic K), so that one compiled start
        serves all of them."""
        return dataclasses.replace(self, verify="token", drafts=1, tree=None, confidence=None)

    @property
    def reads(self):
        """What the target's steps hand this drafter (network.step's `hidden`): nothing (False),
        an EAGLE head's features (True) or an EAGLE-3 head's taps (eagle.reads)."""
        if not self.spec.features:
            return False
        from specbench.model.nets import eagle

        return eagle.reads(self.config)

    @property
    def head_format(self) -> str | None:
        """An EAGLE head's format as rows record it ("eagle", "eagle3", "mtp"), else None."""
        if not self.spec.features:
            return None
        from specbench.model.nets import eagle

        return eagle.format_of(self.config).name

    @property
    def mtp(self):
        """An MTP head's (format, its folder's MTP layers), else None."""
        config = self.config if self.spec.features else None
        return (config.mtp, config.mtp_layers) if hasattr(config, "mtp") else None

    @property
    def head_words(self) -> str:
        """How much of the vocabulary a network drafter's head covers, where not all of it."""
        return f", head over the {self.vocab:,} most frequent tokens" if self.vocab else ""

    @property
    def spec(self) -> Kind:
        """What this kind of drafter needs and can do (its record, drafters.KINDS)."""
        return self.kind

    @property
    def name(self) -> str:
        """Its kind's name, as rows record it ("model", "lookup", ...)."""
        return self.kind.name

    def __post_init__(self):
        if not isinstance(self.kind, Kind):
            raise ValueError(f"a drafter's kind is a record of drafters.KINDS (got {self.kind!r})")
        if self.spec.network and self.config is None:
            raise ValueError(f"the {self.name} drafter needs a network config")
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1 (got {self.ngram})")
        if self.confidence is not None and not 0 < self.confidence < 1:
            raise ValueError(f"draft confidence must be in (0, 1) (got {self.confidence})")
        if self.verify not in VERIFY_METHODS:
            raise ValueError(f"verify must be one of {', '.join(VERIFY_METHODS)} (got {self.verify!r})")
        if self.drafts < 1 or (self.drafts > 1 and not self.spec.network):
            raise ValueError(
                f"drafts must be 1 for the {self.name} drafter, >= 1 for a network (got {self.drafts})"
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
                raise ValueError(f"the {self.name} drafter proposes no trees (a network drafter's do)")
            if self.drafts > 1 or self.confidence is not None:
                raise ValueError("a tree is one proposal of its own shape: no k drafts or dynamic K")
        if self.verify == "traversal" and self.tree is not None and self.tree.dynamic:
            raise ValueError("traversal judges a fixed tree: a dynamic one is judged from its root")
        if self.verify == "gbv" and self.confidence is not None:
            raise ValueError("gbv ranks k whole sequences: no dynamic K")
