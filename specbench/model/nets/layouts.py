"""The layouts a decoder's weights are kept in (GPT-2's; the Llama family's, which llama.py stores
as GPT-2's are), each for the products that read them.

    HF      as loaded (Hugging Face's Conv1D orientation, layers stacked): the plain path, and
            the tests' oracle (gpt2.gpt2)
    DECODE  HF plus a [n_out, n_in] copy of every block matrix for XLA's 1-token products
    KERNEL  HF plus a packed copy of every block matrix and of the output head (wte.T) for the
            CPU kernel (cpu.pack)
    PALLAS  HF as it is, for the fused Pallas kernels of a GPU step (kernels/pallas.py), which
            read the stacked weights in place: no second copy

The weights a step reads are a `Weights`: the arrays, the `Layout` they are in (static under jit,
so one program is compiled per layout) and, for a draft with a smaller vocabulary, its
`RestrictedHead`. products.linear and products.head dispatch on the layout; no code asks which
keys the arrays have to tell a layout (`unembedding` asks whether a checkpoint brought its own
output head, which is its shape, not a layout). What each layout costs in memory is in
docs/performance.md, and `specbench roofline` prints it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specbench.model.kernels import cpu, pallas_layers

MATRICES = (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj"))
Q8_KEY = "q8"
"""Beside a block matrix's weight in an int8 model: its Q8_0 codes (kernels/q8_0.Q8; quantized.py)."""
HEAD_Q8 = "head_q8"
"""In an int8 model's arrays: the output head's Q8_0 codes, in its product's orientation [n_embd, V]."""


FUSED_VECTOR_BYTES = 16 * 1024
"""XLA:CPU computes a matrix-vector product in one pass over an [n_out, n_in] matrix only while
the vector is smaller than this (its CPU fusion pass's threshold); a longer one first copies the
matrix transposed, every call (docs/performance.md)."""


class Layout(enum.Enum):
    """How a network's weights are kept, and so which products read them (the module's table)."""

    HF = "hf"
    DECODE = "decode"
    KERNEL = "kernel"
    PALLAS = "pallas"

    @property
    def kernels(self) -> str:
        """What multiplies the weights, as --kernels and the rows name it: cpu, pallas or xla."""
        return {Layout.KERNEL: "cpu", Layout.PALLAS: "pallas"}.get(self, "xla")


class RestrictedHead(NamedTuple):
    """A draft's output head over V' tokens only (FR-Spec; checkpoints/draft_vocab.py ranks them):
    its logits are [n_seq, V'], column j for token tokens[j]."""

    tokens: jax.Array  # [V'] int32
    wte: jax.Array  # [V', n_embd]: their rows of wte
    packed: jax.Array | None = None  # wte.T packed for the CPU kernel, in the KERNEL layout


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Weights:
    """A decoder's weights as a step reads them: `arrays` (wte, wpe, blocks, ln_f and the layout's
    copies), the static `layout`, a restricted `head` or None, and the static device `mesh` the
    arrays are split over (mesh.py) or None. `weights[key]` reads arrays."""

    arrays: dict
    layout: Layout = dataclasses.field(default=Layout.HF, metadata=dict(static=True))
    head: RestrictedHead | None = None
    mesh: object = dataclasses.field(default=None, metadata=dict(static=True))  # a target's Mesh (mesh.py)

    def __getitem__(self, key: str):
        return self.arrays[key]


def as_weights(params) -> Weights:
    """params as Weights: a plain dict of arrays (weights as loaded, the tests' random ones) is HF."""
    return params if isinstance(params, Weights) else Weights(params)


def kernels_used(params) -> str:
    """What multiplies these weights: "cpu", "pallas" or "xla" (a T5's, whose dicts are HF: xla)."""
    return as_weights(params).layout.kernels


def head_tokens(params):
    """The token ids of a restricted head's columns [V'], or None where the head covers them all."""
    head = as_weights(params).head
    return None if head is None else head.tokens


