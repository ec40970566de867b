"""MTP layers on disk (their step is nets/mtp.py): in the target's own folder, beside its layers,
in the key names of the engine that defines each format (mtp.FORMATS), or in a folder of their
own (speculators' `mtp` checkpoints, whose embedding and head are the verifier's). The target's
loader leaves these keys to the head (llama_layout.load_dir)."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specbench.errors import WeightsError
from specbench.model.checkpoints import hf_layout, llama_layout
from specbench.model.nets import mtp
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.mtp import MtpConfig, MtpFormat

ROLES = ("embed_norm", "hidden_norm", "proj", "out_norm", "head_norm", "own_head", "own_embed")
PARAM = {  # each role's name in the head's params (mtp.py)
    "embed_norm": "embed_norm",
    "hidden_norm": "hidden_norm",
    "proj": "fc",
    "out_norm": "out_norm",
    "head_norm": "ln_f",
    "own_head": "lm_head",
    "own_embed": "wte",
}


def keys(fmt: MtpFormat, k: int, n_layer: int) -> dict[str, str]:
    """MTP layer k's own tensors in a format: {role: key}, for the roles it has."""
    named = {role: getattr(fmt, role) for role in ROLES if getattr(fmt, role)}
    return {role: f"{fmt.parts(k, n_layer)}{name}.weight" for role, name in named.items()}


def shapes(fmt: MtpFormat, k: int, config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every key of MTP layer k with its shape (torch's [out, in]), its decoder layer's too."""
    H, V = config.n_embd, config.n_vocab
    own = {"proj": (H, 2 * H), "own_head": (V, H), "own_embed": (V, H)}
    named = {key: own.get(role, (H,)) for role, key in keys(fmt, k, config.n_layer).items()}
    return named | llama_layout.layer_shapes(fmt.block(k, config.n_layer).rstrip("."), config)


def format_in(tensors: dict, n_layer: int) -> MtpFormat | None:
    """The format whose first MTP layer's projection the tensors hold, or None."""
    return next((f for f in mtp.FORMATS if keys(f, 0, n_layer)["proj"] in tensors), None)


def read(
    tensors: dict, target: LlamaConfig, n_mtp: int, where: str, dtype=jnp.float32
) -> tuple[MtpConfig, dict]:
    """(config, params) of the first MTP layer among a folder's tensors, for its target's config;
    WeightsError naming the folder, or the tensor that is missing or misshapen."""
    fmt = format_in(tensors, target.n_layer)
    if fmt is None:
        names = ", ".join(f"{f.name} ({keys(f, 0, target.n_layer)['proj']})" for f in mtp.FORMATS)
        raise WeightsError(f"{where} has no MTP layers: specbench reads {names}")
    n_mtp = max(n_mtp, 1)
    expected = shapes(fmt, 0, target)
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise WeightsError(f"{where}: {fmt.name}'s MTP layer 0 has no {missing[0]}")
    for key, shape in expected.items():
        if tuple(tensors[key].shape) != shape:
            raise WeightsError(f"{where}: {key} has shape {tuple(tensors[key].shape)}, expected {shape}")
    f32 = lambda key: np.asarray(tensors[key], np.float32)
    params = {}
    for role, key in keys(fmt, 0, target.n_layer).items():
        x = f32(key).T if role == "proj" else f32(key)
        params[PARAM[role]] = (
            jnp.asarray(x, dtype) if role in ("own_head", "own_embed") else {"weight": jnp.asarray(x, dtype)}
        )
    block = [fmt.block(0, target.n_layer).rstrip(".")]
    params["blocks"] = llama_layout.blocks_from_hf(tensors, block, target, dtype)
    return mtp.config_for(target, fmt, n_mtp), params


def to_tensors(params: dict, config: MtpConfig, n_layer: int, k: int = 0) -> dict[str, np.ndarray]:
    """A head's params as MTP layer k's tensors in its format (read undone), for a target of
    n_layer layers: what the tests write into a target's folder as its engine would."""
    out = {}
    for role, key in keys(config.mtp, k, n_layer).items():
        x = params[PARAM[role]]
        x = np.asarray(x if role in ("own_head", "own_embed") else x["weight"], np.float32)
        out[key] = np.ascontiguousarray(x.T if role == "proj" else x)
    return out | llama_layout.layer_to_hf(
        params["blocks"], 0, config.mtp.block(k, n_layer).rstrip("."), config
    )


def save_with_target(
    directory: Path, target_params: dict, target: LlamaConfig, head: dict, config: MtpConfig
) -> Path:
    """A target's folder with one MTP layer beside its layers, in the head's format (speculators'
    in a folder of its own: the head's tensors only, and its verifier's config under
    transformer_layer_config)."""
    tensors = to_tensors(head, config, target.n_layer)
    hf = llama_layout.config_to_hf(target)
    if config.mtp is mtp.SPECULATORS:
        meta = {"speculators_model_type": "mtp", "transformer_layer_config": hf}
        return hf_layout.write(directory, meta, tensors)
    tensors |= llama_layout.params_to_hf(target_params, target)
    return hf_layout.write(directory, hf | {"num_nextn_predict_layers": 1}, tensors)


def load(directory: Path, target: LlamaConfig, dtype=jnp.float32) -> tuple[MtpConfig, dict]:
    """The MTP head in a folder, for a target of this config: the target's own folder (its
    config.json's num_nextn_predict_layers), or a speculators `mtp` folder."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / hf_layout.CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise WeightsError(f"cannot read {directory / hf_layout.CONFIG_FILE}: {e}") from None
    n_mtp = 1 if meta.get("speculators_model_type") == "mtp" else llama_layout.mtp_layers(directory)
    return read(hf_layout.read_tensors(directory), target, n_mtp, str(directory), dtype)
