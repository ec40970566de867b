"""Model registry, Hugging Face GPT-2 layout on disk, and downloads.

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

import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specbench.errors import WeightsError
from specbench.gpt2 import GPT2Config, init_params

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
IGNORED = re.compile(r"^(h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight)$")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    config: GPT2Config
    hf_repo: str | None = None  # downloadable from the Hub
    aliases: tuple[str, ...] = ()
    random_seed: int | None = None  # made on the fly with random weights: timing only
    random_from: str | None = None  # ...taking its first layers from this model (layer-skip draft)


def _gpt2(n_layer, n_head, n_embd):
    return GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=1024, n_vocab=50257)


REGISTRY: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        ModelSpec("124M", "GPT-2 small", _gpt2(12, 12, 768), "openai-community/gpt2", ("gpt2",)),
        ModelSpec(
            "355M", "GPT-2 medium", _gpt2(24, 16, 1024), "openai-community/gpt2-medium", ("gpt2-medium",)
        ),
        ModelSpec("774M", "GPT-2 large", _gpt2(36, 20, 1280), "openai-community/gpt2-large", ("gpt2-large",)),
        ModelSpec("1558M", "GPT-2 XL", _gpt2(48, 25, 1600), "openai-community/gpt2-xl", ("gpt2-xl",)),
        ModelSpec(
            "random-target",
            "random weights, 6x256 (timing only)",
            GPT2Config(n_layer=6, n_head=4, n_embd=256, n_ctx=1024),
            random_seed=0,
        ),
        ModelSpec(
            "random-124M",
            "random weights, GPT-2 124M's shape (timing only)",
            _gpt2(12, 12, 768),
            random_seed=0,
        ),
        ModelSpec(
            "random-draft",
            "first layer of random-target (timing only)",
            GPT2Config(n_layer=1, n_head=4, n_embd=256, n_ctx=1024),
            random_seed=0,
            random_from="random-target",
        ),
    ]
}
ALIASES = {alias: s.name for s in REGISTRY.values() for alias in s.aliases}


def weights_dir() -> Path:
    """gpt2_weights/: $SPECBENCH_WEIGHTS_DIR, else the checkout this package lives in, else ./"""
    if os.environ.get("SPECBENCH_WEIGHTS_DIR"):
        return Path(os.environ["SPECBENCH_WEIGHTS_DIR"])
    beside_package = Path(__file__).resolve().parent.parent / "gpt2_weights"
    return beside_package if beside_package.is_dir() else Path.cwd() / "gpt2_weights"


# ---------------------------------------------------------------------------------------------
# HF tensors <-> params pytree


def config_from_hf(d: dict) -> GPT2Config:
    try:
        return GPT2Config(
            n_layer=int(d["n_layer"]),
            n_head=int(d["n_head"]),
            n_embd=int(d["n_embd"]),
            n_ctx=int(d.get("n_positions", d.get("n_ctx"))),
            n_vocab=int(d["vocab_size"]),
            layer_norm_epsilon=float(d.get("layer_norm_epsilon", 1e-5)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsError(f"config.json is not a GPT-2 config ({e!r})") from None


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
    }


def expected_shapes(config: GPT2Config) -> dict[str, tuple[int, ...]]:
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
    shapes = {
        "wte.weight": (config.n_vocab, e),
        "wpe.weight": (config.n_ctx, e),
        "ln_f.weight": (e,),
        "ln_f.bias": (e,),
    }
    for i in range(config.n_layer):
        shapes.update({f"h.{i}.{k}": s for k, s in block.items()})
    return shapes


def params_from_hf(tensors: dict[str, np.ndarray], config: GPT2Config, dtype=jnp.float32) -> dict:
    """HF GPT-2 state dict (numpy) -> params pytree, checking every key and shape."""
    tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    tensors = {k: v for k, v in tensors.items() if not IGNORED.match(k)}
    shapes = expected_shapes(config)
    missing, unexpected = sorted(shapes.keys() - tensors.keys()), sorted(tensors.keys() - shapes.keys())
    if missing or unexpected:
        raise WeightsError(
            f"checkpoint keys do not match the config: missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    for k, shape in shapes.items():
        if tuple(tensors[k].shape) != shape:
            raise WeightsError(f"tensor {k} has shape {tuple(tensors[k].shape)}, expected {shape}")
    as_jax = lambda a: jnp.asarray(
        np.asarray(a, dtype=np.float32) if a.dtype != np.float32 else a, dtype=dtype
    )
    blocks: dict = {}
    for key in BLOCK_KEYS:
        stacked = np.stack([tensors[f"h.{i}.{key}"] for i in range(config.n_layer)])
        *path, leaf = key.split(".")
        node = blocks
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = as_jax(stacked)
    return {
        "wte": as_jax(tensors["wte.weight"]),
        "wpe": as_jax(tensors["wpe.weight"]),
        "blocks": blocks,
        "ln_f": {"weight": as_jax(tensors["ln_f.weight"]), "bias": as_jax(tensors["ln_f.bias"])},
    }


def params_to_hf(params: dict, np_dtype=np.float32) -> dict[str, np.ndarray]:
    """params pytree -> HF GPT-2 state dict (numpy, contiguous, in np_dtype)."""
    out = lambda a: np.ascontiguousarray(np.asarray(a, dtype=np.float32).astype(np_dtype))
    tensors = {
        "wte.weight": out(params["wte"]),
        "wpe.weight": out(params["wpe"]),
        "ln_f.weight": out(params["ln_f"]["weight"]),
        "ln_f.bias": out(params["ln_f"]["bias"]),
    }
    for key in BLOCK_KEYS:
        node = params["blocks"]
        for part in key.split("."):
            node = node[part]
        for i, layer in enumerate(np.asarray(node, dtype=np.float32)):
            tensors[f"h.{i}.{key}"] = out(layer)
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
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = params_to_hf(params, np_dtype)
    (directory / CONFIG_FILE).write_text(json.dumps(config_to_hf(config), indent=2) + "\n")
    if max_shard_bytes is None:
        save_file(tensors, str(directory / SAFETENSORS_FILE), metadata={"format": "pt"})
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
        weight_map.update({k: name for k in shard})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return directory


def is_model_dir(directory: Path) -> bool:
    return (directory / CONFIG_FILE).is_file() and (
        (directory / SAFETENSORS_FILE).is_file() or (directory / INDEX_FILE).is_file()
    )


def load_dir(directory: str | Path, dtype=jnp.float32) -> tuple[GPT2Config, dict]:
    """Read an HF GPT-2 directory: (config, params)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    directory = Path(directory)
    if not is_model_dir(directory):
        raise WeightsError(
            f"{directory} is not a model directory (needs {CONFIG_FILE} and {SAFETENSORS_FILE} or {INDEX_FILE})"
        )
    try:
        config = config_from_hf(json.loads((directory / CONFIG_FILE).read_text()))
    except (OSError, ValueError) as e:  # unreadable, or not JSON
        raise WeightsError(f"{directory / CONFIG_FILE} is not a valid config: {e}") from None
    except WeightsError as e:  # JSON, but not a GPT-2 config
        raise WeightsError(f"{directory / CONFIG_FILE}: {e}") from None
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
    return config, params_from_hf(tensors, config, dtype)


