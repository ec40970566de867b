"""The models specbench knows by name, at their published shapes: GPT-2's four sizes, T5 and
Flan-T5, the Llama family (SmolLM2, Qwen2.5, TinyLlama, Llama 3.2), and random weights of a few
shapes for timing. Each name says where the Hub keeps its checkpoint."""

from __future__ import annotations

import dataclasses

from specbench.model.nets.families import LLAMA
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.rotary import RopeScaling
from specbench.model.nets.t5 import T5Config


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    config: GPT2Config | LlamaConfig | T5Config
    hf_repo: str | None = None  # downloadable from the Hub
    aliases: tuple[str, ...] = ()
    random_seed: int | None = None  # made on the fly with random weights: timing only
    random_from: str | None = None  # ...taking its first layers from this model (layer-skip draft)
    gated: bool = False  # the Hub serves it only with a token whose account accepted its licence


def _gpt2(n_layer, n_head, n_embd):
    return GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=1024, n_vocab=50257)


def _t5(layers, heads, d_model, d_ff, flan: bool):
    """T5's published shapes: the original (ReLU, a tied and scaled head) or Flan-T5 (v1.1's
    gated GELU, an untied head), 32,128 tokens of SentencePiece, d_kv 64."""
    return T5Config(
        n_vocab=32128,
        d_model=d_model,
        d_kv=64,
        d_ff=d_ff,
        n_layer=layers,
        n_decoder_layer=layers,
        n_head=heads,
        gated=flan,
        scale_decoder_outputs=not flan,
    )


def _llama(
    layers,
    heads,
    kv,
    width,
    inner,
    vocab,
    ctx,
    theta,
    eps,
    tied=True,
    family="llama",
    scaling=None,
    head_dim=None,
):
    """A Llama-family checkpoint's published shape (its config.json): Qwen2 brings q/k/v biases,
    Qwen3 its norms over queries and keys and a head_dim of its own."""
    return LlamaConfig(
        n_layer=layers,
        n_head=heads,
        n_kv_head=kv,
        n_embd=width,
        n_inner=inner,
        n_vocab=vocab,
        n_ctx=ctx,
        rope_theta=theta,
        rope_scaling=scaling,
        rms_norm_eps=eps,
        qkv_bias=LLAMA.row(family).qkv_bias,
        tied=tied,
        family=family,
        qk_norm=LLAMA.row(family).qk_norm,
        explicit_head_dim=head_dim,
    )


