"""The Hugging Face GPT-2 layout on disk, and the params pytree it maps to.

One on-disk format for every model: a directory with `config.json` and `model.safetensors`
(or shards listed in `model.safetensors.index.json`), tensors under HF GPT-2 key names with an
optional `transformer.` prefix. So the bundled pair loads in `transformers.GPT2LMHeadModel`,
and any HF GPT-2 checkpoint loads here.

The params pytree mirrors those keys; the blocks `h.{i}.*` are stacked on a leading axis:

    wte.weight                 -> params["wte"]                            [n_vocab, n_embd]
    wpe.weight                 -> params["wpe"]                            [n_ctx, n_embd]
    h.{i}.ln_1.weight          -> params["blocks"]["ln_1"]["weight"][i]    [n_embd]
    h.{i}.attn.c_attn.weight   -> params["blocks"]["attn"]["c_attn"]["weight"][i]  [n_embd, 3*n_embd]
    ...                           (attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj likewise)
    ln_f.weight / ln_f.bias    -> params["ln_f"]["weight" / "bias"]

HF stores attention and MLP weights as Conv1D, i.e. [in, out], which is exactly the
orientation `x @ w` wants: no tensor is transposed. (nanoGPT transposes these four because it
uses nn.Linear, which stores [out, in].) Ignored on load: the causal-mask buffers
`h.{i}.attn.bias` / `attn.masked_bias`, and `lm_head.weight`, which GPT-2 ties to `wte`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specbench import files
from specbench.errors import WeightsError
from specbench.model.checkpoints.config_fields import Fields
from specbench.model.nets import mtp
from specbench.model.nets.gpt2 import GPT2Config

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
BLOCK_KEYS = [
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
]
LAYERS = "h."  # the blocks' keys: h.{i}.*; DeepSeek's MTP layers go on numbering them (nets/mtp.py)
NORM_PARTS = ("weight", "bias")  # a layer norm's tensors
IGNORED = re.compile(r"^(h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight)$")


# ---------------------------------------------------------------------------------------------
# HF tensors <-> params pytree


def config_from_hf(d: dict, where: str = "config.json") -> GPT2Config:
    """GPT2Config from a GPT-2 config.json; WeightsError naming a missing key or a value of the wrong
    type or range (config_fields)."""
    try:
        f = Fields(d, where)
        heads, width = f.count("n_head"), f.count("n_embd")
        if width % heads:
            raise f.bad("n_head", f"a divisor of n_embd ({width})")
        return GPT2Config(
            n_layer=f.count("n_layer"),
            n_head=heads,
            n_embd=width,
            n_ctx=f.count("n_positions", None) or f.count("n_ctx"),
            n_vocab=f.count("vocab_size"),
            layer_norm_epsilon=f.number("layer_norm_epsilon", 1e-5),
            mask_token=f.count("pard_token", None, low=0),
        )
    except WeightsError as e:
        raise WeightsError(f"{where} is not a GPT-2 config ({str(e).removeprefix(where + ': ')})") from None


def config_problem(directory: Path) -> str | None:
    """What is wrong with a folder's config.json where it is there but does not read as a JSON
    object (None where it reads, or is not there: the callers say what is missing)."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text())
    except OSError as e:
        return f"{path} cannot be read ({e.strerror})"
    except ValueError as e:
        return f"{path} is not JSON ({e})"
    return None if isinstance(found, dict) else f"{path} is not a JSON object"


def model_type(directory: Path) -> str | None:
    """config.json's model_type (None where the file or the field is missing, or it is not JSON)."""
    try:
        found = json.loads((directory / CONFIG_FILE).read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def read_config(directory: Path) -> GPT2Config:
    """A model directory's config.json as a GPT2Config; WeightsError saying what is wrong with it
    (unreadable, not JSON, or not a GPT-2 config), in the words `models list` shows too."""
    path = directory / CONFIG_FILE
    try:
        d = json.loads(path.read_text())
    except OSError as e:
        raise WeightsError(f"{path} cannot be read ({e.strerror})") from None
    except ValueError as e:
        raise WeightsError(f"{path} is not JSON ({e})") from None
    return config_from_hf(d, str(path))


def config_to_hf(config: GPT2Config) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_embd": config.n_embd,
        "n_positions": config.n_ctx,
        "n_ctx": config.n_ctx,
        "vocab_size": config.n_vocab,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "tie_word_embeddings": True,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
    } | ({} if config.mask_token is None else {"pard_token": config.mask_token})


