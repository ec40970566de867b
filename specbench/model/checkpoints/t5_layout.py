"""The Hugging Face T5 layout on disk (t5-small, flan-t5-*), and the params pytree (t5.py) it maps
to: a directory with `config.json` and safetensors, as hf_layout.py reads GPT-2's.

    shared.weight                                            -> shared          [V, d]
    {s}.block.{i}.layer.0.SelfAttention.{q,k,v,o}.weight     -> {s}.attn.*[i]   transposed to [in, out]
    {s}.block.0.layer.0.SelfAttention.relative_attention_bias.weight -> {s}.bias [buckets, H]
    {s}.block.{i}.layer.0.layer_norm.weight                  -> {s}.ln_attn[i]
    decoder.block.{i}.layer.1.EncDecAttention.{q,k,v,o}.weight -> decoder.cross.*[i]
    decoder.block.{i}.layer.1.layer_norm.weight              -> decoder.ln_cross[i]
    {s}.block.{i}.layer.{1 or 2}.DenseReluDense.{wi | wi_0, wi_1, wo}.weight -> {s}.ff.*[i]
    {s}.block.{i}.layer.{1 or 2}.layer_norm.weight           -> {s}.ln_ff[i]
    {s}.final_layer_norm.weight                              -> {s}.ln_final
    lm_head.weight                                           -> lm_head [d, V]   (an untied head only)

with s = encoder or decoder. torch's Linear stores [out, in]; every matrix is transposed once, at
load. Ignored: the stacks' copies of the embedding (`{s}.embed_tokens.weight`), and a tied
model's lm_head, which is shared.
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
from specbench.model.nets.t5 import T5Config

IGNORED = re.compile(r"^(encoder|decoder)\.embed_tokens\.weight$")


def config_from_hf(d: dict, where: str = "config.json") -> T5Config:
    """T5Config from an HF T5 config.json's fields; WeightsError naming a missing one, one of the wrong
    type or range (config_fields), or one specbench's T5 does not compute."""
    f = Fields(d, where)
    proj = f.text("feed_forward_proj", "relu")
    if proj not in ("relu", "gated-gelu"):
        raise WeightsError(f"{where}: feed_forward_proj {proj!r}: specbench's T5 has relu and gated-gelu")
    # transformers 5 writes scale_decoder_outputs; before, a tied head (original T5) meant scaling
    tied = d.get("tie_word_embeddings", True) is not False
    return T5Config(
        n_vocab=f.count("vocab_size"),
        d_model=f.count("d_model"),
        d_kv=f.count("d_kv"),
        d_ff=f.count("d_ff"),
        n_layer=f.count("num_layers"),
        n_decoder_layer=f.count("num_decoder_layers", None) or f.count("num_layers"),
        n_head=f.count("num_heads"),
        num_buckets=f.count("relative_attention_num_buckets", 32),
        max_distance=f.count("relative_attention_max_distance", 128),
        gated=proj == "gated-gelu",
        scale_decoder_outputs=f.flag("scale_decoder_outputs", tied),
        eps=f.number("layer_norm_epsilon", 1e-6),
        decoder_start=f.count("decoder_start_token_id", 0, low=0),
    )


def expected_shapes(config: T5Config) -> dict[str, tuple[int, ...]]:
    """Every key a checkpoint of this config must hold, with its shape (torch's [out, in]); beside
    them it may hold lm_head.weight [V, d] (an untied head: v1.1 and Flan as older transformers
    saved them)."""
    d, inner, ff, V = config.d_model, config.inner, config.d_ff, config.n_vocab
    attention = {"q": (inner, d), "k": (inner, d), "v": (inner, d), "o": (d, inner)}
    wi = {"wi_0": (ff, d), "wi_1": (ff, d)} if config.gated else {"wi": (ff, d)}
    shapes = {"shared.weight": (V, d)}
    for stack, n in (("encoder", config.n_layer), ("decoder", config.n_decoder_layer)):
        ff_layer = 2 if stack == "decoder" else 1
        shapes[f"{stack}.final_layer_norm.weight"] = (d,)
        bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        shapes[bias] = (config.num_buckets, config.n_head)
        for i in range(n):
            b = f"{stack}.block.{i}.layer"
            shapes |= {f"{b}.0.SelfAttention.{m}.weight": s for m, s in attention.items()}
            shapes[f"{b}.0.layer_norm.weight"] = (d,)
            if stack == "decoder":
                shapes |= {f"{b}.1.EncDecAttention.{m}.weight": s for m, s in attention.items()}
                shapes[f"{b}.1.layer_norm.weight"] = (d,)
            shapes |= {f"{b}.{ff_layer}.DenseReluDense.{m}.weight": s for m, s in wi.items()}
            shapes[f"{b}.{ff_layer}.DenseReluDense.wo.weight"] = (d, ff)
            shapes[f"{b}.{ff_layer}.layer_norm.weight"] = (d,)
    return shapes


