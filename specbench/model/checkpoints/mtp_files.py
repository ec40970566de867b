"""MTP layers on disk (their step is nets/mtp.py): in the target's own folder, beside its layers,
in the key names of the engine that defines each format (mtp.FORMATS), or in a folder of their
own (speculators' `mtp` checkpoints, whose embedding and head are the verifier's; the MTP layer
`python -m specbench.train mtp` writes, in DeepSeek's key names). The block is the target
family's, read and written by its checkpoint layout (formats.Format.blocks); a norm's tensors
are its family's (GPT-2's layer norms: weight and bias). The target's loader leaves these keys
to the head (llama_layout.load_dir, hf_layout.load_dir)."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specbench.errors import WeightsError
from specbench.model.checkpoints import formats, hf_layout
from specbench.model.nets import mtp
from specbench.model.nets.mtp import MtpFormat

ROLES = ("embed_norm", "hidden_norm", "proj", "out_norm", "head_norm", "own_head", "own_embed")
NORMS = ("embed_norm", "hidden_norm", "out_norm", "head_norm")
OPTIONAL = ("own_head", "own_embed")  # without them the layer reads the target's (a tied GPT-2's)
PARAM = {  # each role's name in the head's params (mtp.py)
    "embed_norm": "embed_norm",
    "hidden_norm": "hidden_norm",
    "proj": "fc",
    "out_norm": "out_norm",
    "head_norm": "ln_f",
    "own_head": "lm_head",
    "own_embed": "wte",
}


def layout(config):
    """The checkpoint layout of the config's family: its LAYERS, NORM_PARTS and block I/O."""
    return formats.format_of(config).blocks


def keys(fmt: MtpFormat, k: int, config) -> dict[str, list[str]]:
    """MTP layer k's own tensors in a format, for a target of this config: {role: its keys} (a
    norm's weight, and its bias in GPT-2's), for the roles the format has."""
    blocks = layout(config)
    prefix = fmt.parts(k, config.n_layer, blocks.LAYERS)
    named = {role: getattr(fmt, role) for role in ROLES if getattr(fmt, role)}
    parts = lambda role: blocks.NORM_PARTS if role in NORMS else ("weight",)
    return {role: [f"{prefix}{name}.{part}" for part in parts(role)] for role, name in named.items()}


def block_prefix(fmt: MtpFormat, k: int, config) -> str:
    """MTP layer k's decoder layer's key prefix, without its final dot."""
    return fmt.block(k, config.n_layer, layout(config).LAYERS).rstrip(".")


def shapes(fmt: MtpFormat, k: int, config) -> dict[str, tuple[int, ...]]:
    """Every key of MTP layer k with its shape (torch's [out, in]), its decoder layer's too; the
    layer's own embedding and head among them."""
    H, V = config.n_embd, config.n_vocab
    own = {"proj": (H, 2 * H), "own_head": (V, H), "own_embed": (V, H)}
    named = {key: own.get(role, (H,)) for role, ks in keys(fmt, k, config).items() for key in ks}
    return named | layout(config).layer_shapes(block_prefix(fmt, k, config), config)


def format_in(tensors: dict, config) -> MtpFormat | None:
    """The format whose first MTP layer's projection the tensors hold, or None."""
    return next((f for f in mtp.FORMATS if keys(f, 0, config)["proj"][0] in tensors), None)


def read(tensors: dict, target, n_mtp: int, where: str, dtype=jnp.float32) -> tuple[object, dict]:
    """(config, params) of the first MTP layer among a folder's tensors, for its target's config;
    WeightsError naming the folder, or the tensor that is missing or misshapen."""
    tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}  # GPT-2's older prefix
    fmt = format_in(tensors, target)
    if fmt is None:
        names = ", ".join(f"{f.name} ({keys(f, 0, target)['proj'][0]})" for f in mtp.FORMATS)
        raise WeightsError(f"{where} has no MTP layers: specbench reads {names}")
    owned = keys(fmt, 0, target)
    absent = {role for role in OPTIONAL if role in owned and owned[role][0] not in tensors}
    expected = {k: s for k, s in shapes(fmt, 0, target).items() if not any(k in owned[r] for r in absent)}
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise WeightsError(f"{where}: {fmt.name}'s MTP layer 0 has no {missing[0]}")
    for key, shape in expected.items():
        if tuple(tensors[key].shape) != shape:
            raise WeightsError(f"{where}: {key} has shape {tuple(tensors[key].shape)}, expected {shape}")
    f32 = lambda key: np.asarray(tensors[key], np.float32)
    params = {}
    for role, ks in owned.items():
        if role in absent:
            continue
        if role in OPTIONAL:
            params[PARAM[role]] = jnp.asarray(f32(ks[0]), dtype)
            continue
        parts = {key.rsplit(".", 1)[1]: f32(key) for key in ks}
        parts = {"weight": parts["weight"].T} if role == "proj" else parts
        params[PARAM[role]] = {part: jnp.asarray(x, dtype) for part, x in parts.items()}
    params["blocks"] = layout(target).blocks_from_hf(tensors, [block_prefix(fmt, 0, target)], target, dtype)
    return mtp.config_for(target, fmt, max(n_mtp, 1)), params