def layer_shapes(b: str, config: GPT2Config) -> dict[str, tuple[int, ...]]:
    """The keys of one block under the prefix `b` ("h.3"), with their shapes (Conv1D's [in, out])."""
    e = config.n_embd
    block = {
        "ln_1.weight": (e,),
        "ln_1.bias": (e,),
        "attn.c_attn.weight": (e, 3 * e),
        "attn.c_attn.bias": (3 * e,),
        "attn.c_proj.weight": (e, e),
        "attn.c_proj.bias": (e,),
        "ln_2.weight": (e,),
        "ln_2.bias": (e,),
        "mlp.c_fc.weight": (e, 4 * e),
        "mlp.c_fc.bias": (4 * e,),
        "mlp.c_proj.weight": (4 * e, e),
        "mlp.c_proj.bias": (e,),
    }
    return {f"{b}.{k}": s for k, s in block.items()}


def expected_shapes(config: GPT2Config) -> dict[str, tuple[int, ...]]:
    e = config.n_embd
    shapes = {
        "wte.weight": (config.n_vocab, e),
        "wpe.weight": (config.n_ctx, e),
        "ln_f.weight": (e,),
        "ln_f.bias": (e,),
    }
    for i in range(config.n_layer):
        shapes.update(layer_shapes(f"h.{i}", config))
    return shapes


