"""What one decode step must move and compute: the bytes it reads (every weight once, and the whole
K/V cache) and the FLOPs of its products, for each network (GPT-2, the Llama family, a T5's
decoder), and on a mesh one device's share. The roofline (roofline.py) sets them against the
device's two roofs; dry runs and `predict` read them too.
"""

from __future__ import annotations

from specbench.measure.timing import SOURCE_TOKENS
from specbench.model.nets import mesh, network
from specbench.model.nets.families import family_of
from specbench.model.nets.layouts import param_bytes, resident_bytes
from specbench.model.nets.network import Model


def step_bytes(model: Model, max_len: int) -> int:
    """Bytes one step must read: every weight once, plus the whole K/V cache (read under the mask).
    For an encoder-decoder, the decoder's step: its decoder's weights and head (the encoder ran
    once, before), its cache, and the source's cross-attention keys and values (a source of
    timing.SOURCE_TOKENS, as the step timers encode)."""
    c, ways = model.config, split_ways(model)
    itemsize = network.dtype_of(model.params, c).itemsize
    weights = mesh.per_device_bytes if ways > 1 else param_bytes  # on a mesh, one device's shards
    if family_of(c).encoder_decoder:
        head = model.params.get("lm_head", model.params["shared"])  # an untied head, else the embedding
        cache = 2 * c.n_decoder_layer * (max_len + SOURCE_TOKENS) * c.inner * itemsize
        return weights(model.params["decoder"]) + head.size * itemsize + cache // ways
    cache = 2 * c.n_layer * max_len * network.kv_width(c) * itemsize
    return weights(model.params) + cache // ways  # on a mesh, its heads of the cache


def split_ways(model: Model) -> int:
    """Over how many devices the model's heads are split: its mesh's tp, else 1."""
    on = mesh.split_over(model.params)
    return 1 if on is None else on.shape[mesh.AXIS]


def step_flops(model: Model, n_tokens: int, max_len: int) -> float:
    """Floating-point operations of one step over n_tokens: two per multiply-add, in every block
    matrix (config.layer_matrix_params: GPT-2's 12 n_embd², a Llama's q/k/v/o and SwiGLU's three),
    the output head (n_vocab n_embd) and the attention over a cache of max_len (scores and values,
    2 max_len n_embd a layer over every query head), for each token. A T5 decoder block:
    self-attention's four matrices and cross-attention's q and o (its k and v are the source's,
    computed once), the feed-forward's two or three, attention over max_len and the source."""
    # on a mesh, one device's share: its columns or rows of every block matrix, its heads'
    # attention; the head is replicated, every device computes it whole
    c, split = model.config, split_ways(model)
    if family_of(c).encoder_decoder:
        matrices = 6 * c.d_model * c.inner + (3 if c.gated else 2) * c.d_model * c.d_ff
        attention = 2 * (max_len + SOURCE_TOKENS) * c.inner
        per_token = c.n_decoder_layer * (matrices + attention) // split + c.n_vocab * c.d_model
    else:
        per_token = (
            c.n_layer * (c.layer_matrix_params + 2 * max_len * c.attn_width) // split + c.n_vocab * c.n_embd
        )
    return 2.0 * n_tokens * per_token


def layout_extra_bytes(model: Model) -> int:
    """Memory the weights' layout costs beyond the weights themselves: decode_layout's copy of
    every block matrix, or kernel_layout's packed copies of every block matrix and the output head."""
    return resident_bytes(model.params) - param_bytes(model.params)
