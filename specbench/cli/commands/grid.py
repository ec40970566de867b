"""From settings to jobs: each configuration's Drafter and its name, and the grid of jobs (one
result row each) that run, sweep and report measure alike. A run is a grid of one cell."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import NamedTuple

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.params import DynamicTree, tree_label
from specbench.cli.asked.settings import Cell, Drafting, Method, Settings
from specbench.cli.asked.suites import category_of
from specbench.cli.commands.jobs import Job
from specbench.measure.bench import RunConfig
from specbench.model.decode.sampling import Warp
from specbench.model.nets import network
from specbench.model.nets.families import family_of


def drafts_for(kind: str, target) -> bool:
    """Whether a drafter of this kind drafts for this target: any for a GPT-2; for a T5 not yet
    layer-skip (the target's first layers) nor a kind that reads the target's features (EAGLE)
    (docs/encoder-decoders.md)."""
    from specbench.model.decode import drafters

    spec = drafters.KINDS[kind]
    family = family_of(target.config)
    return (family.layer_skip or "draft_layers" not in spec.flags) and (family.features or not spec.features)


def drafter_of(kind: str, draft, target, drafting: Drafting):
    """(Drafter, its name): what drafts, before the verify method and the draft count."""
    from specbench.model.decode import drafters

    spec = drafters.KINDS[kind]
    conf = drafting.draft_confidence if drafting.dynamic_K and spec.network else None
    # what a T5 does not do yet (docs/encoder-decoders.md), by its family's capabilities
    is_a = f"{target.name} is a {network.display_name(target.config)}"
    if not drafts_for(kind, target):
        raise BadInput("--drafter", f"{is_a}: it drafts with a model, lookup or the dial so far")
    if drafting.tree and not family_of(target.config).trees:
        raise BadInput("--tree", f"{is_a}: it verifies chains so far")
    setup = drafters.Setup(drafting.ngram, drafting.draft_layers, conf)
    try:  # its kind's own settings (drafters.KINDS): n-gram, layers, dynamic K
        drafter = spec.make(setup, draft.config if draft is not None else None, target.config)
    except ValueError as e:
        raise BadInput("--" + (spec.flags or ("drafter",))[0].replace("_", "-"), str(e)) from None
    if spec.draft_model:  # the draft it drafts with (a PARD draft's mask token), before any work
        from specbench.errors import DecodeError

        try:
            spec.weights(drafter, draft, target)
        except DecodeError as e:
            raise BadInput("--draft", str(e)) from None
    name = spec.label(drafter, draft.name if draft is not None else None, target.name)
    if not spec.network:  # lookup and the dial: no head to restrict, no tree
        return drafter, name
    drafting_net = draft if spec.draft_model or spec.features else target
    drafter = dataclasses.replace(drafter, vocab=draft_vocabulary(drafting.draft_vocab, drafting_net))
    if drafting.tree:
        from specbench.model.decode.tree import Dynamic, Tree

        shape = drafting.tree
        tree = Dynamic(*shape) if isinstance(shape, DynamicTree) else Tree.branching(shape)
        drafter = dataclasses.replace(drafter, tree=tree)
        name += f" tree {tree_label(shape)}"
    return drafter, name


def with_method(drafter, name: str, method: Method):
    """(the drafter judged by this method, its name): the verify method, the draft count and the
    dial's acceptance."""
    d = dataclasses.replace(drafter, verify=method.verify, drafts=method.drafts, acceptance=method.acceptance)
    a, k = method.acceptance, method.drafts
    return d, name + (f"(a={a:g})" if a is not None else "") + (f" x{k}" if k > 1 else "")


def draft_vocabulary(choice, network) -> int | None:
    """--draft-vocab (`choice`) for this drafting network: the tokens its head covers (None: all of
    them). A peer drafts over the whole vocabulary whatever this says (docs/peers.md)."""
    from specbench.errors import SpecbenchError
    from specbench.model.checkpoints import draft_vocab, eagle_files, tokenizer

    # a folder's own drafting.json is the folder's fault, not --draft-vocab's
    head = network.source is not None and eagle_files.is_head_dir(Path(network.source))
    folder = "--eagle-head" if head else "--draft/--target"
    try:
        n = draft_vocab.declared(network.source) if choice == "auto" else choice
    except SpecbenchError as e:
        raise BadInput(folder, str(e)) from None
    try:
        if n is not None:
            draft_vocab.frequent_ids(n, network.config.n_vocab)  # refused here, before any work
    except SpecbenchError as e:
        raise BadInput("--draft-vocab" if choice != "auto" else folder, str(e)) from None
    if n is not None and not tokenizer.for_model(network).name.startswith(tokenizer.GPT2.name):
        raise BadInput(  # a checkpoint's own tokenizer (T5's, a real Llama's): other ids, other counts
            "--draft-vocab" if choice != "auto" else folder,
            f"the ranking counts GPT-2's tokens of the bundled text; {network.name} reads text with its "
            "own tokenizer: use --draft-vocab full",
        )
    return n


class Unit(NamedTuple):
    """A point of the prompt axis: its label, its prompts' ids (a batch's, or a refill's queue), and
    the slots a queue is served on (None: no queue)."""

    label: str
    ids: list[str]
    slots: int | None = None


class Base(NamedTuple):
    """A drafter kind's Drafter before its method, its name, and the model it drafts with."""

    drafter: object
    name: str
    model: object


def bases(s: Settings, models: dict, target) -> dict[str, Base]:
    """{kind: Base} for every drafter of the settings; `models`: {kind: the model it drafts with}."""
    return {kind: Base(*drafter_of(kind, models[kind], target, s.drafting), models[kind]) for kind in s.kinds}


def first(s: Settings, base: Base):
    """(Drafter, name): the kind's drafter with the grid's first method (trace's one; the one a
    kind's peers are checked against)."""
    return with_method(base.drafter, base.name, s.methods(bool(base.drafter.spec.acceptance))[0])


class Configuration(NamedTuple):
    """A configuration of the grid: its cell, drafter and name, prompts, and job."""

    cell: Cell
    drafter: object
    name: str
    unit: Unit
    job: Job


def grid(
    s: Settings, made: dict[str, Base], target, units: list[Unit], prompts, peers: dict
) -> list[Configuration]:
    """Every configuration of the settings on every unit of the prompt axis, as a job: drafters,
    then methods, units, temperatures, top-p and K. `prompts`: (suite, {id: text}, {id: token
    ids}); `peers`: {kind: its peers}."""
    suite, texts, encoded = prompts
    timing, out = s.timing(), []
    for kind, base in made.items():
        for method in s.methods(bool(base.drafter.spec.acceptance)):
            drafter, name = with_method(base.drafter, base.name, method)
            for unit, cell in itertools.product(units, s.cells(kind, method)):
                warp = Warp(cell.temperature, s.top_k, cell.top_p)
                for rate in s.request_rates if unit.slots else (None,):  # arrivals serve a refilled queue
                    config = RunConfig(
                        base.model,
                        target,
                        drafter,
                        cell.K,
                        warp,
                        **timing,
                        peers=peers[kind],
                        slots=unit.slots,
                        request_rate=rate,
                    )
                    out.append(configuration(config, cell, drafter, name, unit, suite, texts, encoded))
    return out


def configuration(config, cell, drafter, name: str, unit: Unit, suite, texts, encoded) -> Configuration:
    """One configuration of the grid as its job, on its unit's prompts."""
    ids, category = unit.ids, category_of(suite, unit.label)
    job = Job(config, name, unit.label, ids, [texts[i] for i in ids], [encoded[i] for i in ids], category)
    return Configuration(cell, drafter, name, unit, job)
