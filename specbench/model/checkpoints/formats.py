"""Each architecture's checkpoint format (nets/families.py holds the architectures): how a
folder of it is recognised, loaded and saved, and its config written as Hugging Face's
config.json. weights.read_dir, the EAGLE head's files and the peers ask this table instead of
branching on config types."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from specbench.errors import WeightsError
from specbench.model.checkpoints import hf_layout, llama_layout, t5_layout
from specbench.model.nets import families
from specbench.model.nets.families import Family


@dataclasses.dataclass(frozen=True)
class Format:
    """A family's checkpoint layout: `reads(directory)` whether a folder's config.json names one of
    its model_types; `load(directory, dtype)` (config, params); `save(directory, params, config)`;
    `config_to_hf(config)` its config.json as a dict; `blocks` the layout module that reads and
    writes one of its decoder layers alone (LAYERS, NORM_PARTS, layer_shapes, blocks_from_hf,
    layer_to_hf: an MTP layer's block, checkpoints/mtp_files.py), None for T5."""

    family: Family
    reads: Callable[[Path], bool]
    load: Callable
    save: Callable
    config_to_hf: Callable[[object], dict]
    head_shape: Callable[[object], dict] | None = None  # an EAGLE-1 head's block in its config.json
    blocks: object = None


def _gpt2_head_shape(config) -> dict:
    """A GPT-2 head's block as specbench's head folders have always written it: GPT-2's own fields."""
    return {k: getattr(config, k) for k in ("n_head", "n_embd", "n_ctx", "n_vocab", "layer_norm_epsilon")}


def _names_gpt2(directory: Path) -> bool:
    """GPT-2's folders: model_type "gpt2", or none at all (older GPT-2 configs have none)."""
    return hf_layout.model_type(directory) in (None, "gpt2")


FORMATS = (
    Format(families.T5, t5_layout.is_dir_of, t5_layout.load_dir, t5_layout.save, t5_layout.config_to_hf),
    Format(
        families.LLAMA,
        llama_layout.is_dir_of,
        llama_layout.load_dir,
        llama_layout.save,
        llama_layout.config_to_hf,
        lambda config: {"llama": llama_layout.config_to_hf(config)},  # its config.json, under "llama"
        llama_layout,
    ),
    Format(
        families.GPT2,
        _names_gpt2,
        hf_layout.load_dir,
        hf_layout.save,
        hf_layout.config_to_hf,
        _gpt2_head_shape,
        hf_layout,
    ),
)
BY_FAMILY = {f.family.config_type: f for f in FORMATS}


def format_of(config) -> Format:
    """The checkpoint format of a config's family."""
    return BY_FAMILY[families.family_of(config).config_type]


def read_dir(directory: Path, dtype) -> tuple[object, dict]:
    """(config, params) of a checkpoint folder, in the format its config.json names; a folder of
    another model_type is refused naming it, the folder and the types specbench reads."""
    for fmt in FORMATS:
        if fmt.reads(directory):
            return fmt.load(directory, dtype)
    found = hf_layout.model_type(directory)
    raise WeightsError(
        f"{directory}: model_type {found!r} is not one specbench reads (it reads "
        f"{', '.join(families.model_types())})"
    )
