"""Rotary position embedding (Su et al. 2021, RoFormer) as the Llama family computes it, with HF's
`rope_scaling` of the kinds its checkpoints use (llama.py's blocks and an EAGLE-3 head's rotate
their queries and keys with it)."""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """HF's `rope_scaling` of the kinds these checkpoints use: "linear" (positions / factor) or
    "llama3" (Llama 3.1/3.2: long wavelengths slowed by `factor`, short ones kept, those between
    blended)."""

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int = 8192


def inv_frequencies(config) -> np.ndarray:
    """The rotary angles' rates theta^(-2i/hd), i < hd/2 [hd/2], with the config's scaling: a
    constant of the program. Llama 3's: wavelengths above original_context / low_freq_factor
    slowed by `factor`, below original_context / high_freq_factor kept, and blended between."""
    hd = config.head_dim
    inv = 1.0 / config.rope_theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd)
    s = config.rope_scaling
    if s is None:
        return inv.astype(np.float32)
    if s.kind == "linear":
        return (inv / s.factor).astype(np.float32)
    wavelength = 2 * math.pi / inv
    low, high = s.original_context / s.low_freq_factor, s.original_context / s.high_freq_factor
    slowed = np.where(wavelength > low, inv / s.factor, inv)
    smooth = (s.original_context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    between = (wavelength >= high) & (wavelength <= low)
    return np.where(between, (1 - smooth) * slowed / s.factor + smooth * slowed, slowed).astype(np.float32)


def rotate(x, positions, config):
    """Rotary position embedding of x [n_seq, heads, hd] at positions [n_seq]: feature pairs
    (i, i + hd/2) rotated by position * rate_i (HF's rotate_half pairing)."""
    angles = positions.astype(jnp.float32)[:, None] * jnp.asarray(inv_frequencies(config))[None]
    cos = jnp.cos(jnp.concatenate([angles, angles], -1))[:, None].astype(x.dtype)  # [n_seq, 1, hd]
    sin = jnp.sin(jnp.concatenate([angles, angles], -1))[:, None].astype(x.dtype)
    half = x.shape[-1] // 2
    turned = jnp.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + turned * sin
