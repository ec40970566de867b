"""An MTP head: the multi-token-prediction layer a model ships in its own checkpoint, drafting
for it (DeepSeek-V3, arXiv:2412.19437, §2.2; MiMo, arXiv:2505.07608). The engines draft with it by
default (vLLM `method: mtp`, SGLang's NextN). One layer over the target's feature f_j and the
embedding of the token after it:

    e    = embed(t_{j+1})                 zero at vLLM's position 0 where the format says so
    x    = proj([enorm(e), hnorm(f_j)])   or [hnorm(f_j), enorm(e)]: the format's order; no bias
    x    = block(x)                       one decoder layer of the target's family
    h    = out_norm(x)                    where the format has one (MiMo's final_layernorm, ...)
    logits for t_{j+2} = head(head_norm(h))   DeepSeek's shared_head.norm; the others read h

h is what the next draft reads as its feature, as vLLM's proposer carries it: DeepSeek's block
output before shared_head.norm, MiMo's after final_layernorm. The formats (FORMATS) differ in
their keys, the concatenation's order, where the norms sit, and which feature of the target they
read: vLLM hands DeepSeek and Qwen3-Next the last hidden state after the final norm, MiMo and
speculators' heads the one before it (products.Features). Each record cites its engine file.

Rows are eagle.py's: row j reads token t_j and the feature of position j - 1, at position j,
where vLLM puts (f_{j-1}, t_j) at j - 1; rotary attention sees only differences. Row 0 has no
feature (vLLM has no such row), and every later row ignores its key (attention's `first`). A
folder with several MTP layers drafts every position with its first, as vLLM's proposer calls
the head without a step index. The head's parameters use llama.py's names (`blocks` with one
layer), plus `fc` (the projection, [2H, H]), `embed_norm`, `hidden_norm`, `out_norm`, `ln_f`
(DeepSeek's shared_head.norm) and the layer's own `lm_head` and `wte` where it has them. On disk:
checkpoints/mtp_files.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from specbench.model.nets import decoder, llama
from specbench.model.nets.layouts import as_weights, to_layout, unembedding
from specbench.model.nets.llama import LlamaConfig, rms_norm
from specbench.model.nets.products import Features

OWN = ("embed_norm", "hidden_norm", "fc", "out_norm", "ln_f", "lm_head", "wte")  # beside `blocks`


@dataclasses.dataclass(frozen=True)
class MtpFormat:
    """One engine's MTP layout, defined once: where its tensors sit and what its layer computes.
    `parts(k, L)` and `block(k, L)` are the key prefixes of MTP layer k's own tensors and of its
    decoder layer, for a target of L layers; `owns(key, L, n)` whether a key is one of n MTP
    layers' (a target's loader leaves them to the head). Norm names are None where it has none."""

    name: str  # a row's mtp_format
    source: str  # the engine file that defines it
    parts: Callable[[int, int], str]
    block: Callable[[int, int], str]
    owns: Callable[[str, int, int], bool]
    embed_norm: str
    hidden_norm: str
    proj: str
    out_norm: str | None = None  # inside the layer: what it returns, and the next draft reads, is normed
    head_norm: str | None = None  # before the head only: the layer returns, and carries, x unnormed
    own_head: str | None = None  # the layer's own output head (else the target's)
    own_embed: str | None = None  # the layer's own embedding (else the target's)
    embed_first: bool = True  # [enorm(e), hnorm(f)]; else [hnorm(f), enorm(e)]
    target_normed: bool = False  # reads the target's last hidden state after its final norm
    mask_first: bool = False  # vLLM zeroes the embedding at its position 0
    zero_centred: bool = False  # its own norms scale by 1 + weight (Qwen3-Next's RMSNorm)

    def gain(self, w):
        """A norm's scale from its stored weight."""
        return w + 1.0 if self.zero_centred else w


