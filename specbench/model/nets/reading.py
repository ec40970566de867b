"""How a family reads its prompt: the one difference between a decoder-only model and an
encoder-decoder that decoding sees, declared once per kind as a record (families.py gives each
family its own) so that network.py asks no family's name.

  OwnStart  a decoder (GPT-2, the Llama family) reads the prompt as the start of its own sequence:
            its cache starts empty, its decoder's prompt is the prompt, its step is its module's.
  Source    an encoder-decoder (T5) reads the prompt as the source: the encoder runs once, its
            cross-attention keys and values go into the cache beside the decoder's own entries,
            and the decoder's sequence starts from one token (config.decoder_start).

Each implements the same methods (Reading, the protocol), and every one of them is tested against
it by signature (tests/test_families.py).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import jax.numpy as jnp
from jax.sharding import Mesh

from specbench.model.nets import mesh, t5
from specbench.model.nets.layouts import as_loaded


class Reading(Protocol):
    """What network.py asks of a family, beyond its module's step: how the prompt is read."""

    source: bool  # the prompt is a source the decoder attends to (an encoder-decoder)

    def start_cache(self, params, prompt_buf, n_prompt, config, max_len: int): ...
    def decoder_prompt(self, prompt_buf, config): ...
    def decoder_prompt_length(self, config, n_prompt): ...
    def embedding(self, params): ...
    def step_layers(self, config) -> int: ...
    def shape(self, config) -> str: ...
    def cache_elements(self, config, max_len: int) -> int: ...
    def last_logits(self, params, prompt, continuation, config): ...
    def shard(self, params, config, on: Mesh) -> tuple: ...


@dataclasses.dataclass(frozen=True)
class OwnStart:
    """A decoder-only family: `module` (gpt2 or llama, a families.Network) and its uncached
    `forward` (the tests' oracle)."""

    module: object
    forward: object
    source = False

    def start_cache(self, params, prompt_buf, n_prompt, config, max_len: int):
        """An empty cache: the decoder reads the prompt itself, as its first tokens."""
        return self.module.init_cache(config, max_len, self.embedding(params).dtype)

    def decoder_prompt(self, prompt_buf, config):
        return prompt_buf

    def decoder_prompt_length(self, config, n_prompt):
        return n_prompt

    def embedding(self, params):
        return params["wte"]

    def step_layers(self, config) -> int:
        return config.n_layer

    def shape(self, config) -> str:
        return f"{config.n_layer}x{config.width}"

    def cache_elements(self, config, max_len: int) -> int:
        """Keys and values of every layer (a Llama's of its n_kv_head heads)."""
        return 2 * config.n_layer * max_len * config.kv_width

    def last_logits(self, params, prompt, continuation, config):
        return self.forward(params, jnp.concatenate([prompt, continuation]), config)[-1]

    def shard(self, params, config, on: Mesh) -> tuple:
        """(params, config) split over the mesh: heads padded first where the module pads them
        (gpt2.pad_heads), the fused products' columns grouped by device."""
        arrays, config = self.module.pad_heads(as_loaded(params), config, on.shape[mesh.AXIS])
        return mesh.shard_target(arrays, config, on, self.module.fused_parts(config)), config


@dataclasses.dataclass(frozen=True)
class Source:
    """An encoder-decoder family (t5.py): its prompt is the source."""

    source = True

    def start_cache(self, params, prompt_buf, n_prompt, config, max_len: int):
        """The source (prompt_buf, its first n_prompt real) encoded into the cross-attention entries."""
        return t5.start_cache(params, prompt_buf, n_prompt, config, max_len)

    def decoder_prompt(self, prompt_buf, config):
        """The start token, padded to the prompt's bucket (the token buffer keeps its layout)."""
        return jnp.zeros_like(prompt_buf).at[0].set(config.decoder_start)

    def decoder_prompt_length(self, config, n_prompt):
        return 1  # the start token

    def embedding(self, params):
        return params["shared"]

    def step_layers(self, config) -> int:
        return config.n_decoder_layer

    def shape(self, config) -> str:
        """Encoder + decoder blocks x width ("4+4x256")."""
        return f"{config.n_layer}+{config.n_decoder_layer}x{config.width}"

    def cache_elements(self, config, max_len: int) -> int:
        """The decoder's entries and, at most as many, the source's cross-attention keys and values."""
        return 2 * 2 * config.n_decoder_layer * max_len * config.inner

    def last_logits(self, params, prompt, continuation, config):
        decoder = jnp.concatenate([jnp.full(1, config.decoder_start, jnp.int32), continuation])
        return t5.t5(params, prompt, decoder, config)[-1]

    def shard(self, params, config, on: Mesh) -> tuple:
        """Encoder and decoder split alike, their products unfused, their heads unpadded."""
        mesh.check_divides(config, on.shape[mesh.AXIS])
        return mesh.place(as_loaded(params), on), config
