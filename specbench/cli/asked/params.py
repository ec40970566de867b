"""The command line's parameter types and the bounds they enforce: whole numbers, finite numbers,
temperatures, comma lists and peers, each refused in one line naming what is allowed."""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import click

from specbench import weight_format
from specbench.results import theory

KERNELS = ("auto", "cpu", "pallas", "xla")  # kernels.CHOICES
DTYPES = weight_format.NAMES
# copies of the model layer's lists, so that --help imports no JAX; tests/test_drafters.py pins each
VERIFY_METHODS = ("token", "block", "traversal", "gbv")  # verify.METHODS
VERIFY_SHAPES = {  # verify.SHAPES: what each method judges
    "token": ("chain", "tree", "drafts"),
    "block": ("chain",),
    "traversal": ("tree",),
    "gbv": ("drafts",),
}
DRAFTER_KINDS = ("model", "lookup", "layerskip", "dial", "eagle", "pard", "mtp")  # drafters.KINDS
DRAFTS_MAX = 8
TREE_NODES = 64  # a tree is verified in one step of its nodes: the CPU kernel's rows stay few
QUEUE_MAX = 65_536  # --refill's requests at most: each is a record of the row, and buffers on the device
BATCH_MAX = 4096  # a range of batch sizes ends here: checked before 1-1000000 is expanded
DRAFT_VOCAB_MAX = 32768  # the ranks gpt2_weights/tokenizer/frequent.json keeps (draft_vocab.py)
DRAFT_CONFIDENCE = 0.2  # dynamic K's default: the best of 0.2-0.8 measured on the bundled pair
K_MAX = 128  # the largest K accepted anywhere: checked before a range like 1-100000000 is expanded
# every count has a bound that can be met: a run of REPEATS_MAX repeats of a small model takes hours
REPEATS_MAX, WARMUP_MAX, ITERS_MAX = 1000, 100, 10_000
N_TOKENS_MAX = CONTEXT_MAX = 1_000_000  # the model's context refuses less, naming its own limit
NGRAM_MAX = 16  # lookup's matching is unrolled per n-gram length at trace time
TEMPERATURE_MIN, TEMPERATURE_MAX = 0.01, 100.0  # below 0.01 the logits / T overflow float32: use 0
SEED_MAX = 2**32 - 1


class Count(click.IntRange):
    """A whole number in [min, max], said as such: '1e12' is not a whole number, not "not a valid
    integer range"; a comma list (run's --K 2,2) is one value too many, not a bad range."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return super().convert(value, param, ctx)
        text = str(value).strip()
        if "," in text:
            parts = [v.strip() for v in text.split(",")]
            twice = [v for i, v in enumerate(parts) if v in parts[:i]]
            repeat = f" ({twice[0]} is listed twice)" if twice else ""
            self.fail(f"{text!r} is a list{repeat}: give one value here (sweep takes lists)", param, ctx)
        try:
            number = int(text)
        except ValueError:
            self.fail(f"{text!r} is not a whole number", param, ctx)
        return super().convert(number, param, ctx)


class DraftVocab(click.ParamType):
    """--draft-vocab: "auto", "full", or a number of tokens (draft_vocab.py); gives None for the
    full head, "auto", or the number."""

    name = "auto|full|N"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        if text in ("auto", "full"):
            return None if text == "full" else "auto"
        try:
            number = int(text)
        except ValueError:
            self.fail(f"{value!r} is not auto, full or a number of tokens", param, ctx)
        if not 1 <= number <= DRAFT_VOCAB_MAX:
            self.fail(f"{number} tokens: give 1..{DRAFT_VOCAB_MAX}, auto or full", param, ctx)
        return number


class Finite(click.FloatRange):
    """click's FloatRange, refusing NaN and infinity (which compare False with every bound)."""

    def _describe_range(self) -> str:  # click shows "x<=None" for a range with no bounds
        return super()._describe_range() if (self.min, self.max) != (None, None) else "finite"

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class Temperature(Finite):
    """0 (greedy), or a temperature in [TEMPERATURE_MIN, TEMPERATURE_MAX]."""

    name = "temperature"

    def convert(self, value, param, ctx):
        t = super().convert(value, param, ctx)
        if t != 0 and not TEMPERATURE_MIN <= t <= TEMPERATURE_MAX:
            self.fail(
                f"{t:g} is not in the range: temperatures are >= 0 (0 is greedy, else "
                f"{TEMPERATURE_MIN:g}..{TEMPERATURE_MAX:g}; below that the logits / T overflow)",
                param,
                ctx,
            )
        return t


class DynamicTree(NamedTuple):
    """--tree dynamic:DEPTH,TOP,NODES (tree.Dynamic: EAGLE-2's dynamic tree)."""

    depth: int
    top: int
    nodes: int