DEEPSEEK = MtpFormat(
    "deepseek",
    "vllm/model_executor/models/deepseek_mtp.py (DeepSeekMultiTokenPredictorLayer); its target's "
    "hidden state is DeepseekV2Model.forward's, after model.norm (deepseek_v2.py)",
    lambda k, L: f"model.layers.{L + k}.",
    lambda k, L: f"model.layers.{L + k}.",
    lambda key, L, n: (m := re.match(r"model\.layers\.(\d+)\.", key)) is not None and L <= int(m[1]) < L + n,
    "enorm",
    "hnorm",
    "eh_proj",
    head_norm="shared_head.norm",
    own_head="shared_head.head",
    own_embed="embed_tokens",
    target_normed=True,
    mask_first=True,
)
MIMO = MtpFormat(
    "mimo",
    "vllm/model_executor/models/mimo_mtp.py (MiMoMultiTokenPredictorLayer); its target's hidden "
    "state is MiMoModel.forward's, hidden + residual before model.norm (mimo.py)",
    lambda k, L: f"model.mtp_layers.{k}.",
    lambda k, L: f"model.mtp_layers.{k}.",
    lambda key, L, n: key.startswith("model.mtp_layers."),
    "token_layernorm",
    "hidden_layernorm",
    "input_proj",
    out_norm="final_layernorm",
    embed_first=False,
    mask_first=True,
)
QWEN3_NEXT = MtpFormat(
    "qwen3_next",
    "vllm/model_executor/models/qwen3_next_mtp.py (Qwen3NextMultiTokenPredictor: Qwen3NextRMSNorm, "
    "1 + weight); its target's hidden state is Qwen3NextModel.forward's, after model.norm",
    lambda k, L: "mtp.",
    lambda k, L: f"mtp.layers.{k}.",
    lambda key, L, n: key.startswith("mtp."),
    "pre_fc_norm_embedding",
    "pre_fc_norm_hidden",
    "fc",
    out_norm="norm",
    target_normed=True,
    zero_centred=True,
)
SPECULATORS = MtpFormat(
    "speculators",
    "speculators src/speculators/models/mtp/model_definitions.py (MTPLayerMixin; embed_tokens and "
    "lm_head are the verifier's); its verifier's hidden state is read before the final norm",
    lambda k, L: f"mtp_layers.{k}.",
    lambda k, L: f"mtp_layers.{k}.",
    lambda key, L, n: key.startswith("mtp_layers."),
    "token_layernorm",
    "hidden_layernorm",
    "input_proj",
    out_norm="final_layernorm",
)
FORMATS = (DEEPSEEK, MIMO, QWEN3_NEXT, SPECULATORS)


def is_mtp_key(key: str, n_layer: int, n_mtp: int) -> bool:
    """Whether a checkpoint's key belongs to one of its n_mtp MTP layers, in any format."""
    return any(f.owns(key, n_layer, n_mtp) for f in FORMATS)


@dataclasses.dataclass(frozen=True)
class MtpConfig(LlamaConfig):
    """The head's one block (the target's config with n_layer = 1), its format, and how many MTP
    layers its folder holds (it drafts with the first)."""

    mtp: MtpFormat = DEEPSEEK
    mtp_layers: int = 1


def config_for(target: LlamaConfig, fmt: MtpFormat, layers: int = 1) -> MtpConfig:
    """The head's config for a target: its block is one of the target's."""
    fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(LlamaConfig)}
    return MtpConfig(**(fields | {"n_layer": 1}), mtp=fmt, mtp_layers=layers)


def norm(params, name: str, x, config: MtpConfig):
    """RMSNorm of x with the head's norm `name` (its format's gain)."""
    return rms_norm(x, config.mtp.gain(params[name]["weight"]), config.rms_norm_eps)