def check_tensors(tensors: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], what: str) -> None:
    """WeightsError, in one line naming the tensor, unless the checkpoint holds exactly the keys of
    `shapes`, each of its shape."""
    missing, unexpected = sorted(shapes.keys() - tensors.keys()), sorted(tensors.keys() - shapes.keys())
    if missing or unexpected:
        raise WeightsError(
            f"{what} keys do not match the config: missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    for k, shape in shapes.items():
        if tuple(tensors[k].shape) != shape:
            raise WeightsError(f"tensor {k} has shape {tuple(tensors[k].shape)}, expected {shape}")


def params_from_hf(
    tensors: dict[str, np.ndarray], config: GPT2Config, dtype=jnp.float32, ignored=lambda key: False
) -> dict:
    """HF GPT-2 state dict (numpy) -> params pytree, checking every key and shape; the keys
    `ignored` names are dropped (the MTP layers a folder ships beside the model: mtp_files.py)."""
    tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    tensors = {k: v for k, v in tensors.items() if not IGNORED.match(k) and not ignored(k)}
    check_tensors(tensors, expected_shapes(config), "checkpoint")
    as_jax = lambda a: jnp.asarray(np.asarray(a, dtype=np.float32), dtype=dtype)
    return {
        "wte": as_jax(tensors["wte.weight"]),
        "wpe": as_jax(tensors["wpe.weight"]),
        "blocks": blocks_from_hf(tensors, [f"h.{i}" for i in range(config.n_layer)], config, dtype),
        "ln_f": {"weight": as_jax(tensors["ln_f.weight"]), "bias": as_jax(tensors["ln_f.bias"])},
    }


def blocks_from_hf(tensors: dict[str, np.ndarray], prefixes: list[str], config: GPT2Config, dtype) -> dict:
    """The blocks under `prefixes` (checked already) as gpt2.py's stacked `blocks`."""
    blocks: dict = {}
    for key in BLOCK_KEYS:
        stacked = np.stack([np.asarray(tensors[f"{b}.{key}"], np.float32) for b in prefixes])
        *path, leaf = key.split(".")
        node = blocks
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = jnp.asarray(stacked, dtype)
    return blocks


def layer_to_hf(
    blocks: dict, i: int, b: str, config: GPT2Config, np_dtype=np.float32
) -> dict[str, np.ndarray]:
    """Block i of gpt2.py's stacked `blocks` as HF's tensors under the prefix `b`."""
    tensors = {}
    for key in BLOCK_KEYS:
        node = blocks
        for part in key.split("."):
            node = node[part]
        tensors[f"{b}.{key}"] = np.ascontiguousarray(np.asarray(node[i], np.float32).astype(np_dtype))
    return tensors


def params_to_hf(params: dict, np_dtype=np.float32) -> dict[str, np.ndarray]:
    """params pytree -> HF GPT-2 state dict (numpy, contiguous, in np_dtype)."""
    out = lambda a: np.ascontiguousarray(np.asarray(a, dtype=np.float32).astype(np_dtype))
    tensors = {
        "wte.weight": out(params["wte"]),
        "wpe.weight": out(params["wpe"]),
        "ln_f.weight": out(params["ln_f"]["weight"]),
        "ln_f.bias": out(params["ln_f"]["bias"]),
    }
    n_layer = np.shape(params["blocks"]["ln_1"]["weight"])[0]
    for i in range(n_layer):
        tensors |= layer_to_hf(params["blocks"], i, f"h.{i}", None, np_dtype)
    return tensors


# ---------------------------------------------------------------------------------------------
# Directories


def save(
    directory: str | Path,
    params: dict,
    config: GPT2Config,
    np_dtype=np.float32,
    max_shard_bytes: int | None = None,
) -> Path:
    """Write config.json and model.safetensors, or shards plus an HF index if max_shard_bytes is set."""
    return write(directory, config_to_hf(config), params_to_hf(params, np_dtype), max_shard_bytes)


def write(directory: str | Path, config: dict, tensors: dict, max_shard_bytes: int | None = None) -> Path:
    """A Hugging Face checkpoint folder: config.json from `config`, and `tensors` (an HF state
    dict, numpy) in model.safetensors, or in shards of at most max_shard_bytes with their index."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    if max_shard_bytes is None:
        save_file(tensors, str(directory / SAFETENSORS_FILE), metadata={"format": "pt"})
        files.share(directory / SAFETENSORS_FILE)  # safetensors writes 0600
        return directory
    shards: list[dict[str, np.ndarray]] = [{}]
    for key, t in tensors.items():
        if shards[-1] and sum(a.nbytes for a in shards[-1].values()) + t.nbytes > max_shard_bytes:
            shards.append({})
        shards[-1][key] = t
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / name), metadata={"format": "pt"})
        files.share(directory / name)
        weight_map.update({k: name for k in shard})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return directory


def is_model_dir(directory: Path) -> bool:
    """Whether `directory` holds a model (config.json and weights); WeightsError naming the
    weights folder where it cannot be looked into (permissions)."""
    try:
        return (directory / CONFIG_FILE).is_file() and (
            (directory / SAFETENSORS_FILE).is_file() or (directory / INDEX_FILE).is_file()
        )
    except OSError as e:
        raise WeightsError(f"cannot read {directory} ({e.strerror})", "weights_dir") from None


def load_dir(directory: str | Path, dtype=jnp.float32) -> tuple[GPT2Config, dict]:
    """Read an HF GPT-2 directory: (config, params)."""
    directory = Path(directory)
    if not is_model_dir(directory):
        raise WeightsError(
            f"{directory} is not a model directory "
            f"(needs {CONFIG_FILE} and {SAFETENSORS_FILE} or {INDEX_FILE})"
        )
    config = read_config(directory)
    n_mtp = mtp_layers(directory)
    ignored = lambda key: mtp.is_mtp_key(key.removeprefix("transformer."), config.n_layer, n_mtp, LAYERS)
    return config, params_from_hf(read_tensors(directory), config, dtype, ignored)


def mtp_layers(directory: Path) -> int:
    """How many MTP layers a folder's config.json says it ships (num_nextn_predict_layers, 0 without)."""
    d = json.loads((Path(directory) / CONFIG_FILE).read_text())
    return Fields(d, str(Path(directory) / CONFIG_FILE)).count("num_nextn_predict_layers", 0, low=0)


def read_tensors(directory: Path) -> dict[str, np.ndarray]:
    """Every tensor of a model directory's safetensors (one file, or the shards its index lists),
    by key; WeightsError where they cannot be read."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        if (directory / SAFETENSORS_FILE).is_file():
            files = [directory / SAFETENSORS_FILE]
        else:
            index = json.loads((directory / INDEX_FILE).read_text())
            files = [directory / f for f in sorted(set(index["weight_map"].values()))]
        tensors = {}
        for f in files:
            tensors.update(load_file(str(f)))
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        raise WeightsError(f"cannot read the weights in {directory}: {e}") from None
    check_finite(tensors, directory)
    return tensors


def check_finite(tensors: dict[str, np.ndarray], directory: Path) -> None:
    """WeightsError naming the first floating tensor that holds a NaN or an infinity: such weights
    would decode garbage without a word."""
    for key, x in tensors.items():
        if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
            if not np.isfinite(x).all():  # in its own dtype: no float32 copy of a bfloat16 tensor
                raise WeightsError(f"{directory}: {key} holds NaN or infinite values")
