"""llama.cpp's Q8_0 weight format, which the CPU kernel reads (`--dtype int8`).

A matrix is cut, along the dimension its product sums over (n_in), into blocks of BLOCK = 32
weights; each block keeps one scale d = max|w| / 127, stored as float16, and 32 int8 codes
q = round(w / d) (halves away from zero). A weight reads back as q * d. These are the same bytes
llama.cpp's converter writes (gguf-py's `quants.Q8_0.quantize_blocks`, bit-exact with ggml's
`quantize_row_q8_0_ref`), so specbench and llama.cpp multiply the same numbers: 34 bytes a block,
1.0625 bytes a weight. specbench keeps the scales as float32 (the float16 values), so its step
reads 1.125 bytes a weight.

`quantize` and `dequantize` are NumPy: the definition, and the tests' reference.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

BLOCK = 32
NAME = "q8_0"


class Q8(NamedTuple):
    """A matrix in Q8_0 along `axis` -2 (its n_in): codes [..., n_in, n_out] int8 and scales
    [..., n_in / BLOCK, n_out] float32, each a float16 value. A pytree, so it rides in a model's
    arrays."""

    codes: object
    scales: object


def quantizable(n_in: int) -> bool:
    """Whether a product summing over n_in can be kept in Q8_0: whole blocks only, as llama.cpp."""
    return n_in > 0 and n_in % BLOCK == 0


def _roundf(x: np.ndarray) -> np.ndarray:
    """C's roundf: halves away from zero (NumPy's round takes them to even), without adding 0.5,
    which rounds 0.49999997 up in float32."""
    a = np.abs(x)
    whole = np.floor(a)
    return np.sign(x) * (whole + np.floor(2 * (a - whole)))


def quantize(w) -> Q8:
    """w [..., n_in, n_out] in Q8_0 along n_in (gguf-py's Q8_0.quantize_blocks, over columns): per
    block d = max|w| / 127 in float32, id = 1 / d (0 where d is 0), q = roundf(w id), then d
    rounded to float16. Raises ValueError unless n_in is a multiple of BLOCK."""
    w = np.asarray(w, np.float32)
    *lead, n_in, n_out = w.shape
    if not quantizable(n_in):
        raise ValueError(f"Q8_0 needs n_in a multiple of {BLOCK} (got {n_in})")
    blocks = w.reshape(*lead, n_in // BLOCK, BLOCK, n_out)
    d = np.abs(blocks).max(axis=-2, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(d == 0, np.float32(0), np.float32(1) / d)
    codes = _roundf(blocks * inverse).astype(np.int8).reshape(w.shape)
    scales = d.astype(np.float16).astype(np.float32)[..., 0, :]
    return Q8(codes, scales)


def dequantize(q: Q8) -> np.ndarray:
    """The float32 weights [..., n_in, n_out] that Q8_0 codes stand for: q * d, each block's d."""
    codes = np.asarray(q.codes)
    *lead, n_in, n_out = codes.shape
    blocks = codes.reshape(*lead, n_in // BLOCK, BLOCK, n_out).astype(np.float32)
    return (blocks * np.asarray(q.scales, np.float32)[..., None, :]).reshape(codes.shape)


def nbytes(q: Q8) -> int:
    """Bytes the kernel reads of a Q8 matrix: one per code, four per scale."""
    return int(np.size(q.codes)) + 4 * int(np.size(q.scales))
