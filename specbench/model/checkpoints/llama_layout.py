"""The Hugging Face layout of the Llama family on disk (LlamaForCausalLM, Qwen2ForCausalLM: Llama 2
and 3, TinyLlama, SmolLM2, Qwen2 and 2.5), and llama.py's params it maps to:

    model.embed_tokens.weight                          -> wte                      [V, e]
    model.layers.{i}.input_layernorm.weight            -> blocks.ln_1.weight[i]
    model.layers.{i}.self_attn.{q,k,v}_proj.weight     -> blocks.attn.c_attn.weight[i]  [e, (H + 2 KV) hd]
    model.layers.{i}.self_attn.{q,k,v}_proj.bias       -> blocks.attn.c_attn.bias[i]    (Qwen2 only)
    model.layers.{i}.self_attn.o_proj.weight           -> blocks.attn.c_proj.weight[i]  [H hd, e]
    model.layers.{i}.post_attention_layernorm.weight   -> blocks.ln_2.weight[i]
    model.layers.{i}.mlp.{gate,up}_proj.weight         -> blocks.mlp.c_fc.weight[i]     [e, 2 I]
    model.layers.{i}.mlp.down_proj.weight              -> blocks.mlp.c_proj.weight[i]   [I, e]
    model.norm.weight                                  -> ln_f.weight
    lm_head.weight                                     -> lm_head                  [V, e] (untied only)

torch's Linear stores [out, in]: every matrix is transposed once, at load, and q/k/v and gate/up
are fused (llama.py says why). The config is read from config.json in both of transformers'
spellings (rope_theta and rope_scaling, or v5's rope_parameters); what specbench's llama.py does
not compute (sliding windows, biases beyond Qwen2's, other activations, other rope scalings) is
refused by name rather than run wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specbench.errors import WeightsError
from specbench.model.checkpoints import hf_layout
from specbench.model.checkpoints.config_fields import Fields
from specbench.model.nets import mtp
from specbench.model.nets.families import LLAMA
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.rotary import RopeScaling

FAMILIES = tuple(LLAMA.names)  # HF model_type values this layout reads: the record's (nets/families.py)
LAYERS = "model.layers."  # the decoder layers' keys; DeepSeek's MTP layers go on numbering them
NORM_PARTS = ("weight",)  # an RMSNorm's tensors
QK_NORM = ("self_attn.q_norm", "self_attn.k_norm")  # Qwen3's, one gain of head_dim each
IGNORED = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")  # older checkpoints' buffer


def is_dir_of(directory: Path) -> bool:
    """Whether a model folder's config.json names a model_type of this family."""
    try:
        return json.loads((directory / hf_layout.CONFIG_FILE).read_text()).get("model_type") in FAMILIES
    except (OSError, ValueError, AttributeError):
        return False


