"""The one step interface decoding reads: GPT-2 (gpt2.py) and the Llama family (llama.py), both
decoder-only, and T5 (encoder-decoder, t5.py) behind the same functions, chosen by the config's
architecture (families.py).

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

from specbench.model.nets import mesh, t5
from specbench.model.nets.families import family_of
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.layouts import as_loaded
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


def architecture(config) -> str:
    """What a row records of the model: its HF model_type ("gpt2", "t5", "llama", "qwen3", ...)."""
    return family_of(config).model_type(config)


def display_name(config) -> str:
    """The architecture as prose names it: GPT-2, T5, Llama, Qwen2, Qwen3, Mistral."""
    return family_of(config).display_name(config)


def encoder_decoder(config) -> bool:
    """Whether the model reads its prompt as a source (T5) rather than as its own start (GPT-2)."""
    return family_of(config).encoder_decoder


def shape(config) -> str:
    """A model's shape as the tables print it: GPT-2's layers x width ("6x256"), T5's encoder +
    decoder blocks x width ("4+4x256")."""
    if encoder_decoder(config):
        return f"{config.n_layer}+{config.n_decoder_layer}x{config.width}"
    return f"{config.n_layer}x{config.width}"


def cache_elements(config, max_len: int) -> int:
    """Numbers a cache of max_len holds: a decoder's keys and values of every layer (a Llama's of
    its n_kv_head heads); T5's decoder entries and, at most as many, its source's cross-attention
    keys and values."""
    if encoder_decoder(config):
        return 2 * 2 * config.n_decoder_layer * max_len * config.inner
    return 2 * config.n_layer * max_len * kv_width(config)


def kv_width(config) -> int:
    """Numbers of a key (and of a value) a decoder caches per token and layer: GPT-2's n_embd, a
    Llama's n_kv_head * head_dim (grouped-query attention), a padded GPT-2's attn_width."""
    return config.kv_width


def dtype_of(params, config):
    """The dtype of a model's weights (its embedding's: T5's shared, GPT-2's wte)."""
    return params["shared" if encoder_decoder(config) else "wte"].dtype


def decoder_prompt_length(config, n_prompt):
    """How many of the decoder's own tokens come before the first new one: the prompt's length
    for GPT-2, one (the decoder's start token) for T5."""
    return 1 if encoder_decoder(config) else n_prompt


def start_cache(params, prompt_buf, n_prompt, config, max_len: int):
    """The cache before the decoder reads its prompt: a decoder-only model's empty one; T5's with
    the source (prompt_buf, its first n_prompt real) encoded into the cross-attention entries."""
    if encoder_decoder(config):
        return t5.start_cache(params, prompt_buf, n_prompt, config, max_len)
    return init_cache(config, max_len, dtype_of(params, config))


def init_cache(config, max_len: int, dtype):
    """A decoder-only model's empty cache for sequences of up to max_len tokens."""
    return family_of(config).module.init_cache(config, max_len, dtype)


def shard(model: Model, on: Mesh) -> Model:
    """A decoder-only target split over a device mesh (mesh.py, Megatron-style): a GPT-2's heads
    padded first where they do not split (gpt2.pad_heads), and the network's module saying which
    of its products are fused; a T5's encoder and decoder alike. ValueError for heads that do not
    split (a T5's, or a Llama-family model's heads or key/value heads)."""
    config = model.config
    if encoder_decoder(config):  # its products unfused, its heads unpadded
        mesh.check_divides(config, on.shape[mesh.AXIS])
        return dataclasses.replace(model, params=mesh.place(as_loaded(model.params), on))
    module = family_of(config).module
    arrays, config = module.pad_heads(as_loaded(model.params), config, on.shape[mesh.AXIS])
    params = mesh.shard_target(arrays, config, on, module.fused_parts(config))
    return dataclasses.replace(model, config=config, params=params)


def init_params(config, seed: int = 0, dtype=None) -> dict:
    """Random weights of a decoder-only config's shape (its module's initialisation): timing only."""
    return family_of(config).module.init_params(config, seed, dtype or jnp.float32)


def decoder_prompt(prompt_buf, config):
    """The decoder's prompt buffer: GPT-2's prompt; for T5 the start token, padded to the
    prompt's bucket (so that the token buffer's layout is the same)."""
    if encoder_decoder(config):
        return jnp.zeros_like(prompt_buf).at[0].set(config.decoder_start)
    return prompt_buf


def last_logits(params, prompt, continuation, config):
    """The logits [V] after the prompt and a continuation [n] (n may be 0), uncached: the tests'
    oracle. A decoder-only model reads their concatenation; T5 reads the prompt as its source and
    its decoder reads the start token and the continuation."""
    prompt = jnp.asarray(prompt, jnp.int32)
    continuation = jnp.asarray(continuation, jnp.int32)
    if encoder_decoder(config):
        decoder = jnp.concatenate([jnp.full(1, config.decoder_start, jnp.int32), continuation])
        return t5.t5(params, prompt, decoder, config)[-1]
    return family_of(config).forward(params, jnp.concatenate([prompt, continuation]), config)[-1]


def step(params, cache, tokens, pos, config, logits_at=None, tree=None, hidden=False):
    """gpt2.step, llama.step or t5.step, by the config's family. T5 has no token trees or features (yet)."""
    if not family_of(config).encoder_decoder:
        module = family_of(config).module
        return module.step(params, cache, tokens, pos, config, logits_at=logits_at, tree=tree, hidden=hidden)
    if tree is not None or hidden:
        raise ValueError("specbench's T5 verifies chains: no token trees or EAGLE features")
    return t5.step(params, cache, tokens, pos, config, logits_at=logits_at)
