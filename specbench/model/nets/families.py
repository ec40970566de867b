"""An architecture is one record: each config type's `Family` holds its Hugging Face model_types
and their names, its network module, and what it can do. Everything that asks "which
architecture?" asks family_of(config), as drafters ask decode/drafters.KINDS; a Llama-shaped
model_type is one more entry of LLAMA's names (docs/models.md, "A new Llama-shaped family").
The checkpoint formats that read and write each family: checkpoints/formats.py."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from specbench.model.nets import gpt2, llama, t5
from specbench.model.nets.eagle3 import Eagle3Config
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.t5 import T5Config


class Network(Protocol):
    """What a decoder's module provides (gpt2.py, llama.py): the step interface network.py calls,
    and what a mesh (mesh.py), an EAGLE head (eagle.py) and the layer-skip drafter read of it."""

    def step(self, params, cache, tokens, pos, config, logits_at=None, tree=None, hidden=False): ...
    def init_cache(self, config, max_len: int, dtype=None): ...
    def init_params(self, config, seed: int = 0, dtype=None) -> dict: ...
    def pad_heads(self, arrays: dict, config, tp: int) -> tuple[dict, object]: ...
    def fused_parts(self, config) -> dict: ...
    def blocks(self, params, x, cache, pos, config, tree=None): ...
    def final_norm(self, params, x, config): ...
    def position_embedding(self, params, positions): ...
    def head_keys(self, config) -> tuple[str, ...]: ...


@dataclasses.dataclass(frozen=True)
class Family:
    """One architecture. `names`: its HF model_types and how prose names each (the first is the
    default); `module`: its network (a Network, or t5 for the encoder-decoder); `forward`: its
    uncached forward (the tests' oracle). What it can do: encoder_decoder (reads the prompt as a
    source), trees (token trees verified in one step), features (an EAGLE head reads them),
    pallas (the fused Pallas kernels serve its blocks; the CPU kernel serves every decoder),
    padded_heads (heads padded where a mesh does not split them), random_init (random weights
    of a registry shape, for timing) and bundled_tokenizer."""

    config_type: type
    names: dict[str, str]
    module: object
    forward: object
    encoder_decoder: bool = False
    trees: bool = True
    features: bool = True
    pallas: bool = False
    padded_heads: bool = False
    random_init: bool = True
    bundled_tokenizer: bool = False  # its tokenizer ships with specbench (GPT-2's BPE), not in its folders

    def model_type(self, config) -> str:
        """The config's HF model_type: a Llama-family config's own `family`, else the one name."""
        return getattr(config, "family", next(iter(self.names)))

    def display_name(self, config) -> str:
        return self.names[self.model_type(config)]


GPT2 = Family(
    GPT2Config, {"gpt2": "GPT-2"}, gpt2, gpt2.gpt2, pallas=True, padded_heads=True, bundled_tokenizer=True
)
LLAMA = Family(
    LlamaConfig,
    {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"},
    llama,
    llama.llama,
)
T5 = Family(T5Config, {"t5": "T5"}, t5, None, encoder_decoder=True, trees=False, features=False)
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
