"""An architecture is one record: each config type's `Family` holds its Hugging Face model_types
and their names, its network module, and what it can do. Everything that asks "which
architecture?" asks family_of(config), as drafters ask decode/drafters.KINDS; a Llama-shaped
model_type is one more row of LLAMA's types (docs/models.md, "A new Llama-shaped family").
Each model_type is a row (ModelType), so a Llama-shaped model_type costs one row. The checkpoint
formats that read and write each family: checkpoints/formats.py."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from specbench.model.nets import gpt2, llama, t5
from specbench.model.nets.eagle3 import Eagle3Config
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.reading import OwnStart, Reading, Source
from specbench.model.nets.t5 import T5Config


class Network(Protocol):
    """What a decoder's module provides (gpt2.py, llama.py): the step interface network.py calls,
    and what a mesh (mesh.py), an EAGLE head (eagle.py) and the layer-skip drafter read of it."""

    def step(self, params, cache, tokens, pos, config, logits_at=None, tree=None, hidden=False): ...
    def init_cache(self, config, max_len: int, dtype=None): ...
    def empty_cache(self, config, max_len: int, dtype=None): ...
    def init_params(self, config, seed: int = 0, dtype=None) -> dict: ...
    def pad_heads(self, arrays: dict, config, tp: int) -> tuple[dict, object]: ...
    def fused_parts(self, config) -> dict: ...
    def blocks(self, params, x, cache, pos, config, tree=None, taps=None, first: int = 0): ...
    def final_norm(self, params, x, config): ...
    def position_embedding(self, params, positions): ...
    def head_keys(self, config) -> tuple[str, ...]: ...


@dataclasses.dataclass(frozen=True)
class ModelType:
    """One Hugging Face model_type of a family, a row: how prose names it, the transformers class
    that a saved config.json names, its q/k/v biases and q/k norms, and the config.json fields it
    may set that specbench does not compute (refused by name when set)."""

    name: str
    display: str
    hf_class: str = ""
    qkv_bias: bool = False
    qk_norm: bool = False
    refused: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Family:
    """One architecture. `names`: its HF model_types and how prose names each (the first is the
    default); `module`: its network (a Network, or t5 for the encoder-decoder); `reading`: how it
    reads its prompt (reading.OwnStart, reading.Source), which answers network.py. What it can
    do: trees (token trees verified in one step), features (an EAGLE head reads them),
    layer_skip (its first layers draft), kernels (specbench's kernels, the CPU kernel and the
    Pallas kernels' layouts, serve its steps; else XLA's products), pallas (the fused Pallas
    kernels serve its blocks), random_init (random weights of a registry shape, for timing),
    bundled_tokenizer, trains_heads (specbench.train trains its drafts and EAGLE heads),
    numpy_peer (the papers' NumPy loop, a peer, runs it) and all_reduces (a split step's
    all-reduces per block)."""

    config_type: type
    types: tuple[ModelType, ...]
    module: object
    reading: Reading
    trees: bool = True
    features: bool = True
    layer_skip: bool = True
    kernels: bool = True
    pallas: bool = False
    random_init: bool = True
    bundled_tokenizer: bool = False  # its tokenizer ships with specbench (GPT-2's BPE), not in its folders
    trains_heads: bool = False
    numpy_peer: bool = False
    all_reduces: int = 2  # after the attention's output projection and the feed-forward's second product

    @property
    def encoder_decoder(self) -> bool:
        """Whether it reads its prompt as a source (reading.Source)."""
        return self.reading.source

    @property
    def names(self) -> dict[str, str]:
        """Its model_types, each with the name prose gives it."""
        return {t.name: t.display for t in self.types}

    def row(self, model_type: str) -> ModelType:
        """The row of one of its model_types."""
        return next(t for t in self.types if t.name == model_type)

    def model_type(self, config) -> str:
        """The config's HF model_type: a Llama-family config's own `family`, else the one name."""
        return getattr(config, "family", self.types[0].name)

    def display_name(self, config) -> str:
        return self.row(self.model_type(config)).display


GPT2 = Family(
    GPT2Config,
    (ModelType("gpt2", "GPT-2", "GPT2LMHeadModel"),),
    gpt2,
    OwnStart(gpt2, gpt2.gpt2),
    pallas=True,
    bundled_tokenizer=True,
    trains_heads=True,
    numpy_peer=True,
)
LLAMA = Family(
    LlamaConfig,
    (
        ModelType("llama", "Llama", "LlamaForCausalLM"),
        ModelType("qwen2", "Qwen2", "Qwen2ForCausalLM", qkv_bias=True),
        ModelType("qwen3", "Qwen3", "Qwen3ForCausalLM", qk_norm=True),
        ModelType("mistral", "Mistral", "MistralForCausalLM", refused=("sliding_window",)),
        ModelType("mimo", "MiMo", "MiMoForCausalLM", qkv_bias=True),  # Qwen2's shape, MTP layers beside
    ),
    llama,
    OwnStart(llama, llama.llama),
)
T5 = Family(
    T5Config,
    (ModelType("t5", "T5", "T5ForConditionalGeneration"),),
    t5,
    Source(),
    trees=False,
    features=False,
    layer_skip=False,
    kernels=False,
    all_reduces=3,  # a decoder block's cross-attention output projection too
)
FAMILIES = (GPT2, LLAMA, T5)
BY_CONFIG = {f.config_type: f for f in FAMILIES}


def family_of(config) -> Family:
    """The architecture of a config (GPT2Config, LlamaConfig or T5Config)."""
    for config_type, family in BY_CONFIG.items():
        if isinstance(config, config_type):
            return family
    raise TypeError(f"{type(config).__name__} is not the config of an architecture specbench knows")


def model_types() -> tuple[str, ...]:
    """Every HF model_type specbench reads, GPT-2's first."""
    return tuple(name for family in FAMILIES for name in family.names)


def is_eagle3_head(config) -> bool:
    """Whether a head's config is a published EAGLE-3 head's (nets/eagle3.py), not a block of its
    target's family (eagle.py asks, to pick the head's format)."""
    return isinstance(config, Eagle3Config)
