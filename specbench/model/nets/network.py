"""The one step interface decoding reads: GPT-2 (gpt2.py) and the Llama family (llama.py), both
decoder-only, and T5 (encoder-decoder, t5.py) behind the same functions, each answered by the
config's family (families.py) and how it reads its prompt (reading.py), with no family named here.

A decoder-only model reads the prompt as the start of its own sequence. An encoder-decoder reads
it as the source: the encoder runs once, its cross-attention keys and values go into the cache
beside the decoder's own entries, and the decoder's sequence starts from one token
(config.decoder_start). From there a step is a step: `step(params, cache, tokens, pos, config)`
runs tokens at positions pos.. and returns (logits, cache), whichever the model.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax.sharding import Mesh

from specbench.model.nets.families import family_of
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.t5 import T5Config


@dataclasses.dataclass(frozen=True)
class Model:
    """A network with its weights: its name, config (GPT2Config, LlamaConfig or T5Config), weights
    and where they came from (a directory, or "random")."""

    name: str
    config: GPT2Config | LlamaConfig | T5Config
    params: dict
    source: str


def vocabulary(config) -> int:
    """The tokens a model shares with its pair: its n_vocab, less a PARD draft's mask where the mask
    was appended after them (decode/pard.py)."""
    appended = config.mask_token is not None and config.mask_token == config.n_vocab - 1
    return config.n_vocab - appended


def architecture(config) -> str:
    """What a row records of the model: its HF model_type ("gpt2", "t5", "llama", "qwen3", ...)."""
    return family_of(config).model_type(config)


def display_name(config) -> str:
    """The architecture as prose names it: GPT-2, T5, Llama, Qwen2, Qwen3, Mistral."""
    return family_of(config).display_name(config)


def reads_source(config) -> bool:
    """Whether the model reads its prompt as a source (an encoder-decoder: T5) rather than as its
    own start (GPT-2, the Llama family)."""
    return family_of(config).reading.source


def shape(config) -> str:
    """A model's shape as the tables print it: a decoder's layers x width ("6x256"), an
    encoder-decoder's encoder + decoder blocks x width ("4+4x256")."""
    return family_of(config).reading.shape(config)


def cache_elements(config, max_len: int) -> int:
    """Numbers a cache of max_len holds: a decoder's keys and values of every layer (a Llama's of
    its n_kv_head heads); T5's decoder entries and, at most as many, its source's cross-attention
    keys and values."""
    return family_of(config).reading.cache_elements(config, max_len)


def kv_width(config) -> int:
    """Numbers of a key (and of a value) a decoder caches per token and layer: GPT-2's n_embd, a
    Llama's n_kv_head * head_dim (grouped-query attention), a padded GPT-2's attn_width."""
    return config.kv_width


def step_layers(config) -> int:
    """The blocks one decode step runs: a decoder's layers; an encoder-decoder's decoder blocks."""
    return family_of(config).reading.step_layers(config)


def dtype_of(params, config):
    """The dtype of a model's weights (its embedding's: T5's shared, GPT-2's wte)."""
    return family_of(config).reading.embedding(params).dtype


def decoder_prompt_length(config, n_prompt):
    """How many of the decoder's own tokens come before the first new one: the prompt's length
    for a decoder, one (the decoder's start token) for an encoder-decoder."""
    return family_of(config).reading.decoder_prompt_length(config, n_prompt)


def start_cache(params, prompt_buf, n_prompt, config, max_len: int):
    """The cache before the decoder reads its prompt: a decoder's empty one; an encoder-decoder's
    with the source (prompt_buf, its first n_prompt real) encoded into the cross-attention entries."""
    return family_of(config).reading.start_cache(params, prompt_buf, n_prompt, config, max_len)


def init_cache(config, max_len: int, dtype):
    """A decoder-only model's empty cache for sequences of up to max_len tokens."""
    return family_of(config).module.init_cache(config, max_len, dtype)


def shard(model: Model, on: Mesh) -> Model:
    """A target split over a device mesh (mesh.py, Megatron-style), as its family splits
    (reading.OwnStart.shard, reading.Source.shard). ValueError for heads that do not split."""
    params, config = family_of(model.config).reading.shard(model.params, model.config, on)
    return dataclasses.replace(model, config=config, params=params)


def init_params(config, seed: int = 0, dtype=None) -> dict:
    """Random weights of a config's shape (its module's initialisation): timing only."""
    return family_of(config).module.init_params(config, seed, dtype or jnp.float32)


def decoder_prompt(prompt_buf, config):
    """The decoder's prompt buffer: a decoder's prompt; an encoder-decoder's start token, padded
    to the prompt's bucket (so that the token buffer's layout is the same)."""
    return family_of(config).reading.decoder_prompt(prompt_buf, config)


def last_logits(params, prompt, continuation, config):
    """The logits [V] after the prompt and a continuation [n] (n may be 0), uncached: the tests'
    oracle. A decoder reads their concatenation; an encoder-decoder reads the prompt as its source
    and its decoder reads the start token and the continuation."""
    prompt = jnp.asarray(prompt, jnp.int32)
    continuation = jnp.asarray(continuation, jnp.int32)
    return family_of(config).reading.last_logits(params, prompt, continuation, config)


def step(params, cache, tokens, pos, config, logits_at=None, tree=None, hidden=False):
    """The step of the config's family (reading.OwnStart.step: its decoder module's; reading.Source.step:
    the encoder-decoder's, which has no token trees or features yet)."""
    return family_of(config).module.step(params, cache, tokens, pos, config, logits_at, tree, hidden)