# ---------------------------------------------------------------------------------------------
# Registry


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    config: GPT2Config
    params: dict
    source: str  # a directory, or "random"


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
    raise WeightsError(f"unknown model {name!r}: use one of {known}, or a directory in the HF GPT-2 layout")


def local_path(spec: ModelSpec) -> Path:
    return weights_dir() / spec.name


def random_model_params(spec: ModelSpec, dtype=jnp.float32) -> dict:
    if spec.random_from:  # a layer-skip draft: the parent's embeddings and first layers
        parent = REGISTRY[spec.random_from]
        full = random_model_params(parent, dtype)
        first = lambda a: a[: spec.config.n_layer]
        return {**full, "blocks": jax.tree_util.tree_map(first, full["blocks"])}
    return init_params(spec.config, spec.random_seed, dtype)


def load_model(name: str, dtype=jnp.float32) -> Model:
    """Load by registry name, alias or directory path; clear WeightsError if it is not here."""
    target = resolve(name)
    if isinstance(target, Path):
        config, params = load_dir(target, dtype)
        return Model(target.name, config, params, str(target))
    spec = target
    if spec.random_seed is not None:
        return Model(spec.name, spec.config, random_model_params(spec, dtype), "random")
    if is_model_dir(local_path(spec)):
        config, params = load_dir(local_path(spec), dtype)
        return Model(spec.name, config, params, str(local_path(spec)))
    raise WeightsError(f"model {spec.name} is not downloaded: run `specbench models download {spec.name}`")


# ---------------------------------------------------------------------------------------------
# Downloads


