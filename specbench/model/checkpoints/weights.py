"""Where the models specbench knows have their weights: the weights folder, the bundled pair, and
loading by registry name (registry.py), alias or directory (the formats on disk are hf_layout.py's,
t5_layout.py's and llama_layout.py's; downloads are hub.py's).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import jax
import jax.numpy as jnp

from specbench.errors import SpecbenchError, WeightsError
from specbench.model.checkpoints import eagle_files, formats, hf_layout, llama_layout, mtp_files, t5_layout
from specbench.model.checkpoints.hf_layout import is_model_dir
from specbench.model.checkpoints.registry import ALIASES, REGISTRY, ModelSpec
from specbench.model.kernels import cpu
from specbench.model.nets import eagle, network
from specbench.model.nets.families import family_of
from specbench.model.nets.layouts import for_decoding
from specbench.model.nets.network import Model


def weights_dir() -> Path:
    """gpt2_weights/: $SPECBENCH_WEIGHTS_DIR, which must be a folder, else the checkout this
    package lives in, else ./"""
    named = os.environ.get("SPECBENCH_WEIGHTS_DIR")
    if named:
        if not Path(named).is_dir():
            what = "is a file" if Path(named).exists() else "does not exist"
            raise WeightsError(
                f"SPECBENCH_WEIGHTS_DIR={named} {what}: name a folder of models", "weights_dir"
            )
        return Path(named)
    beside_package = Path(__file__).resolve().parents[3] / "gpt2_weights"
    return beside_package if beside_package.is_dir() else Path.cwd() / "gpt2_weights"


# ---------------------------------------------------------------------------------------------
# Registry


def resolve(name: str) -> ModelSpec | Path:
    """A registry entry (by name or alias), or a directory path."""
    name = ALIASES.get(name, name)
    if name in REGISTRY:
        return REGISTRY[name]
    local = weights_dir() / name
    if re.fullmatch(r"[\w.-]+", name) and is_model_dir(local):
        return local
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    known = ", ".join(list(REGISTRY) + sorted(ALIASES))
    raise WeightsError(
        f"unknown model {name!r}: use one of {known}, or a folder of a GPT-2, T5 or Llama-family checkpoint"
    )


def local_path(spec: ModelSpec) -> Path:
    return weights_dir() / spec.name


def random_model_params(spec: ModelSpec, dtype=jnp.float32) -> dict:
    if spec.random_from:  # a layer-skip draft: the parent's embeddings and first layers
        parent = REGISTRY[spec.random_from]
        full = random_model_params(parent, dtype)
        first = lambda a: a[: spec.config.n_layer]
        return {**full, "blocks": jax.tree_util.tree_map(first, full["blocks"])}
    return network.init_params(spec.config, spec.random_seed or 0, dtype)


def random_model(name: str, dtype=jnp.float32) -> Model:
    """Random weights of a registry name's shape (`--random-init`: timing only, offline), as its
    family's module initialises them (T5's too); a WeightsError naming --random-init for a folder."""
    spec = resolve(name)
    if not isinstance(spec, ModelSpec):
        raise WeightsError("needs registry names (a directory has weights already)", "random_init")
    if not family_of(spec.config).random_init:
        kind = network.display_name(spec.config)
        raise WeightsError(
            f"{spec.name} is a {kind}: specbench makes no random weights of its shape", "random_init"
        )
    return Model(spec.name, spec.config, random_model_params(spec, dtype), "random")


def load_model(name: str, dtype=jnp.float32, decoding: bool = True, kernels_choice: str = "auto") -> Model:
    """Load by registry name, alias or directory path; clear WeightsError if it is not here.
    decoding puts the weights in the layout decoding reads (layouts.for_decoding: the CPU kernel's or
    the Pallas kernels', as kernels_choice asks, else XLA's), which training does without."""
    model = _load(name, dtype)
    return for_decoding_model(model, kernels_choice) if decoding else model


def for_decoding_model(model: Model, kernels_choice: str = "auto") -> Model:
    """The model with its weights in the layout decoding reads (layouts.for_decoding); a T5's
    stay as loaded (XLA's products). The fused Pallas kernels serve GPT-2's blocks only."""
    if not family_of(model.config).kernels:  # T5: XLA's products on the weights as loaded
        return model
    pallas = family_of(model.config).pallas
    if not pallas and kernels_choice == "pallas":
        raise SpecbenchError(
            f"the fused Pallas kernels serve GPT-2's blocks only; {model.name} is a "
            f"{network.display_name(model.config)}: use auto, cpu or xla",
            "kernels",
        )
    kernel = cpu.choose(model.params, model.config.n_head, kernels_choice)
    kernel = "xla" if not pallas and kernel == "pallas" else kernel
    return dataclasses.replace(model, params=for_decoding(model.params, kernel))


def read_dir(directory: Path, dtype=jnp.float32):
    """(config, params) of a checkpoint folder, in the format its config.json names (formats.py)."""
    return formats.read_dir(directory, dtype)


def _load(name: str, dtype) -> Model:
    target = resolve(name)
    if isinstance(target, Path):
        config, params = read_dir(target, dtype)
        return Model(target.name, config, params, str(target))
    spec = target
    if spec.random_seed is not None:
        return Model(spec.name, spec.config, random_model_params(spec, dtype), "random")
    if is_model_dir(local_path(spec)):
        config, params = read_dir(local_path(spec), dtype)
        return Model(spec.name, config, params, str(local_path(spec)))
    raise WeightsError(
        f"model {spec.name} is not downloaded: run `specbench models download {spec.name}`, "
        "or time its shape with --random-init"
    )


def list_models() -> list[dict]:
    """Every registry model and every model directory in gpt2_weights/, with what is on disk."""
    rows = []
    for spec in REGISTRY.values():
        here = spec.random_seed is not None or is_model_dir(local_path(spec))
        kind = "random (timing only)" if spec.random_seed is not None else "download"
        rows.append(
            {
                "name": spec.name,
                "aliases": ",".join(spec.aliases),
                "kind": kind,
                "present": here,
                "n_params": spec.config.n_params,
                "description": spec.description,
                "path": "" if spec.random_seed is not None else str(local_path(spec)),
                "layers_x_width": network.shape(spec.config),
                "architecture": network.architecture(spec.config),
            }
        )
    root = weights_dir()
    registered = {s.name for s in REGISTRY.values()}
    try:
        entries = sorted(root.iterdir()) if root.is_dir() else []
    except OSError as e:
        raise WeightsError(f"cannot read {root} ({e.strerror})", "weights_dir") from None
    for d in entries:
        if d.name not in registered and not d.name.startswith(".") and is_model_dir(d):
            if eagle_files.is_head_dir(d):
                rows.append(head_row(d))
                continue
            if mtp_files.is_head_dir(d):
                rows.append(mtp_row(d))
                continue
            if t5_layout.is_dir_of(d):
                rows.append(t5_row(d))
                continue
            try:
                reader = llama_layout if llama_layout.is_dir_of(d) else hf_layout
                config = reader.read_config(d)
            except WeightsError as e:  # listed, with why it cannot be used: what loading it says
                rows.append(unreadable_row(d, str(e)))
                continue
            bundled = d.name in BUNDLED_PAIR
            rows.append(
                {
                    "name": d.name,
                    "aliases": "",
                    "kind": "bundled (the default pair)" if bundled else "local",
                    "present": True,
                    "n_params": config.n_params,
                    "description": "trained by specbench.train" if bundled else "local directory",
                    "path": str(d),
                    "layers_x_width": network.shape(config),
                    "architecture": network.architecture(config),
                }
            )
    return rows


def head_row(d: Path) -> dict:
    """models' row for an EAGLE head (eagle.py): what it drafts for, its shape and size."""
    try:
        config, params, trained_on = eagle_files.load(d)
    except WeightsError as e:
        return unreadable_row(d, str(e))
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    return {
        "name": d.name,
        "aliases": "",
        "kind": f"{eagle.format_of(config).title} (--drafter eagle)",
        "present": True,
        "n_params": n_params,
        "description": f"drafts for {trained_on or 'a target'} from its features",
        "path": str(d),
        "layers_x_width": f"1x{config.n_embd}",
        "architecture": eagle.format_of(config).name,
    }


def mtp_row(d: Path) -> dict:
    """models' row for an MTP layer in a folder of its own (mtp_files.save_head's): its target,
    its layout, its size."""
    try:
        target = (llama_layout if llama_layout.is_dir_of(d) else hf_layout).read_config(d)
        config, params = mtp_files.read(hf_layout.read_tensors(d), target, 1, str(d))
    except WeightsError as e:
        return unreadable_row(d, str(e))
    return {
        "name": d.name,
        "aliases": "",
        "kind": "MTP layer (--drafter mtp)",
        "present": True,
        "n_params": sum(x.size for x in jax.tree_util.tree_leaves(params)),
        "description": f"drafts for {mtp_files.target_of(d)}, {config.mtp.name}'s layout",
        "path": str(d),
        "layers_x_width": f"1x{config.n_embd}",
        "architecture": "mtp",
    }


def t5_row(d: Path) -> dict:
    """models' row for a T5 directory (t5_layout.py): an encoder-decoder (docs/encoder-decoders.md)."""
    try:
        config, params = t5_layout.load_dir(d)
    except WeightsError as e:
        return unreadable_row(d, str(e))
    bundled = d.name in BUNDLED_T5_PAIR
    return {
        "name": d.name,
        "aliases": "",
        "kind": "bundled T5 pair" if bundled else "T5 (encoder-decoder)",
        "present": True,
        "n_params": sum(x.size for x in jax.tree_util.tree_leaves(params)),
        "description": "trained by specbench.train (t5-target, t5-draft)" if bundled else "local directory",
        "path": str(d),
        "layers_x_width": network.shape(config),
        "architecture": "t5",
    }


def unreadable_row(d: Path, reason: str) -> dict:
    return {
        "name": d.name,
        "aliases": "",
        "kind": "unreadable",
        "present": False,
        "n_params": None,
        "description": reason,
        "path": str(d),
        "layers_x_width": "",
        "architecture": "",
        "problem": reason,
    }


BUNDLED_PAIR = ("tiny-draft", "tiny-target")  # trained by specbench.train, committed in gpt2_weights/
BUNDLED_T5_PAIR = ("tiny-t5-draft", "tiny-t5-target")  # likewise (train t5-draft, t5-target)
RANDOM_PAIR = ("random-draft", "random-target")


def default_pair() -> tuple[str, str]:
    """The bundled trained pair in gpt2_weights/. Random weights are never a silent stand-in:
    without the pair this says how to name one (random-draft and random-target time only)."""
    folder = weights_dir()
    missing = [name for name in BUNDLED_PAIR if not is_model_dir(folder / name)]
    if missing:
        raise WeightsError(
            f"the bundled pair is not in {folder} (no {', '.join(missing)}): name models with --draft and "
            f"--target, e.g. --draft {RANDOM_PAIR[0]} --target {RANDOM_PAIR[1]} (random, timing only)",
            "target",
        )
    return BUNDLED_PAIR
