"""The formats a decoder's weights are decoded in, which `--dtype`, `--target-dtype` and
`--draft-dtype` name and rows record. A module of its own at the top, as the command line names
them without loading JAX and the model (model/nets/quantized.py) acts on them.

    FLOAT32   as loaded
    BFLOAT16  as loaded, in bfloat16
    INT8      llama.cpp's Q8_0 (model/kernels/q8_0.py), quantized at load; the CPU kernel reads it
"""

from __future__ import annotations

import enum


class WeightFormat(enum.Enum):
    """What --dtype names; `dtype` is what the arrays are loaded in (an int8 model's in float32,
    then quantized), `recorded` what a row's target_weights and draft_weights say."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"

    @property
    def dtype(self) -> str:
        return "bfloat16" if self is WeightFormat.BFLOAT16 else "float32"

    @property
    def quantized(self) -> bool:
        return self is WeightFormat.INT8

    @property
    def recorded(self) -> str:
        return "q8_0" if self.quantized else self.value


NAMES = tuple(f.value for f in WeightFormat)