def tree_depth(shape) -> int:
    """The K of a --tree value: its depth."""
    return shape.depth if isinstance(shape, DynamicTree) else len(shape)


def tree_label(shape) -> str:
    """A --tree value as written: '2,2,1' or 'dynamic:4,4,16'."""
    text = ",".join(map(str, shape))
    return f"dynamic:{text}" if isinstance(shape, DynamicTree) else text


class TreeShape(click.ParamType):
    """--tree: a token tree's children per node at each depth, '4,2,2,1' (tree.Tree.branching):
    whole numbers >= 1, at most TREE_NODES nodes in all; or 'dynamic:DEPTH,TOP,NODES', a tree
    grown each round from the draft's most likely tokens (tree.Dynamic), NODES <= TREE_NODES."""

    name = "tree"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        if text.startswith("dynamic:"):
            try:
                depth, top, nodes = (int(v) for v in text[len("dynamic:") :].split(","))
            except ValueError:
                self.fail(f"{value!r} is not dynamic:DEPTH,TOP,NODES, like dynamic:4,4,16", param, ctx)
            if min(depth, top, nodes) < 1 or nodes > TREE_NODES:
                self.fail(f"{value!r}: depth and top >= 1, nodes 1..{TREE_NODES}", param, ctx)
            grown = top + (depth - 1) * top * top
            if nodes > grown:
                self.fail(
                    f"{value!r}: {nodes} nodes are more than the {grown} candidates it grows", param, ctx
                )
            if 1 + grown > 4 * TREE_NODES:
                self.fail(
                    f"{value!r} grows {grown} candidates a level: at most {4 * TREE_NODES - 1}", param, ctx
                )
            return DynamicTree(depth, top, nodes)
        try:
            widths = tuple(int(v) for v in str(value).split(","))
        except ValueError:
            self.fail(f"{value!r} is not a comma list of children per depth, like 4,2,2,1", param, ctx)
        if not widths or min(widths) < 1:
            self.fail(f"{value!r}: every depth has at least one child per node", param, ctx)
        nodes, level = 1, 1
        for w in widths:
            level *= w
            nodes += level
            if nodes > TREE_NODES:
                self.fail(f"{value!r} has more than {TREE_NODES} nodes: fewer children or depths", param, ctx)
        return widths


class ListParam(click.ParamType):
    """A comma list of distinct values, with a-b ranges for integers: '1,2,4,8', '1-8', '0,0.7,1'.
    `item` checks each value (a click type); `most` bounds integers before a range is expanded,
    `span_most` the end of a range only; `distinct=False` lets a value repeat (a device's numbers)."""

    def __init__(
        self,
        kind: type,
        item: click.ParamType | None = None,
        most: int | None = None,
        span_most: int | None = None,
        distinct: bool = True,
    ):
        self.kind, self.item, self.most, self.span_most = kind, item, most, span_most
        self.distinct = distinct
        self.name = f"{kind.__name__} list"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        text = str(value)
        if self.kind is int:
            try:
                return theory.parse_K_range(text, self.most, self.span_most)
            except ValueError as e:
                self.fail(f"{text!r} is not a comma list like 1,2,4,8 or 1-8 ({e})", param, ctx)
        parts = [v.strip() for v in text.split(",")]
        if "" in parts:
            example = "0,0.7,1" if self.kind is float else "a,b"
            self.fail(f"{text!r} is not a comma list like {example}", param, ctx)
        try:
            values = [self.item.convert(v, param, ctx) if self.item else self.kind(v) for v in parts]
        except ValueError:
            self.fail(f"{text!r} is not a comma list of {self.kind.__name__}s", param, ctx)
        twice = [v for i, v in enumerate(values) if v in values[:i]] if self.distinct else []
        if twice:
            self.fail(f"{twice[0]} is listed twice", param, ctx)
        return values


def llamacpp_folder(ctx, param, value):
    """--llamacpp DIR: the llama.cpp build the llamacpp peer runs, handed to it as
    SPECBENCH_LLAMACPP (measure/llamacpp.py reads that; the flag wins over the variable)."""
    if value:
        from specbench.measure import llamacpp

        os.environ[llamacpp.VARIABLE] = value
    return value


def peer_list(ctx, param, values) -> list[str]:
    """--peer, repeatable or a comma list: each of peers.NAMES once, in the order given."""
    from specbench.measure.peers import NAMES

    out = []
    for value in values:
        for name in (v.strip() for v in value.split(",")):
            if name not in NAMES:
                raise click.BadParameter(f"{name!r} is not a peer: use {' or '.join(NAMES)}", ctx, param)
            if name in out:
                raise click.BadParameter(f"{name} is listed twice", ctx, param)
            out.append(name)
    return out
