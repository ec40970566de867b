"""The layouts the same GPT-2 weights are kept in, each for the products that read them.

    hf      as loaded (Hugging Face's Conv1D orientation, layers stacked): the plain path, and
            the tests' oracle (gpt2.gpt2)
    decode  hf plus a [n_out, n_in] copy of every block matrix for XLA's 1-token products
    kernel  hf plus a packed copy of every block matrix and of the output head (wte.T) for the
            CPU kernel (cpu.pack)
    pallas  hf as it is, marked for the fused Pallas kernels of a GPU step (pallas.py), which
            read the stacked weights in place: no second copy

gpt2.linear and gpt2.head read whichever is there; what each costs in memory is in
docs/performance.md, and `specbench roofline` prints it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specbench.model.kernels import cpu

MATRICES = (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj"))


FUSED_VECTOR_BYTES = 16 * 1024
"""XLA:CPU computes a matrix-vector product in one pass over an [n_out, n_in] matrix only while
the vector is smaller than this (its CPU fusion pass's threshold); a longer one first copies the
matrix transposed, every call (docs/performance.md)."""


def decode_pieces(n_in: int, itemsize: int) -> int:
    """How many pieces decode_layout cuts a matrix's n_in into: the fewest that divide n_in with
    each piece's vector under FUSED_VECTOR_BYTES (1 for every n_in up to 4,095 in float32)."""
    return next(n for n in range(1, n_in + 1) if n_in % n == 0 and n_in // n * itemsize < FUSED_VECTOR_BYTES)


def decode_layout(params):
    """The same weights with a second copy of every block matrix for 1-token steps (`weight_t`):
    stored [n_out, n_in], cut along n_in into decode_pieces() pieces, [n_layer, n_pieces, n_out,
    n_in / n_pieces]; gpt2.linear reads it. Made once at load, on the CPU only (other devices keep
    params unchanged). It costs the block matrices' size again in memory (docs/performance.md)."""
    attn = params["blocks"]["attn"]["c_attn"]
    if jax.devices()[0].platform != "cpu" or "weight_t" in attn:
        return params
    blocks = jax.tree_util.tree_map(lambda x: x, params["blocks"])  # a copy of the dict structure
    for part, name in MATRICES:
        layer = blocks[part][name]
        n_layer, n_in, n_out = layer["weight"].shape
        n = decode_pieces(n_in, layer["weight"].dtype.itemsize)
        pieces = layer["weight"].reshape(n_layer, n, n_in // n, n_out)
        layer["weight_t"] = jnp.transpose(pieces, (0, 1, 3, 2))  # [n_layer, n, n_out, n_in / n]
    return {**params, "blocks": blocks}


def kernel_layout(params):
    """The same weights for the CPU kernel (kernels/cpu.py): beside every block matrix (stacked, HF
    orientation, which a prefill's XLA products read) its copy packed in panels (`packed`, every
    layer's stacked: [n_layer, n_panels, n_in, WIDTH]), and the output head packed from wte.T
    (head.packed, [n_panels, n_embd, WIDTH]). Made once at load. It costs the block matrices' and
    wte's size again in memory, plus each matrix's padding to whole panels (docs/performance.md)."""
    if "head" in params:
        return params
    blocks = jax.tree_util.tree_map(lambda x: x, params["blocks"])  # a copy of the dict structure
    for part, name in MATRICES:
        blocks[part][name]["packed"] = cpu.pack(blocks[part][name]["weight"])
    return {**params, "blocks": blocks, "head": {"packed": cpu.pack(params["wte"].T)}}


def pallas_layout(params):
    """The same weights marked for the fused Pallas kernels (gpt2.step reads the mark, an empty
    node that jit sees as part of the structure, so one program is compiled per layout)."""
    return {**params, "pallas": {}}


def for_decoding(params, kernel: str):
    """The layout decoding reads with `kernel` (cpu.choose): kernel_layout for "cpu",
    pallas_layout for "pallas", else decode_layout."""
    return {"cpu": kernel_layout, "pallas": pallas_layout}.get(kernel, decode_layout)(params)


def layout(params) -> str:
    """Which layout params are in: "kernel", "pallas", "decode" or "hf" (as loaded)."""
    if "head" in params:
        return "kernel"
    if "pallas" in params:
        return "pallas"
    return "decode" if "weight_t" in params.get("blocks", {}).get("attn", {}).get("c_attn", {}) else "hf"


def batch_layout(params):
    """params without decode_layout's [n_out, n_in] copies: under vmap a batch's 1-token steps are
    B-row products, which the HF layout serves better (docs/performance.md). kernel_layout's packed
    copies stay: the kernel serves a batch's rows together."""
    return _without(params, ("weight_t",))


def as_loaded(params):
    """params without any layout's second copies or marks: the weights as loaded (the HF layout)."""
    return _without(params, ("weight_t", "packed", "head", "pallas"))


def _without(params, keys: tuple[str, ...]):
    if "blocks" not in params:  # a drafter with no network (lookup)
        return params
    drop = lambda layer: {k: v for k, v in layer.items() if k not in keys}
    blocks = {
        part: {name: drop(layer) for name, layer in group.items()} if part in ("attn", "mlp") else group
        for part, group in params["blocks"].items()
    }
    return {k: v for k, v in params.items() if k not in keys} | {"blocks": blocks}


def param_bytes(params) -> int:
    """Bytes of the weights one decode step must read from memory: every weight once. Where a
    layout keeps a second copy (decode_layout's weight_t, kernel_layout's packed and head), the
    step reads the copy instead of the original, not as well, so the copy is not counted."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    second_copy = lambda path: path[-1].key in ("weight_t", "packed") or path[0].key == "head"
    return sum(x.size * x.dtype.itemsize for path, x in leaves if not second_copy(path))


def resident_bytes(params) -> int:
    """Bytes the weights hold in memory, a layout's second copies included."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))


def restrict_head(params, ids):
    """Draft weights whose head covers only `ids` [V']: head_tokens (the ids), head_wte (their rows
    of wte, for XLA's product) and, in kernel_layout, the head packed from them.
    gpt2.head then gives [n_seq, V'] logits; drafters.py maps them back to token ids."""
    ids = jnp.asarray(ids, jnp.int32)
    head_wte = params["wte"][ids]  # [V', n_embd]
    out = {**params, "head_tokens": ids, "head_wte": head_wte}
    if "head" in params:  # kernel_layout: the kernel reads a packed copy
        out["head"] = {"packed": cpu.pack(head_wte.T)}
    return out