def params_from_hf(tensors: dict[str, np.ndarray], config: T5Config, dtype=jnp.float32) -> dict:
    """HF T5 state dict (numpy) -> t5.py's params, checking every key and shape: a missing,
    unexpected or misshapen tensor is a WeightsError naming it."""
    shapes = expected_shapes(config)
    tensors = {k: v for k, v in tensors.items() if not IGNORED.match(k)}
    untied = "lm_head.weight" in tensors and not np.array_equal(
        tensors["lm_head.weight"], tensors.get("shared.weight")
    )
    if untied:
        shapes["lm_head.weight"] = (config.n_vocab, config.d_model)
    else:  # a tied head (transformers 5 ties every T5's) reads shared; a saved copy is dropped
        tensors.pop("lm_head.weight", None)
    hf_layout.check_tensors(tensors, shapes, "T5 checkpoint")
    as_jax = lambda a: jnp.asarray(np.asarray(a, np.float32), dtype)
    matrix = lambda key: np.asarray(tensors[key], np.float32).T  # torch [out, in] -> [in, out]

    def stack(name: str, n: int) -> dict:
        ff_layer = 2 if name == "decoder" else 1
        each = lambda fmt, f: as_jax(np.stack([f(fmt.format(b=f"{name}.block.{i}.layer")) for i in range(n)]))
        attention = lambda part: {m: each(f"{{b}}.{part}.{m}.weight", matrix) for m in "qkvo"}
        wi = ("wi_0", "wi_1") if config.gated else ("wi",)
        out = {
            "attn": attention("0.SelfAttention"),
            "ln_attn": each("{b}.0.layer_norm.weight", lambda k: tensors[k]),
            "ff": {m: each(f"{{b}}.{ff_layer}.DenseReluDense.{m}.weight", matrix) for m in (*wi, "wo")},
            "ln_ff": each(f"{{b}}.{ff_layer}.layer_norm.weight", lambda k: tensors[k]),
            "bias": as_jax(tensors[f"{name}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]),
            "ln_final": as_jax(tensors[f"{name}.final_layer_norm.weight"]),
        }
        if name == "decoder":
            out |= {
                "cross": attention("1.EncDecAttention"),
                "ln_cross": each("{b}.1.layer_norm.weight", lambda k: tensors[k]),
            }
        return out

    params = {
        "shared": as_jax(tensors["shared.weight"]),
        "encoder": stack("encoder", config.n_layer),
        "decoder": stack("decoder", config.n_decoder_layer),
    }
    return params | {"lm_head": as_jax(matrix("lm_head.weight"))} if untied else params


def is_dir_of(directory: Path) -> bool:
    """Whether a model directory holds a T5 (its config.json's model_type), not a GPT-2."""
    try:
        return json.loads((directory / hf_layout.CONFIG_FILE).read_text()).get("model_type") == "t5"
    except (OSError, ValueError, AttributeError):
        return False


def load_dir(directory: str | Path, dtype=jnp.float32) -> tuple[T5Config, dict]:
    """Read an HF T5 directory: (config, params)."""
    directory = Path(directory)
    if not hf_layout.is_model_dir(directory):
        raise WeightsError(
            f"{directory} is not a model directory (needs {hf_layout.CONFIG_FILE} and "
            f"{hf_layout.SAFETENSORS_FILE} or {hf_layout.INDEX_FILE})"
        )
    path = directory / hf_layout.CONFIG_FILE
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise WeightsError(f"cannot read {path}: {e}") from None
    config = config_from_hf(d, str(path))
    return config, params_from_hf(hf_layout.read_tensors(directory), config, dtype)


def config_to_hf(config: T5Config) -> dict:
    """An HF T5 config.json's fields for a T5Config (config_from_hf's inverse)."""
    return {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "vocab_size": config.n_vocab,
        "d_model": config.d_model,
        "d_kv": config.d_kv,
        "d_ff": config.d_ff,
        "num_layers": config.n_layer,
        "num_decoder_layers": config.n_decoder_layer,
        "num_heads": config.n_head,
        "relative_attention_num_buckets": config.num_buckets,
        "relative_attention_max_distance": config.max_distance,
        "feed_forward_proj": "gated-gelu" if config.gated else "relu",
        "tie_word_embeddings": config.scale_decoder_outputs,
        "scale_decoder_outputs": config.scale_decoder_outputs,
        "layer_norm_epsilon": config.eps,
        "decoder_start_token_id": config.decoder_start,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "is_encoder_decoder": True,
    }


def params_to_hf(params: dict, config: T5Config, np_dtype=np.float32) -> dict[str, np.ndarray]:
    """t5.py's params -> an HF T5 state dict (numpy, contiguous, in np_dtype): params_from_hf's
    inverse, matrices transposed back to torch's [out, in]."""
    out = lambda a: np.ascontiguousarray(np.asarray(a, np.float32).astype(np_dtype))
    tensors = {"shared.weight": out(params["shared"])}
    for name, n in (("encoder", config.n_layer), ("decoder", config.n_decoder_layer)):
        s, ff_layer = params[name], 2 if name == "decoder" else 1
        tensors[f"{name}.final_layer_norm.weight"] = out(s["ln_final"])
        tensors[f"{name}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = out(s["bias"])
        for i in range(n):
            b = f"{name}.block.{i}.layer"
            parts = [("0.SelfAttention", s["attn"]), ("0.layer_norm", s["ln_attn"])]
            if name == "decoder":
                parts += [("1.EncDecAttention", s["cross"]), ("1.layer_norm", s["ln_cross"])]
            parts += [(f"{ff_layer}.DenseReluDense", s["ff"]), (f"{ff_layer}.layer_norm", s["ln_ff"])]
            for prefix, p in parts:
                if isinstance(p, dict):
                    tensors |= {f"{b}.{prefix}.{m}.weight": out(w[i]).T.copy() for m, w in p.items()}
                else:
                    tensors[f"{b}.{prefix}.weight"] = out(p[i])
    if "lm_head" in params:
        tensors["lm_head.weight"] = out(params["lm_head"]).T.copy()
    return tensors


def save(directory: str | Path, params: dict, config: T5Config, np_dtype=np.float32) -> Path:
    """Write config.json and model.safetensors in Hugging Face's T5 layout (load_dir reads them)."""
    return hf_layout.write(directory, config_to_hf(config), params_to_hf(params, config, np_dtype))