def embed(params, feats_in, tokens, positions, config: MtpConfig):
    """x_j = proj of the normed embedding of t_j and the normed feature of position j - 1, in the
    format's order: [n_seq, H]. vLLM's position 0 is this row's position 1."""
    e = params["wte"][tokens]
    if config.mtp.mask_first:
        e = jnp.where((positions == 1)[:, None], jnp.zeros_like(e), e)
    e = norm(params, "embed_norm", e, config)
    f = norm(params, "hidden_norm", feats_in.astype(e.dtype), config)
    both = [e, f] if config.mtp.embed_first else [f, e]
    return jnp.concatenate(both, axis=-1) @ params["fc"]["weight"]


def step(params, cache, feats_in, tokens, pos, config: MtpConfig, logits_at=None, tree=None):
    """eagle.step for an MTP head (the module's equations): (logits [n_seq, V] or [1, V] at row
    `logits_at`; h [n_seq, H], the features the next rows read; the new cache)."""
    fmt = config.mtp

    def blocks(p, x, cache, pos, c, tree, taps):
        x, kv = llama.blocks(p, x, cache, pos, c, tree, first=1)
        return (norm(p, "out_norm", x, c) if fmt.out_norm else x), kv

    def head_norm(p, x, c):
        return norm(p, "ln_f", x, c) if fmt.head_norm else x

    reads = lambda p, t, positions, c: embed(p, feats_in, t, positions, c)
    parts = decoder.Parts(reads, blocks, head_norm)
    logits, cache, h = decoder.step(parts, params, cache, tokens, pos, config, logits_at, tree, hidden=True)
    return logits, h, cache


def reads(config: MtpConfig):
    """What the target's steps hand the head: its last hidden state before the final norm (True),
    or after it (Features.NORMED), as the format's engine hands it."""
    return Features.NORMED if config.mtp.target_normed else True


def attach(head_params: dict, target_params, config: MtpConfig):
    """The weights the head drafts with, in the target's layout: its own, with the target's
    embedding and output head where it has none of its own."""
    target = as_weights(target_params)
    shared = {"wte": target["wte"], "lm_head": unembedding(target.arrays)}
    return to_layout(shared | head_params, target.layout)


def joined(config: MtpConfig, target) -> MtpConfig:
    """The head as it drafts for a target: its block the target's (with one layer)."""
    return config_for(target, config.mtp, config.mtp_layers)


def mismatch(config: MtpConfig, target, params=None) -> str | None:
    """Why the head cannot draft for this target (a Llama-family one: eagle.py asks), or None."""
    if config.n_embd != target.n_embd or config.n_vocab != target.n_vocab:
        return (
            f"is {config.n_embd} wide over {config.n_vocab:,} tokens; the target is {target.n_embd} "
            f"wide over {target.n_vocab:,}"
        )
    return None


def words(config: MtpConfig) -> str:
    """What a header says of the head."""
    layers = f"the first of its {config.mtp_layers} MTP layers" if config.mtp_layers > 1 else "its MTP layer"
    return f"{layers}, {config.mtp.name}'s layout, over the target's features"


def init_params(config: MtpConfig, seed: int = 0, own_head: bool = False) -> dict:
    """Random weights in this module's names (N(0, 0.02) matrices, gains about one): for the tests
    and where training starts. `own_head`: the layer's own embedding and head (DeepSeek's)."""
    rng = np.random.default_rng(seed)
    H, fmt = config.n_embd, config.mtp
    gain = lambda: {"weight": jnp.asarray(1.0 - fmt.zero_centred + 0.1 * rng.standard_normal(H), jnp.float32)}
    block = llama.init_params(config, seed + 1)["blocks"]
    params = {
        "embed_norm": gain(),
        "hidden_norm": gain(),
        "fc": {"weight": jnp.asarray(0.02 * rng.standard_normal((2 * H, H)), jnp.float32)},
        "blocks": block,
    }
    params |= {"out_norm": gain()} if fmt.out_norm else {}
    params |= {"ln_f": gain()} if fmt.head_norm else {}
    if own_head:
        normal = lambda: jnp.asarray(0.02 * rng.standard_normal((config.n_vocab, H)), jnp.float32)
        params |= {"wte": normal(), "lm_head": normal()}
    return params
