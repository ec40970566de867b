"""The models a drafter brings of its own, each loaded or refused in one line naming its flag: an
EAGLE head (--eagle-head), an MTP layer (--mtp-head: the target's own, or a folder), and the
draft a kind's record names where --draft is not of its sort (pard's <draft>-pard)."""

from __future__ import annotations

from pathlib import Path

import click

from specbench.cli.asked.console import BadInput
from specbench.cli.commands.loading import load_model
from specbench.errors import WeightsError
from specbench.model.nets.families import family_of


def load_head(named: str | None, target):
    """The EAGLE head that --eagle-head names, as a Model (eagle_files.load), for this target: by default
    the folder <target's name>-eagle in gpt2_weights/ (the bundled tiny-target-eagle)."""
    from specbench.model.checkpoints import eagle3_files, eagle_files, hf_layout, weights
    from specbench.model.nets import eagle, network

    if not family_of(target.config).features:
        raise BadInput(
            "--drafter", f"{target.name} is a T5: it drafts with a model, lookup or the dial so far"
        )
    path = Path(named).expanduser() if named else weights.weights_dir() / f"{target.name}-eagle"
    if not named and not path.is_dir():
        how = (
            f"train one with `python -m specbench.train eagle --target {target.name} --out {path}`, "
            "or name a folder"
            if family_of(target.config).trains_heads
            else "name a published EAGLE-3 head's folder "
            "(specbench.train trains heads for GPT-2 targets only)"
        )
        raise BadInput("--eagle-head", f"{target.name} has no EAGLE head at {path}: {how}")
    if not path.is_dir():
        raise BadInput("--eagle-head", f"{path} does not exist: name an EAGLE head's folder")
    if problem := hf_layout.config_problem(path):
        raise BadInput("--eagle-head", problem)
    if not eagle_files.is_head_dir(path):
        raise BadInput(
            "--eagle-head",
            f"{path} is not an EAGLE head (its config.json names {eagle_files.MARKER}, "
            f"{eagle3_files.ARCHITECTURE} or speculators_model_type eagle3)",
        )
    try:
        config, params, trained_on = eagle_files.load(path, target.params["wte"].dtype)
    except WeightsError as e:
        raise BadInput("--eagle-head", str(e)) from None
    wrong = eagle.mismatch(config, target.config, params)
    if wrong:
        raise BadInput(
            "--eagle-head",
            f"{path} {wrong} ({target.name}, a {network.display_name(target.config)}; "
            f"the head was trained on {trained_on or 'another target'})",
        )
    if trained_on and trained_on != target.name:
        click.echo(
            f"warning: --eagle-head: {path} was trained on {trained_on}'s features, not {target.name}'s: "
            "expect few of its drafts accepted",
            err=True,
        )
    if said := eagle.note(config, target.config):
        click.echo(f"note: --eagle-head: {said}", err=True)
    config = eagle.drafting_config(config, target.config)  # an EAGLE-3 head's taps: the target's
    return weights.Model(path.name, config, params, str(path))


def load_mtp(named: str | None, target):
    """The MTP head a target ships in its own folder, else the folder <target's name>-mtp in
    gpt2_weights/ (the bundled tiny-target-mtp), or the folder --mtp-head names (an MTP layer
    alone, speculators' `mtp` format), as a Model (mtp_files.load); BadInput naming the flag
    where there is none."""
    from specbench.model.checkpoints import hf_layout, mtp_files, weights
    from specbench.model.nets import eagle

    flag = "--mtp-head" if named else "--drafter"
    if not family_of(target.config).features:
        raise BadInput("--drafter", f"{target.name} is a T5: it has no features for an MTP layer to read")
    path = Path(named).expanduser() if named else Path(target.source)
    beside = weights.weights_dir() / f"{target.name}-mtp"
    if not named and path.is_dir() and not hf_layout.mtp_layers(path) and mtp_files.is_head_dir(beside):
        path = beside
    if not path.is_dir():
        where = f"{path} is not a folder" if named else f"{target.name} has random weights, no folder"
        raise BadInput(flag, f"{where}: mtp reads the MTP layers a checkpoint folder ships")
    try:
        config, params = mtp_files.load(path, target.config, target.params["wte"].dtype)
    except WeightsError as e:
        how = (
            f"; train one with `python -m specbench.train mtp --target {target.name} --out {beside}`"
            if not named and family_of(target.config).trains_heads
            else ""
        )
        raise BadInput(flag, f"{e}{how}") from None
    if wrong := eagle.mismatch(config, target.config, params):
        raise BadInput(flag, f"{path}'s MTP layer {wrong}")
    return weights.Model(
        f"{target.name}-mtp", eagle.drafting_config(config, target.config), params, str(path)
    )


def own_draft(kind, draft, dtype: str, kernels: str):
    """The draft a kind drafts with: the --draft, or where it is not of the kind's sort the folder
    its record names in gpt2_weights/ (Kind.own_draft: pard's <draft>-pard) where that folder is
    there; else the --draft, which the kind then refuses by name."""
    from specbench.model.checkpoints import hf_layout, weights

    if draft is None or kind.own_draft is None or not (name := kind.own_draft(draft.config, draft.name)):
        return draft
    if not hf_layout.is_model_dir(path := weights.weights_dir() / name):
        return draft
    return load_model(str(path), "--draft", dtype, kernels)


def default_head(target):
    """The target's EAGLE head in gpt2_weights/<name>-eagle, or None where it has none."""
    from specbench.model.checkpoints import eagle_files, weights

    if not eagle_files.is_head_dir(weights.weights_dir() / f"{target.name}-eagle"):
        return None
    return load_head(None, target)


def drafting_model(kind: str, draft, head):
    """The model a drafter of this kind brings of its own: the draft model, the EAGLE head, or None."""
    from specbench.model.decode.drafters import KINDS

    spec = KINDS[kind]
    return draft if spec.draft_model else head if spec.features else None