def rope_of(f: Fields) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) from config.json: transformers 4's rope_theta and rope_scaling, or 5's
    rope_parameters. Both keys are read (a folder saved by transformers 5 with a model card's
    rope_scaling added holds the two); WeightsError naming a scaling llama.py does not compute, or
    two that disagree."""
    kind_of = lambda t: t.text("rope_type", None) or t.text("type", None) or "default"
    tables = [(key, f.table(key)) for key in ("rope_parameters", "rope_scaling")]
    scaled = [(key, t) for key, t in tables if kind_of(t) != "default"]
    if len(scaled) == 2 and kind_of(scaled[0][1]) != kind_of(scaled[1][1]):
        raise WeightsError(
            f"{f.where}: rope_parameters says {kind_of(scaled[0][1])!r} and rope_scaling "
            f"{kind_of(scaled[1][1])!r}: give one scaling"
        )
    params = scaled[0][1] if scaled else tables[0][1]
    given = [t for _, t in tables if t.raw("rope_theta", None) is not None]
    theta = f.number("rope_theta", None) or (given[0].number("rope_theta") if given else 10000.0)
    kind = kind_of(params)
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, RopeScaling("linear", params.number("factor"))
    if kind == "llama3":
        return theta, RopeScaling(
            "llama3",
            params.number("factor"),
            params.number("low_freq_factor"),
            params.number("high_freq_factor"),
            params.count("original_max_position_embeddings"),
        )
    raise WeightsError(
        f"{params.where}: rope scaling {kind!r}: specbench's Llama computes the default, linear and "
        "llama3 (not YaRN or dynamic NTK): leave it out to run at the trained context"
    )


def config_from_hf(d: dict, where: str = "config.json") -> LlamaConfig:
    """LlamaConfig from a Llama, Qwen2 or Qwen3 config.json; WeightsError naming a missing field, a
    value of the wrong type or range (config_fields), or one specbench does not compute."""
    f = Fields(d, where)
    family = f.text("model_type", None)
    if family not in FAMILIES:
        raise WeightsError(f"{where}: model_type {family!r}: this layout reads {', '.join(FAMILIES)}")
    refused = {
        "hidden_act": f.text("hidden_act", "silu") != "silu",
        "attention_bias": f.flag("attention_bias", False),
        "mlp_bias": f.flag("mlp_bias", False),
        "use_sliding_window": f.flag("use_sliding_window", False),
    }
    row = LLAMA.row(family)
    refused |= {field: d.get(field) is not None for field in row.refused}  # e.g. Mistral's sliding_window
    if any(refused.values()):
        field = next(k for k, v in refused.items() if v)
        raise WeightsError(f"{where} sets {field}={d[field]!r}, which specbench's Llama does not compute")
    theta, scaling = rope_of(f)
    heads, width = f.count("num_attention_heads"), f.count("hidden_size")
    head_dim = f.count("head_dim", None)
    kv_heads = f.count("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f.bad("num_key_value_heads", f"a divisor of num_attention_heads ({heads})")
    if head_dim is None and width % heads:
        raise f.bad("num_attention_heads", f"a divisor of hidden_size ({width}), or a head_dim given")
    return LlamaConfig(
        n_layer=f.count("num_hidden_layers"),
        n_head=heads,
        n_kv_head=kv_heads,
        n_embd=width,
        n_inner=f.count("intermediate_size"),
        n_vocab=f.count("vocab_size"),
        n_ctx=f.count("max_position_embeddings", 2048),
        rope_theta=theta,
        rope_scaling=scaling,
        rms_norm_eps=f.number("rms_norm_eps", 1e-6),
        qkv_bias=row.qkv_bias,
        tied=f.flag("tie_word_embeddings", False),
        family=family,
        qk_norm=row.qk_norm,
        explicit_head_dim=head_dim if head_dim not in (None, width // heads) else None,
        mask_token=f.count("pard_token", None, low=0),
    )


def config_to_hf(config: LlamaConfig) -> dict:
    """config.json for a config (transformers 4's spelling, which 5 reads too)."""
    s = config.rope_scaling
    scaling = None
    if s is not None:
        scaling = {"rope_type": s.kind, "factor": s.factor}
        if s.kind == "llama3":
            scaling |= {
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_context,
            }
    return (
        {
            "architectures": [LLAMA.row(config.family).hf_class],
            "model_type": config.family,
            "num_hidden_layers": config.n_layer,
            "num_attention_heads": config.n_head,
            "num_key_value_heads": config.n_kv_head,
            "hidden_size": config.n_embd,
            "intermediate_size": config.n_inner,
            "vocab_size": config.n_vocab,
            "max_position_embeddings": config.n_ctx,
            "rope_theta": config.rope_theta,
            "rope_scaling": scaling,
            "rms_norm_eps": config.rms_norm_eps,
            "tie_word_embeddings": config.tied,
            "hidden_act": "silu",
            "head_dim": config.head_dim,
        }
        | ({} if config.qkv_bias else {"attention_bias": False})
        | (  # Qwen2's biases are its model_type's
            {} if config.mask_token is None else {"pard_token": config.mask_token}
        )
    )


def layer_shapes(b: str, config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """The keys of one decoder layer under the prefix `b` ("model.layers.3"), with their shapes."""
    e, inner = config.n_embd, config.n_inner
    q, kv = config.n_head * config.head_dim, config.n_kv_head * config.head_dim
    shapes = {f"{b}.input_layernorm.weight": (e,), f"{b}.post_attention_layernorm.weight": (e,)}
    for name, n in (("q", q), ("k", kv), ("v", kv)):
        shapes[f"{b}.self_attn.{name}_proj.weight"] = (n, e)
        if config.qkv_bias:
            shapes[f"{b}.self_attn.{name}_proj.bias"] = (n,)
    shapes[f"{b}.self_attn.o_proj.weight"] = (e, q)
    if config.qk_norm:
        shapes |= {f"{b}.{name}.weight": (config.head_dim,) for name in QK_NORM}
    shapes |= {f"{b}.mlp.gate_proj.weight": (inner, e), f"{b}.mlp.up_proj.weight": (inner, e)}
    return shapes | {f"{b}.mlp.down_proj.weight": (e, inner)}


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every key a checkpoint of this config holds, with its shape (torch's [out, in])."""
    e, V = config.n_embd, config.n_vocab
    shapes = {"model.embed_tokens.weight": (V, e), "model.norm.weight": (e,)}
    if not config.tied:
        shapes["lm_head.weight"] = (V, e)
    for i in range(config.n_layer):
        shapes |= layer_shapes(f"model.layers.{i}", config)
    return shapes


def blocks_from_hf(tensors: dict[str, np.ndarray], prefixes: list[str], config: LlamaConfig, dtype) -> dict:
    """The decoder layers under `prefixes` (checked already) as llama.py's stacked `blocks`."""
    f32 = lambda key: np.asarray(tensors[key], np.float32)
    each = lambda f: jnp.asarray(np.stack([f(b) for b in prefixes]), dtype)
    fused = lambda b, names, part="weight": np.concatenate([f32(f"{b}.{n}.{part}") for n in names], 0)
    qkv = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    c_attn = {"weight": each(lambda b: fused(b, qkv).T)}
    if config.qkv_bias:
        c_attn["bias"] = each(lambda b: fused(b, qkv, "bias"))
    gain = lambda name: {"weight": each(lambda b: f32(f"{b}.{name}.weight"))}
    norms = {name.split(".")[1]: gain(name) for name in QK_NORM} if config.qk_norm else {}
    return {
        "ln_1": gain("input_layernorm"),
        "attn": {
            "c_attn": c_attn,
            "c_proj": {"weight": each(lambda b: f32(f"{b}.self_attn.o_proj.weight").T)},
            **norms,
        },
        "ln_2": gain("post_attention_layernorm"),
        "mlp": {
            "c_fc": {"weight": each(lambda b: fused(b, ("mlp.gate_proj", "mlp.up_proj")).T)},
            "c_proj": {"weight": each(lambda b: f32(f"{b}.mlp.down_proj.weight").T)},
        },
    }


def params_from_hf(
    tensors: dict[str, np.ndarray], config: LlamaConfig, dtype=jnp.float32, ignored=lambda key: False
) -> dict:
    """An HF state dict (numpy) -> llama.py's params, every key and shape checked: a missing,
    unexpected or misshapen tensor is a WeightsError naming it. A tied checkpoint's saved copy of
    the head is dropped (it reads the embedding), and so is every key `ignored` names (the MTP
    layers a folder ships beside the model: checkpoints/mtp_files.py)."""
    tensors = {k: v for k, v in tensors.items() if not IGNORED.match(k) and not ignored(k)}
    if config.tied:
        tensors.pop("lm_head.weight", None)
    hf_layout.check_tensors(tensors, expected_shapes(config), f"{config.family} checkpoint")
    f32 = lambda key: np.asarray(tensors[key], np.float32)
    params = {
        "wte": jnp.asarray(f32("model.embed_tokens.weight"), dtype),
        "blocks": blocks_from_hf(tensors, [f"{LAYERS}{i}" for i in range(config.n_layer)], config, dtype),
        "ln_f": {"weight": jnp.asarray(f32("model.norm.weight"), dtype)},
    }
    return params if config.tied else params | {"lm_head": jnp.asarray(f32("lm_head.weight"), dtype)}


def layer_to_hf(
    blocks: dict, i: int, b: str, config: LlamaConfig, np_dtype=np.float32
) -> dict[str, np.ndarray]:
    """Layer i of llama.py's stacked `blocks` as HF's tensors under the prefix `b`: blocks_from_hf
    undone, q/k/v and gate/up split again, every matrix back to torch's [out, in]."""
    as_np = lambda a: np.ascontiguousarray(np.asarray(a, np.float32).astype(np_dtype))
    q, kv = config.n_head * config.head_dim, config.n_kv_head * config.head_dim
    cuts = {"q_proj": (0, q), "k_proj": (q, q + kv), "v_proj": (q + kv, q + 2 * kv)}
    c_attn = blocks["attn"]["c_attn"]
    out = {
        f"{b}.input_layernorm.weight": as_np(blocks["ln_1"]["weight"][i]),
        f"{b}.post_attention_layernorm.weight": as_np(blocks["ln_2"]["weight"][i]),
        f"{b}.self_attn.o_proj.weight": as_np(blocks["attn"]["c_proj"]["weight"][i].T),
        f"{b}.mlp.down_proj.weight": as_np(blocks["mlp"]["c_proj"]["weight"][i].T),
    }
    for name, (lo, hi) in cuts.items():
        out[f"{b}.self_attn.{name}.weight"] = as_np(c_attn["weight"][i][:, lo:hi].T)
        if config.qkv_bias:
            out[f"{b}.self_attn.{name}.bias"] = as_np(c_attn["bias"][i][lo:hi])
    for name in QK_NORM if config.qk_norm else ():
        out[f"{b}.{name}.weight"] = as_np(blocks["attn"][name.split(".")[1]]["weight"][i])
    gate, up = np.split(np.asarray(blocks["mlp"]["c_fc"]["weight"][i]), 2, axis=1)
    return out | {f"{b}.mlp.gate_proj.weight": as_np(gate.T), f"{b}.mlp.up_proj.weight": as_np(up.T)}


def params_to_hf(params: dict, config: LlamaConfig, np_dtype=np.float32) -> dict[str, np.ndarray]:
    """llama.py's params (as loaded) -> an HF state dict (numpy): params_from_hf undone."""
    as_np = lambda a: np.ascontiguousarray(np.asarray(a, np.float32).astype(np_dtype))
    out = {
        "model.embed_tokens.weight": as_np(params["wte"]),
        "model.norm.weight": as_np(params["ln_f"]["weight"]),
    }
    for i in range(config.n_layer):
        out |= layer_to_hf(params["blocks"], i, f"model.layers.{i}", config, np_dtype)
    return out if config.tied else out | {"lm_head.weight": as_np(params["lm_head"])}


def save(directory: str | Path, params: dict, config: LlamaConfig) -> Path:
    """Write config.json and model.safetensors in the HF layout (transformers loads it)."""
    return hf_layout.write(directory, config_to_hf(config), params_to_hf(params, config))


def read_config(directory: Path) -> LlamaConfig:
    """A Llama-family folder's config.json as a LlamaConfig; WeightsError saying what is wrong."""
    try:
        d = json.loads((Path(directory) / hf_layout.CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise WeightsError(f"cannot read {Path(directory) / hf_layout.CONFIG_FILE}: {e}") from None
    return config_from_hf(d, str(Path(directory) / hf_layout.CONFIG_FILE))


def load_dir(directory: str | Path, dtype=jnp.float32) -> tuple[LlamaConfig, dict]:
    """Read a Llama-family folder (config.json, model.safetensors or an index and its shards)."""
    directory = Path(directory)
    config = read_config(directory)
    n_mtp = hf_layout.mtp_layers(directory)
    ignored = lambda key: mtp.is_mtp_key(key, config.n_layer, n_mtp, LAYERS)  # the head's (mtp_files.py)
    return config, params_from_hf(hf_layout.read_tensors(directory), config, dtype, ignored)