LLAMA3_ROPE = RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)  # Llama 3.2's rope_scaling
QWEN = dict(vocab=151936, ctx=32768, theta=1e6, eps=1e-6, family="qwen2")
QWEN3 = dict(vocab=151936, ctx=40960, theta=1e6, eps=1e-6, family="qwen3", head_dim=128)
SMOL = dict(vocab=49152, ctx=8192, eps=1e-5)
LLAMA31_ROPE = RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)  # Llama 3.1's rope_scaling
LLAMA_FAMILY = [
    ModelSpec(
        "smollm2-135m",
        "SmolLM2 135M",
        _llama(30, 9, 3, 576, 1536, theta=1e5, **SMOL),
        "HuggingFaceTB/SmolLM2-135M",
    ),
    ModelSpec(
        "smollm2-360m",
        "SmolLM2 360M",
        _llama(32, 15, 5, 960, 2560, theta=1e5, **SMOL),
        "HuggingFaceTB/SmolLM2-360M",
    ),
    ModelSpec(
        "smollm2-1.7b",
        "SmolLM2 1.7B",
        _llama(24, 32, 32, 2048, 8192, theta=1.3e5, **SMOL),
        "HuggingFaceTB/SmolLM2-1.7B",
    ),
    ModelSpec("qwen2.5-0.5b", "Qwen2.5 0.5B", _llama(24, 14, 2, 896, 4864, **QWEN), "Qwen/Qwen2.5-0.5B"),
    ModelSpec("qwen2.5-1.5b", "Qwen2.5 1.5B", _llama(28, 12, 2, 1536, 8960, **QWEN), "Qwen/Qwen2.5-1.5B"),
    ModelSpec("qwen2.5-3b", "Qwen2.5 3B", _llama(36, 16, 2, 2048, 11008, **QWEN), "Qwen/Qwen2.5-3B"),
    ModelSpec(
        "qwen2.5-7b",
        "Qwen2.5 7B",
        _llama(28, 28, 4, 3584, 18944, **(QWEN | dict(vocab=152064)), tied=False),
        "Qwen/Qwen2.5-7B",
    ),
    ModelSpec("qwen3-0.6b", "Qwen3 0.6B", _llama(28, 16, 8, 1024, 3072, **QWEN3), "Qwen/Qwen3-0.6B"),
    ModelSpec("qwen3-1.7b", "Qwen3 1.7B", _llama(28, 16, 8, 2048, 6144, **QWEN3), "Qwen/Qwen3-1.7B"),
    ModelSpec("qwen3-4b", "Qwen3 4B", _llama(36, 32, 8, 2560, 9728, **QWEN3), "Qwen/Qwen3-4B"),
    ModelSpec("qwen3-8b", "Qwen3 8B", _llama(36, 32, 8, 4096, 12288, **QWEN3, tied=False), "Qwen/Qwen3-8B"),
    ModelSpec(
        "llama-3.1-8b",
        "Llama 3.1 8B (gated)",
        _llama(32, 32, 8, 4096, 14336, 128256, 131072, 5e5, 1e-5, tied=False, scaling=LLAMA31_ROPE),
        "meta-llama/Llama-3.1-8B",
        gated=True,
    ),
    ModelSpec(
        "mistral-7b-v0.3",
        "Mistral 7B v0.3",
        _llama(32, 32, 8, 4096, 14336, 32768, 32768, 1e6, 1e-5, tied=False, family="mistral"),
        "mistralai/Mistral-7B-v0.3",
    ),
    ModelSpec(
        "tinyllama-1.1b",
        "TinyLlama 1.1B",
        _llama(22, 32, 4, 2048, 5632, 32000, 2048, 1e4, 1e-5, tied=False),
        "TinyLlama/TinyLlama_v1.1",
    ),
    ModelSpec(
        "llama-3.2-1b",
        "Llama 3.2 1B (gated)",
        _llama(16, 32, 8, 2048, 8192, 128256, 131072, 5e5, 1e-5, scaling=LLAMA3_ROPE),
        "meta-llama/Llama-3.2-1B",
        gated=True,
    ),
    ModelSpec(
        "llama-3.2-3b",
        "Llama 3.2 3B (gated)",
        _llama(28, 24, 8, 3072, 8192, 128256, 131072, 5e5, 1e-5, scaling=LLAMA3_ROPE),
        "meta-llama/Llama-3.2-3B",
        gated=True,
    ),
]


REGISTRY: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        ModelSpec("124M", "GPT-2 small", _gpt2(12, 12, 768), "openai-community/gpt2", ("gpt2",)),
        ModelSpec(
            "355M", "GPT-2 medium", _gpt2(24, 16, 1024), "openai-community/gpt2-medium", ("gpt2-medium",)
        ),
        ModelSpec("774M", "GPT-2 large", _gpt2(36, 20, 1280), "openai-community/gpt2-large", ("gpt2-large",)),
        ModelSpec("1558M", "GPT-2 XL", _gpt2(48, 25, 1600), "openai-community/gpt2-xl", ("gpt2-xl",)),
        ModelSpec("t5-small", "T5 small", _t5(6, 8, 512, 2048, False), "google-t5/t5-small"),
        ModelSpec("flan-t5-small", "Flan-T5 small", _t5(8, 6, 512, 1024, True), "google/flan-t5-small"),
        ModelSpec("flan-t5-base", "Flan-T5 base", _t5(12, 12, 768, 2048, True), "google/flan-t5-base"),
        ModelSpec("flan-t5-large", "Flan-T5 large", _t5(24, 16, 1024, 2816, True), "google/flan-t5-large"),
        ModelSpec("flan-t5-xl", "Flan-T5 XL", _t5(24, 32, 2048, 5120, True), "google/flan-t5-xl"),
        ModelSpec(
            "random-target",
            "random weights, 6x256 (timing only)",
            GPT2Config(n_layer=6, n_head=4, n_embd=256, n_ctx=1024),
            random_seed=0,
        ),
        ModelSpec(
            "random-124M",
            "random weights, GPT-2 124M's shape (timing only)",
            _gpt2(12, 12, 768),
            random_seed=0,
        ),
        ModelSpec(
            "random-1558M",
            "random weights, GPT-2 XL's shape (timing only)",
            _gpt2(48, 25, 1600),
            random_seed=0,
        ),
        ModelSpec(
            "random-draft",
            "first layer of random-target (timing only)",
            GPT2Config(n_layer=1, n_head=4, n_embd=256, n_ctx=1024),
            random_seed=0,
            random_from="random-target",
        ),
        *LLAMA_FAMILY,
    ]
}
ALIASES = {alias: s.name for s in REGISTRY.values() for alias in s.aliases}