def download(name: str, endpoint: str | None = None, progress: bool = True) -> Path:
    """Fetch an HF GPT-2 checkpoint into gpt2_weights/<name>/ with huggingface_hub.

    Files land in a hidden staging directory first (where huggingface_hub can resume them) and
    the model directory appears only once every file is complete and its size checked, so a
    failed download never leaves a half-written model behind. The endpoint is `endpoint`, else
    $HF_ENDPOINT, else the Hub.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    from huggingface_hub.utils import logging as hf_logging

    spec = resolve(name)
    if not isinstance(spec, ModelSpec) or spec.hf_repo is None:
        raise WeightsError(
            f"{name} is not downloadable: downloadable models are "
            + ", ".join(s.name for s in REGISTRY.values() if s.hf_repo)
        )
    final = local_path(spec)
    if is_model_dir(final):
        return final
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    where = endpoint or "the Hugging Face Hub"
    hf_logging.set_verbosity_error()  # our one error line instead of the library's retry chatter
    (enable_progress_bars if progress else disable_progress_bars)()
    try:  # fail fast when offline: one metadata request without retries
        get_hf_file_metadata(hf_hub_url(spec.hf_repo, CONFIG_FILE, endpoint=endpoint), endpoint=endpoint)
    except Exception as e:
        raise WeightsError(
            f"cannot download {spec.name} from {where} ({_root_cause(e)}); "
            "check the network, or set HF_ENDPOINT to a mirror"
        ) from None
    staging = weights_dir() / f".download-{spec.name}"
    staging.mkdir(parents=True, exist_ok=True)
    try:
        for filename in (CONFIG_FILE, SAFETENSORS_FILE):
            path = Path(hf_hub_download(spec.hf_repo, filename, local_dir=staging, endpoint=endpoint))
            meta = get_hf_file_metadata(
                hf_hub_url(spec.hf_repo, filename, endpoint=endpoint), endpoint=endpoint
            )
            size = path.stat().st_size
            if meta.size is not None and size != meta.size:
                path.unlink()
                raise WeightsError(
                    f"{filename} of {spec.name} is {size} bytes, expected {meta.size}; run the download again"
                )
            # the Hub's ETag of a large (LFS) file is the sha256 of its content: check it where given
            if meta.etag and re.fullmatch(r"[0-9a-f]{64}", meta.etag) and _sha256(path) != meta.etag:
                path.unlink()
                raise WeightsError(
                    f"{filename} of {spec.name} is corrupt (sha256 differs from the server's "
                    f"{meta.etag[:12]}…); run the download again"
                )
        load_dir(staging)  # every key and shape present
    except WeightsError:
        raise
    except Exception as e:  # connection lost mid-way, HTTP errors, disk full, ...
        raise WeightsError(
            f"cannot download {spec.name} from {where} ({_root_cause(e)}); run the same command "
            "again to resume"
        ) from None
    final.mkdir(parents=True, exist_ok=True)
    for filename in (CONFIG_FILE, SAFETENSORS_FILE):
        os.replace(staging / filename, final / filename)
    shutil.rmtree(staging, ignore_errors=True)
    return final


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _root_cause(e: BaseException) -> str:
    """The innermost exception's first line: 'Connection refused', not a wrapper's paragraph."""
    while e.__cause__ is not None or e.__context__ is not None:
        e = e.__cause__ or e.__context__
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:160]


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
                "layers_x_width": f"{spec.config.n_layer}x{spec.config.n_embd}",
            }
        )
    root = weights_dir()
    registered = {s.name for s in REGISTRY.values()}
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if d.name not in registered and not d.name.startswith(".") and is_model_dir(d):
            config = config_from_hf(json.loads((d / CONFIG_FILE).read_text()))
            bundled = d.name in BUNDLED_PAIR
            rows.append(
                {
                    "name": d.name,
                    "aliases": "",
                    "kind": "bundled (the default pair)" if bundled else "local",
                    "present": True,
                    "n_params": config.n_params,
                    "description": "trained by specbench/train.py" if bundled else "local directory",
                    "path": str(d),
                    "layers_x_width": f"{config.n_layer}x{config.n_embd}",
                }
            )
    return rows


BUNDLED_PAIR = ("tiny-draft", "tiny-target")  # trained by specbench/train.py, committed in gpt2_weights/
RANDOM_PAIR = ("random-draft", "random-target")


def default_pair() -> tuple[str, str]:
    """The bundled trained pair when it is in gpt2_weights/, else the random pair (timing only)."""
    if all(is_model_dir(weights_dir() / name) for name in BUNDLED_PAIR):
        return BUNDLED_PAIR
    return RANDOM_PAIR