def unembedding(arrays: dict) -> jax.Array:
    """The output head's matrix [n_vocab, n_embd]: an untied model's own `lm_head` (a checkpoint's
    shape: TinyLlama's, Qwen2.5-7B's), else the embedding `wte` it is tied to (GPT-2's)."""
    return arrays["lm_head"] if "lm_head" in arrays else arrays["wte"]


def decode_pieces(n_in: int, itemsize: int) -> int:
    """How many pieces decode_layout cuts a matrix's n_in into: the fewest that divide n_in with
    each piece's vector under FUSED_VECTOR_BYTES (1 for every n_in up to 4,095 in float32)."""
    return next(n for n in range(1, n_in + 1) if n_in % n == 0 and n_in // n * itemsize < FUSED_VECTOR_BYTES)


def _with_copies(w: Weights, copy, layout: Layout) -> Weights:
    """w's weights as loaded, with copy(matrix) beside every block matrix, in `layout`."""
    arrays = as_loaded(w)
    blocks = jax.tree_util.tree_map(lambda x: x, arrays["blocks"])  # a copy of the dict structure
    for part, name in MATRICES:
        blocks[part][name] |= copy(blocks[part][name]["weight"])
    return Weights({**arrays, "blocks": blocks}, layout, w.head)


def decode_layout(params) -> Weights:
    """The same weights with a second copy of every block matrix for 1-token steps (`weight_t`):
    stored [n_out, n_in], cut along n_in into decode_pieces() pieces, [n_layer, n_pieces, n_out,
    n_in / n_pieces]; products.linear reads it. Made once at load, on the CPU only (other devices keep
    the HF layout). It costs the block matrices' size again in memory (docs/performance.md)."""
    w = as_weights(params)
    if jax.devices()[0].platform != "cpu" or w.layout is Layout.DECODE:
        return w

    def transposed(weight):
        n_layer, n_in, n_out = weight.shape
        n = decode_pieces(n_in, weight.dtype.itemsize)
        pieces = weight.reshape(n_layer, n, n_in // n, n_out)
        return {"weight_t": jnp.transpose(pieces, (0, 1, 3, 2))}  # [n_layer, n, n_out, n_in / n]

    return _with_copies(w, transposed, Layout.DECODE)


def kernel_layout(params) -> Weights:
    """The same weights for the CPU kernel (kernels/cpu.py): beside every block matrix (stacked,
    HF orientation, which a prefill's XLA products read) its copy packed in panels (`packed`,
    every layer's stacked: [n_layer, n_panels, n_in, WIDTH]), and the output head packed from wte.T
    (head.packed, [n_panels, n_embd, WIDTH]). Made once at load. It costs the block matrices' and
    wte's size again in memory, plus each matrix's padding to whole panels (docs/performance.md)."""
    w = as_weights(params)
    if w.layout is Layout.KERNEL:
        return w
    out = _with_copies(w, lambda weight: {}, Layout.KERNEL)
    blocks = out["blocks"]
    for part, name in MATRICES:  # an int8 model's matrices are packed from their Q8_0 codes
        m = blocks[part][name]
        m["packed"] = cpu.pack_q8(m[Q8_KEY]) if Q8_KEY in m else cpu.pack(m["weight"])
    head = cpu.pack_q8(w[HEAD_Q8]) if HEAD_Q8 in w.arrays else cpu.pack(unembedding(w.arrays).T)
    out = dataclasses.replace(out, arrays={**out.arrays, "head": {"packed": head}})
    return out if w.head is None else restrict_head(out, w.head.tokens)


def pallas_layout(params) -> Weights:
    """The same weights for the fused Pallas kernels, which read them in place: no copy. With the
    Mosaic backend (SPECBENCH_PALLAS_BACKEND=mosaic) each block matrix gets its transpose beside
    it (`weight_t`, [n_layer, n_out, n_in]: mosaic.py says why), which costs them again in memory."""
    w = as_weights(params)
    if pallas_layers.backend() == "mosaic":
        return _with_copies(w, lambda weight: {"weight_t": jnp.swapaxes(weight, 1, 2)}, Layout.PALLAS)
    return Weights(as_loaded(w), Layout.PALLAS, w.head)


def to_layout(params, layout: Layout) -> Weights:
    """The same weights in `layout`."""
    if layout is Layout.HF:
        w = as_weights(params)
        return Weights(as_loaded(w), Layout.HF, w.head, w.mesh)
    return {Layout.DECODE: decode_layout, Layout.KERNEL: kernel_layout, Layout.PALLAS: pallas_layout}[layout](
        params
    )


def for_decoding(params, kernel: str) -> Weights:
    """The layout decoding reads with `kernel` (cpu.choose): KERNEL for "cpu", PALLAS for "pallas",
    else DECODE."""
    return to_layout(params, {"cpu": Layout.KERNEL, "pallas": Layout.PALLAS}.get(kernel, Layout.DECODE))


def batch_layout(params):
    """params without decode_layout's [n_out, n_in] copies: under vmap a batch's 1-token steps are
    B-row products, which the HF layout serves better (docs/performance.md). kernel_layout's packed
    copies stay: the kernel serves a batch's rows together."""
    if not isinstance(params, Weights) or params.layout is not Layout.DECODE:
        return params
    return to_layout(params, Layout.HF)


def as_loaded(params) -> dict:
    """The weights as loaded (the HF layout's arrays), without any layout's copies."""
    w = as_weights(params)
    copies = {Layout.DECODE: ("weight_t",), Layout.KERNEL: ("packed",), Layout.PALLAS: ("weight_t",)}.get(
        w.layout, ()
    )
    if not copies:
        return w.arrays
    drop = lambda matrix: {k: v for k, v in matrix.items() if k not in copies}
    blocks = dict(w["blocks"])
    for part, name in MATRICES:
        blocks[part] = {**blocks[part], name: drop(blocks[part][name])}
    return {k: v for k, v in w.arrays.items() if k != "head"} | {"blocks": blocks}


def restrict_head(params, ids) -> Weights:
    """Draft weights whose head covers only `ids` [V'] (RestrictedHead), packed for the CPU
    kernel in the KERNEL layout. products.head then gives [n_seq, V'] logits; drafters map them back."""
    w = as_weights(params)
    ids = jnp.asarray(ids, jnp.int32)
    wte = unembedding(w.arrays)[ids]  # [V', n_embd]
    packed = None
    if w.layout is Layout.KERNEL:  # an int8 model's restricted head keeps its tokens' Q8_0 codes
        q8 = w.arrays.get(HEAD_Q8)
        packed = cpu.pack(wte.T) if q8 is None else cpu.pack_q8(type(q8)(q8.codes[:, ids], q8.scales[:, ids]))
    return dataclasses.replace(w, head=RestrictedHead(ids, wte, packed))


def param_bytes(params) -> int:
    """Bytes of the weights one decode step must read from memory: every weight once. Where a
    layout keeps a second copy (decode_layout's weight_t, kernel_layout's packed and head), the
    step reads the copy instead of the original, not as well, so the copy is not counted; a
    restricted head's tokens and rows are."""
    w = as_weights(params)
    nbytes = lambda *xs: sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(xs))
    arrays = as_loaded(w)
    head = 0 if w.head is None else nbytes(w.head.tokens, w.head.wte)
    if HEAD_Q8 in arrays:  # an int8 model's step reads codes and scales, not the float32 values
        blocks = {part: dict(v) for part, v in arrays["blocks"].items()}
        for part, name in MATRICES:
            blocks[part][name] = {k: v for k, v in blocks[part][name].items() if k != "weight"}
        unembedding_key = "lm_head" if "lm_head" in arrays else "wte"
        arrays = {k: v for k, v in arrays.items() if k != unembedding_key} | {"blocks": blocks}
        if w.head is not None:  # a restricted head reads its own tokens' codes (1 B) and scales (4 B / 32)
            arrays.pop(HEAD_Q8)
            head = nbytes(w.head.tokens) + w.head.wte.size + w.head.wte.size // 8
    return nbytes(arrays) + head


def resident_bytes(params) -> int:
    """Bytes the weights hold in memory, a layout's second copies included."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