def to_tensors(params: dict, config, target, k: int = 0, np_dtype=np.float32) -> dict[str, np.ndarray]:
    """A head's params as MTP layer k's tensors in its format (read undone), for a target of this
    config: what the tests write into a target's folder as its engine would, and what training
    saves. The layer's own embedding and head where its params hold them."""
    out = {}
    as_np = lambda x: np.ascontiguousarray(np.asarray(x, np.float32).astype(np_dtype))
    for role, ks in keys(config.mtp, k, target).items():
        if PARAM[role] not in params:
            continue
        x = params[PARAM[role]]
        for key in ks:
            part = x if role in OPTIONAL else x[key.rsplit(".", 1)[1]]
            out[key] = as_np(part.T if role == "proj" else part)
    prefix = block_prefix(config.mtp, k, target)
    return out | layout(target).layer_to_hf(params["blocks"], 0, prefix, config, np_dtype)


def save_with_target(directory: Path, target_params: dict, target, head: dict, config) -> Path:
    """A target's folder with one MTP layer beside its layers, in the head's format (speculators'
    in a folder of its own: the head's tensors only, and its verifier's config under
    transformer_layer_config)."""
    fmt = formats.format_of(target)
    tensors = to_tensors(head, config, target)
    hf = fmt.config_to_hf(target)
    if config.mtp is mtp.SPECULATORS:
        meta = {"speculators_model_type": "mtp", "transformer_layer_config": hf}
        return hf_layout.write(directory, meta, tensors)
    with_target = fmt.save(directory, target_params, target)
    both = hf_layout.read_tensors(with_target) | tensors
    return hf_layout.write(directory, hf | {"num_nextn_predict_layers": 1}, both)


def load(directory: Path, target, dtype=jnp.float32) -> tuple[object, dict]:
    """The MTP head in a folder, for a target of this config: the target's own folder (its
    config.json's num_nextn_predict_layers), a folder holding an MTP layer alone in its format's
    key names, or a speculators `mtp` folder."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / hf_layout.CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise WeightsError(f"cannot read {directory / hf_layout.CONFIG_FILE}: {e}") from None
    n_mtp = 1 if meta.get("speculators_model_type") == "mtp" else hf_layout.mtp_layers(directory)
    return read(hf_layout.read_tensors(directory), target, n_mtp, str(directory), dtype)


MARKER = "mtp_target"  # config.json's field in a folder holding an MTP layer alone: its target's name


def target_of(directory: Path) -> str | None:
    """The target a folder holding an MTP layer alone (save_head's) names, or None."""
    try:
        named = json.loads((Path(directory) / hf_layout.CONFIG_FILE).read_text()).get(MARKER)
    except (OSError, ValueError, AttributeError):
        return None
    return named if isinstance(named, str) else None


def is_head_dir(directory: Path) -> bool:
    """Whether a folder holds an MTP layer alone (save_head's), naming its target."""
    return target_of(directory) is not None


def save_head(directory: Path, head: dict, config, target, target_name: str, np_dtype=np.float32) -> Path:
    """A folder holding one MTP layer alone, in its format's key names for this target (DeepSeek's:
    `h.{L}.` beside a GPT-2's L blocks), and the target's config.json with
    num_nextn_predict_layers and the target's name (MARKER): what `train mtp` writes."""
    hf = formats.format_of(target).config_to_hf(target)
    meta = hf | {"num_nextn_predict_layers": 1, MARKER: target_name}
    return hf_layout.write(directory, meta, to_tensors(head, config, target, np_dtype=np_dtype))
