"""An EAGLE head on disk (its step is nets/eagle.py): a folder with config.json (MARKER, the
target it reads, the shape: a GPT-2's fields, or a Llama-family block's config as its
config.json has it under "llama") and model.safetensors (its parameters by their path in the
tree, "fc.weight", "blocks.attn.c_attn.bias")."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specbench import files
from specbench.errors import WeightsError
from specbench.model.checkpoints import eagle3_files, formats, llama_layout
from specbench.model.nets.eagle import init_params
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.llama import LlamaConfig

MARKER = "specbench-eagle"  # config.json's "architecture" for a head
WEIGHTS_FILE = "model.safetensors"


def is_head_dir(directory: Path) -> bool:
    """Whether `directory` holds an EAGLE head: specbench's (its config.json says MARKER) or a
    published EAGLE-3 head (eagle3_files.py)."""
    meta = eagle3_files.read_meta(directory)
    return meta.get("architecture") == MARKER or eagle3_files.layout_of(meta) is not None


def save(
    out: Path, params: dict, config: GPT2Config | LlamaConfig, target: str, record: dict | None = None
) -> None:
    """Write a head: its parameters as float16 safetensors, keyed by path, and config.json."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    flat = {
        ".".join(k.key for k in path): np.asarray(x, np.float16)
        for path, x in jax.tree_util.tree_leaves_with_path(params)
    }
    save_file(flat, str(out / WEIGHTS_FILE))
    files.share(out / WEIGHTS_FILE)  # safetensors writes 0600
    shape = formats.format_of(config).head_shape(config)  # its block's config, as its family writes it
    (out / "config.json").write_text(
        json.dumps({"architecture": MARKER, "target": target, **shape}, indent=1)
    )
    if record is not None:
        (out / "train_record.json").write_text(json.dumps(record, indent=1) + "\n")


def load(directory: Path, dtype=jnp.float32) -> tuple[GPT2Config | LlamaConfig, dict, str]:
    """(config, params, the target it was trained on) of a head folder (an EAGLE-3 one's:
    eagle3_files.load); WeightsError naming the file and the key when something is missing or
    misshapen."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    directory = Path(directory)
    if eagle3_files.layout_of(eagle3_files.read_meta(directory)):
        try:
            return eagle3_files.load(directory, dtype)
        except WeightsError as e:
            raise WeightsError(f"{directory} is not a readable EAGLE-3 head ({e})", "draft") from None
    try:
        meta = json.loads((directory / "config.json").read_text())
        if "llama" in meta:  # a Llama-family head's block
            config = llama_layout.config_from_hf(meta["llama"])
        else:
            config = GPT2Config(n_layer=1, **{k: meta[k] for k in ("n_head", "n_embd", "n_ctx", "n_vocab")})
        flat = load_file(str(directory / WEIGHTS_FILE))
    except (OSError, ValueError, KeyError, TypeError, SafetensorError, WeightsError) as e:
        raise WeightsError(f"{directory} is not a readable EAGLE head ({e})", "draft") from None
    expected = init_params(config)
    params = {}
    for path, x in jax.tree_util.tree_leaves_with_path(expected):
        key = ".".join(k.key for k in path)
        if key not in flat or flat[key].shape != x.shape:
            got = "missing" if key not in flat else f"shaped {flat[key].shape}"
            raise WeightsError(f"{directory / WEIGHTS_FILE}: {key} is {got}, expected {x.shape}", "draft")
        node = params
        for k in path[:-1]:
            node = node.setdefault(k.key, {})
        node[path[-1].key] = jnp.asarray(flat[key], dtype)
    return config, params, meta.get("target", "")
