"""int8 weights (weight_format.WeightFormat.INT8): llama.cpp's Q8_0 (kernels/q8_0.py), which
specbench's CPU kernel reads.

An int8 model is quantized at load, as llama.cpp's converter quantizes a checkpoint to Q8_0: every
block matrix and the output head (the embedding, where it is tied) in blocks of 32 along the
dimension the product sums over; norms, biases and GPT-2's position embedding stay float32, and so
do activations and the cache. Its arrays keep the dequantized float32 weights, which its
embedding lookup, a long prefill's XLA product and the pure-JAX path read, and beside each matrix
its Q8_0 codes (`layouts.Q8_KEY`, the head's `layouts.HEAD_Q8`), which the kernel reads: the two
paths compute the same quantized model, so SD stays exact with respect to it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specbench.model.kernels import q8_0
from specbench.model.nets import layouts
from specbench.weight_format import WeightFormat


def problem(arrays: dict) -> str | None:
    """Why these weights cannot be kept in Q8_0 (a product summing over a width that is not a
    multiple of 32, as in llama.cpp), or None."""
    widths = {arrays["blocks"][part][name]["weight"].shape[-2] for part, name in layouts.MATRICES}
    widths.add(layouts.unembedding(arrays).shape[-1])
    bad = sorted(n for n in widths if not q8_0.quantizable(n))
    return (
        f"Q8_0 needs every product's width to be a multiple of {q8_0.BLOCK} (this model has {bad})"
        if bad
        else None
    )


def _round_trip(w) -> tuple[jnp.ndarray, q8_0.Q8]:
    """w [..., n_in, n_out] as Q8_0: (its dequantized float32 values, its codes as device arrays)."""
    q = q8_0.quantize(np.asarray(w, np.float32))
    return jnp.asarray(q8_0.dequantize(q)), q8_0.Q8(jnp.asarray(q.codes), jnp.asarray(q.scales))


def quantize(params) -> dict:
    """A GPT-2's or Llama's weights as loaded (HF layout, float32) in Q8_0 (the module's text): the
    same dict with every block matrix's and the head's values replaced by their Q8_0 round trip and
    their codes beside them. ValueError where problem() says why not."""
    arrays = layouts.as_loaded(params)
    if why := problem(arrays):
        raise ValueError(why)
    blocks = {part: dict(v) for part, v in arrays["blocks"].items()}
    for part, name in layouts.MATRICES:
        weight, codes = _round_trip(blocks[part][name]["weight"])
        blocks[part][name] = {**blocks[part][name], "weight": weight, layouts.Q8_KEY: codes}
    out = {**arrays, "blocks": blocks}
    head_key = "lm_head" if "lm_head" in arrays else "wte"
    head_t, out[layouts.HEAD_Q8] = _round_trip(arrays[head_key].T)  # the head's product: [n_embd, V]
    out[head_key] = head_t.T
    if head_key == "lm_head":  # an untied embedding: llama.cpp keeps token_embd in Q8_0 too
        out["wte"] = _round_trip(arrays["wte"].T)[0].T
    return out


def format_of(params) -> str:
    """What a row records of a model's weights: "q8_0" for quantized ones, else their dtype."""
    arrays = layouts.as_weights(params).arrays
    if layouts.HEAD_Q8 in arrays:
        return WeightFormat.INT8.recorded
    return str(jnp.dtype(jax.tree_util.tree_leaves(arrays)[0].dtype))  # a T5's too, which has no wte
