"""An EAGLE-3 head's folder as it is published (its step is nets/eagle3.py), in either of the two
layouts the engines read:

  * EAGLE's own (yuhuili/EAGLE3-*, AngelSlim, RedHatAI *.eagle3): config.json says
    `"architectures": ["LlamaForCausalLMEagle3"]` with a Llama config of one layer,
    `draft_vocab_size` and an optional `target_hidden_size`; the block's weights are `midlayer.*`
    (vLLM's `llama_eagle3.py`).
  * speculators' (`"speculators_model_type": "eagle3"`, vllm-project/speculators
    `models/eagle3/config.py`): the Llama config under `transformer_layer_config`, the block's
    weights `layers.0.*`, the target's taps in `eagle_aux_hidden_state_layer_ids`, and
    `norm_before_residual`, which vLLM takes as true where it is absent
    (`transformers_utils/configs/speculators/algos.py`).

Both have `fc.weight` [H, 3 H_t], `norm.weight`, `lm_head.weight` [V', H], `d2t` [V'] (target id =
draft id + d2t) and optionally `embed_tokens.weight`; `t2d` is ignored, as vLLM and SGLang do.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specbench.errors import WeightsError
from specbench.model.checkpoints import hf_layout, llama_layout
from specbench.model.checkpoints.config_fields import Fields
from specbench.model.nets.eagle3 import Eagle3Config

ARCHITECTURE = "LlamaForCausalLMEagle3"
BLOCK = {"eagle3": "midlayer", "speculators": "layers.0"}  # the block's prefix in each layout
QKV = ("q_proj", "k_proj", "v_proj")


def layout_of(meta: dict) -> str | None:
    """Which published layout a config.json is: "eagle3", "speculators", or None."""
    if meta.get("speculators_model_type") == "eagle3":
        return "speculators"
    return "eagle3" if ARCHITECTURE in (meta.get("architectures") or []) else None


def read_meta(directory: Path) -> dict:
    """A folder's config.json as a dict, or {} where it has none that reads."""
    try:
        meta = json.loads((Path(directory) / hf_layout.CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def config_from(meta: dict, where: str = "config.json") -> Eagle3Config:
    """The head's config from its config.json (either layout); WeightsError naming the key that is
    wrong. The taps are read in layer order, as vLLM and SGLang collect them (inside the target's
    layer loop), whatever order the config lists them in; a layer named twice is refused (the
    engines would read it once)."""
    layout = layout_of(meta)
    f = Fields(meta, where)
    block = f.table("transformer_layer_config") if layout == "speculators" else f
    block_dict = {"model_type": "llama", **block.d}
    layers = block.count("num_hidden_layers", 1)  # layer 0 reads 2H; layers 1.. are Llama's own
    llama = llama_layout.config_from_hf({**block_dict, "num_hidden_layers": layers}, block.where)
    taps = f.counts("eagle_aux_hidden_state_layer_ids")
    if len(set(taps)) < len(taps):
        raise f.bad("eagle_aux_hidden_state_layer_ids", "distinct layers (an engine reads a layer once)")
    fields = {f_.name: getattr(llama, f_.name) for f_ in dataclasses.fields(llama)}
    return Eagle3Config(
        **fields,
        taps=tuple(sorted(taps)),
        target_width=f.count("target_hidden_size", 0),
        draft_vocab=f.count("draft_vocab_size", 0),
        norm_before_residual=f.flag("norm_before_residual", layout == "speculators"),
    )


def check_d2t(d2t: np.ndarray, config: Eagle3Config) -> None:
    """d2t (target id = draft id + d2t[draft id]) must send the V' draft ids to V' distinct target
    ids in [0, V): integers, as the engines' tables are; WeightsError saying what is wrong."""
    if not np.issubdtype(d2t.dtype, np.integer):
        raise WeightsError(f"d2t holds {d2t.dtype} values; it is a table of integer offsets")
    ids = np.arange(d2t.shape[0], dtype=np.int64) + d2t.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= config.n_vocab):
        bad = int(np.flatnonzero((ids < 0) | (ids >= config.n_vocab))[0])
        raise WeightsError(
            f"d2t sends draft id {bad} to token {int(ids[bad])}, outside the vocabulary of {config.n_vocab:,}"
        )
    if np.unique(ids).size < ids.size:
        raise WeightsError(
            f"d2t sends {ids.size:,} draft ids to only {np.unique(ids).size:,} distinct tokens; each draft "
            "id is one token of the target's"
        )


def check_tensors(tensors: dict[str, np.ndarray], expected: dict, config: Eagle3Config) -> None:
    """Every expected tensor there with its shape and finite; d2t a map into the vocabulary
    (check_d2t), and present wherever lm_head covers fewer tokens than the target has."""
    for key, shape in expected.items():
        if key not in tensors or tuple(tensors[key].shape) != shape:
            got = "missing" if key not in tensors else f"shaped {tuple(tensors[key].shape)}"
            raise WeightsError(f"an EAGLE-3 head's {key} is {got}, expected {shape}")
        if key != "d2t" and not np.isfinite(tensors[key]).all():
            raise WeightsError(f"an EAGLE-3 head's {key} holds NaN or infinite values")
    V = expected["lm_head.weight"][0]
    if "d2t" in tensors:
        check_d2t(np.asarray(tensors["d2t"]), config)
    elif V != config.n_vocab:
        raise WeightsError(
            f"an EAGLE-3 head's lm_head covers {V:,} tokens of the target's {config.n_vocab:,} but it has "
            "no d2t to say which"
        )


def params_from(tensors: dict[str, np.ndarray], config: Eagle3Config, layout: str, dtype) -> dict:
    """The published tensors as eagle3.py's params; WeightsError naming a missing or misshapen one."""
    tensors = {k.removeprefix("model."): v for k, v in tensors.items()}
    b, H = BLOCK[layout], config.n_embd
    V, inner = config.draft_vocab or config.n_vocab, config.n_inner
    expected = {
        "fc.weight": (H, (config.target_width or H) * (len(config.taps) or 3)),
        f"{b}.input_layernorm.weight": (H,),
        f"{b}.hidden_norm.weight": (H,),
        f"{b}.post_attention_layernorm.weight": (H,),
        f"{b}.self_attn.q_proj.weight": (config.attn_width, 2 * H),
        f"{b}.self_attn.k_proj.weight": (config.kv_width, 2 * H),
        f"{b}.self_attn.v_proj.weight": (config.kv_width, 2 * H),
        f"{b}.self_attn.o_proj.weight": (H, config.attn_width),
        f"{b}.mlp.gate_proj.weight": (inner, H),
        f"{b}.mlp.up_proj.weight": (inner, H),
        f"{b}.mlp.down_proj.weight": (H, inner),
        "norm.weight": (H,),
        "lm_head.weight": (V, H),
    }
    later = [f"layers.{i}" for i in range(1, config.n_layer)]  # vLLM's layers past the first
    for prefix in later:
        expected |= llama_layout.layer_shapes(prefix, config)
    optional = {"embed_tokens.weight": (config.n_vocab, H), "d2t": (V,)}
    check_tensors(tensors, expected | {k: s for k, s in optional.items() if k in tensors}, config)
    f32 = lambda key: np.asarray(tensors[key], np.float32)
    one = lambda a: jnp.asarray(a[None], dtype)  # the block's stacked layer axis
    fused = lambda names: np.concatenate([f32(f"{b}.{n}.weight") for n in names], 0).T
    params = {
        "fc": {"weight": jnp.asarray(f32("fc.weight").T, dtype)},
        "blocks": {
            "ln_1": {"weight": one(f32(f"{b}.input_layernorm.weight"))},
            "hidden_norm": {"weight": one(f32(f"{b}.hidden_norm.weight"))},
            "attn": {
                "c_attn": {"weight": one(fused([f"self_attn.{n}" for n in QKV]))},
                "c_proj": {"weight": one(f32(f"{b}.self_attn.o_proj.weight").T)},
            },
            "ln_2": {"weight": one(f32(f"{b}.post_attention_layernorm.weight"))},
            "mlp": {
                "c_fc": {"weight": one(fused(["mlp.gate_proj", "mlp.up_proj"]))},
                "c_proj": {"weight": one(f32(f"{b}.mlp.down_proj.weight").T)},
            },
        },
        "ln_f": {"weight": jnp.asarray(f32("norm.weight"), dtype)},
        "lm_head": jnp.asarray(f32("lm_head.weight"), dtype),
    }
    if later:
        params["later"] = llama_layout.blocks_from_hf(tensors, later, config, dtype)
    if "d2t" in tensors:
        params["d2t"] = jnp.asarray(np.asarray(tensors["d2t"]), jnp.int32)
    if "embed_tokens.weight" in tensors:
        params["wte"] = jnp.asarray(f32("embed_tokens.weight"), dtype)
    return params


def load(directory: Path, dtype=jnp.float32) -> tuple[Eagle3Config, dict, str]:
    """(config, params, the target it names or "") of a published EAGLE-3 folder."""
    directory = Path(directory)
    meta = read_meta(directory)
    config = config_from(meta, str(directory / hf_layout.CONFIG_FILE))
    return config, params_from(read_tensors(directory), config, layout_of(meta), dtype), ""


def read_tensors(directory: Path) -> dict[str, np.ndarray]:
    """The folder's tensors: its safetensors, or EAGLE's own pytorch_model.bin (yuhuili's heads are
    published so), read with torch where it is installed (`pip install -e ".[peers]"`)."""
    bin_file = directory / "pytorch_model.bin"
    if hf_layout.is_model_dir(directory) or not bin_file.is_file():
        return hf_layout.read_tensors(directory)
    try:
        import torch
    except ImportError:
        raise WeightsError(f"{bin_file} is a torch file: install torch to read it") from None
    try:
        state = torch.load(bin_file, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises RuntimeError, EOFError, UnpicklingError, ... on a bad file
        raise WeightsError(f"{bin_file} cannot be read ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"{bin_file} is not a state dict of tensors")
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()}


def save(directory: Path, params: dict, config: Eagle3Config, layout: str = "eagle3") -> Path:
    """Write a head in a published layout (what the tests read back as a stranger's folder)."""
    as_np = lambda a: np.ascontiguousarray(np.asarray(a, np.float32))
    blocks, b = params["blocks"], BLOCK[layout]
    q, kv = config.attn_width, config.kv_width
    c_attn = as_np(blocks["attn"]["c_attn"]["weight"][0]).T  # [q + 2 kv, 2H]
    gate, up = np.split(as_np(blocks["mlp"]["c_fc"]["weight"][0]), 2, axis=1)
    tensors = {
        "fc.weight": as_np(params["fc"]["weight"]).T,
        f"{b}.input_layernorm.weight": as_np(blocks["ln_1"]["weight"][0]),
        f"{b}.hidden_norm.weight": as_np(blocks["hidden_norm"]["weight"][0]),
        f"{b}.post_attention_layernorm.weight": as_np(blocks["ln_2"]["weight"][0]),
        f"{b}.self_attn.q_proj.weight": c_attn[:q],
        f"{b}.self_attn.k_proj.weight": c_attn[q : q + kv],
        f"{b}.self_attn.v_proj.weight": c_attn[q + kv :],
        f"{b}.self_attn.o_proj.weight": as_np(blocks["attn"]["c_proj"]["weight"][0]).T,
        f"{b}.mlp.gate_proj.weight": gate.T,
        f"{b}.mlp.up_proj.weight": up.T,
        f"{b}.mlp.down_proj.weight": as_np(blocks["mlp"]["c_proj"]["weight"][0]).T,
        "norm.weight": as_np(params["ln_f"]["weight"]),
        "lm_head.weight": as_np(params["lm_head"]),
    }
    if "d2t" in params:
        tensors["d2t"] = np.asarray(params["d2t"], np.int64)
    if "wte" in params:
        tensors["embed_tokens.weight"] = as_np(params["wte"])
    for i in range(1, config.n_layer):
        tensors |= llama_layout.layer_to_hf(params["later"], i - 1, f"layers.{i}", config)
    hf_config = llama_layout.config_to_hf(config)
    extra = {
        "draft_vocab_size": config.draft_vocab or config.n_vocab,
        "norm_before_residual": config.norm_before_residual,
    } | ({"target_hidden_size": config.target_width} if config.target_width else {})
    if layout == "speculators":
        meta = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"]}
        meta |= {"transformer_layer_config": hf_config, "eagle_aux_hidden_state_layer_ids": list(config.taps)}
    else:
        meta = hf_config | {"architectures": [ARCHITECTURE]}
    return hf_layout.write(directory, meta | extra, {k: np.ascontiguousarray(v) for k, v in tensors.items()})
