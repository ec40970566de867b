"""An MTP head: the multi-token-prediction layer a model ships in its own checkpoint, drafting
for it (DeepSeek-V3, arXiv:2412.19437, §2.2; MiMo, arXiv:2505.07608). The engines draft with it by
default (vLLM `method: mtp`, SGLang's NextN). One layer over the target's feature f_j and the
embedding of the token after it (+ the position's embedding where the family has one, GPT-2's):

    e    = embed(t_{j+1})                 zero at vLLM's position 0 where the format says so
    x    = proj([enorm(e), hnorm(f_j)])   or [hnorm(f_j), enorm(e)]: the format's order; no bias
    x    = block(x)                       one decoder layer of the target's family, its norms the family's
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
the head without a step index. The head's parameters use its family's names (`blocks` with one
layer), plus `fc` (the projection, [2H, H]), `embed_norm`, `hidden_norm`, `out_norm`, `ln_f`
(DeepSeek's shared_head.norm) and the layer's own `lm_head` and `wte` where it has them. The
engines define these layouts over their own families' blocks; specbench reads them over any
decoder family's block (a GPT-2 target's MTP layer: `python -m specbench.train mtp`), its norms
the family's (GPT-2's layer norms, with biases). On disk: checkpoints/mtp_files.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from specbench.model.nets import decoder, families
from specbench.model.nets.gpt2 import GPT2Config
from specbench.model.nets.layouts import as_weights, to_layout, unembedding
from specbench.model.nets.llama import LlamaConfig
from specbench.model.nets.products import Features

OWN = ("embed_norm", "hidden_norm", "fc", "out_norm", "ln_f", "lm_head", "wte")  # beside `blocks`


@dataclasses.dataclass(frozen=True)
class MtpFormat:
    """One engine's MTP layout, defined once: where its tensors sit and what its layer computes.
    `parts(k, L, layers)` and `block(k, L, layers)` are the key prefixes of MTP layer k's own
    tensors and of its decoder layer, for a target of L layers whose own layers' keys start with
    `layers` ("model.layers.", GPT-2's "h."); `owns(key, L, n, layers)` whether a key is one of n
    MTP layers' (a target's loader leaves them to the head). Norm names are None where it has none."""

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
    lambda k, L, layers: f"{layers}{L + k}.",
    lambda k, L, layers: f"{layers}{L + k}.",
    lambda key, L, n, layers: (
        (m := re.match(re.escape(layers) + r"(\d+)\.", key)) is not None and L <= int(m[1]) < L + n
    ),
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
    lambda k, L, layers: f"model.mtp_layers.{k}.",
    lambda k, L, layers: f"model.mtp_layers.{k}.",
    lambda key, L, n, layers: key.startswith("model.mtp_layers."),
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
    lambda k, L, layers: "mtp.",
    lambda k, L, layers: f"mtp.layers.{k}.",
    lambda key, L, n, layers: key.startswith("mtp."),
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
    lambda k, L, layers: f"mtp_layers.{k}.",
    lambda k, L, layers: f"mtp_layers.{k}.",
    lambda key, L, n, layers: key.startswith("mtp_layers."),
    "token_layernorm",
    "hidden_layernorm",
    "input_proj",
    out_norm="final_layernorm",
)
FORMATS = (DEEPSEEK, MIMO, QWEN3_NEXT, SPECULATORS)


def is_mtp_key(key: str, n_layer: int, n_mtp: int, layers: str) -> bool:
    """Whether a checkpoint's key belongs to one of its n_mtp MTP layers, in any format (`layers`:
    the prefix of its own layers' keys)."""
    return any(f.owns(key, n_layer, n_mtp, layers) for f in FORMATS)


@dataclasses.dataclass(frozen=True)
class MtpLayer:
    """What an MTP head's config adds to its block's (its target's family's config with
    n_layer = 1): its format, and how many MTP layers its folder holds (it drafts with the first)."""

    mtp: MtpFormat = DEEPSEEK
    mtp_layers: int = 1


@dataclasses.dataclass(frozen=True)
class MtpConfig(MtpLayer, LlamaConfig):
    """An MTP head over a Llama-family block (the engines' own)."""


@dataclasses.dataclass(frozen=True)
class Gpt2MtpConfig(MtpLayer, GPT2Config):
    """An MTP head over a GPT-2 block (the bundled tiny-target's: `python -m specbench.train mtp`)."""


CONFIGS = {LlamaConfig: MtpConfig, GPT2Config: Gpt2MtpConfig}  # by the family's config type


def is_head(config) -> bool:
    """Whether a head's config is an MTP layer's (eagle.py asks, to pick its format)."""
    return isinstance(config, MtpLayer)


def net(config):
    """The module of the head's block: its target's family's (gpt2.py, llama.py)."""
    return families.family_of(config).module


def config_for(target, fmt: MtpFormat, layers: int = 1):
    """The head's config for a target: its block is one of the target's, of its family."""
    base = families.family_of(target).config_type
    fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(base)}
    return CONFIGS[base](**(fields | {"n_layer": 1}), mtp=fmt, mtp_layers=layers)


def norm(params, name: str, x, config):
    """The head's norm `name` over x: its family's final norm's kind (RMSNorm, GPT-2's layer
    norm), with the format's gain."""
    p = params[name]
    return net(config).final_norm({"ln_f": p | {"weight": config.mtp.gain(p["weight"])}}, x, config)


def embed(params, feats_in, tokens, positions, config):
    """x_j = proj of the normed embedding of t_j and the normed feature of position j - 1, in the
    format's order (+ wpe[j] for a GPT-2 block): [n_seq, H]. vLLM's position 0 is this row's
    position 1."""
    e = params["wte"][tokens]
    if config.mtp.mask_first:
        e = jnp.where((positions == 1)[:, None], jnp.zeros_like(e), e)
    e = norm(params, "embed_norm", e, config)
    f = norm(params, "hidden_norm", feats_in.astype(e.dtype), config)
    both = [e, f] if config.mtp.embed_first else [f, e]
    where = net(config).position_embedding(params, positions)
    return jnp.concatenate(both, axis=-1) @ params["fc"]["weight"] + where


def step(params, cache, feats_in, tokens, pos, config, logits_at=None, tree=None):
    """eagle.step for an MTP head (the module's equations): (logits [n_seq, V] or [1, V] at row
    `logits_at`; h [n_seq, H], the features the next rows read; the new cache)."""
    fmt, module = config.mtp, net(config)

    def blocks(p, x, cache, pos, c, tree, taps):
        x, kv = module.blocks(p, x, cache, pos, c, tree, first=1)
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


def attach(head_params: dict, target_params, config):
    """The weights the head drafts with, in the target's layout: its own, with the target's
    embedding and output head where it has none of its own (and GPT-2's position embedding)."""
    target = as_weights(target_params)
    positions = {k: target[k] for k in net(config).head_keys(config) if k == "wpe"}
    shared = positions | {"wte": target["wte"], "lm_head": unembedding(target.arrays)}
    return to_layout(shared | head_params, target.layout)


def joined(config, target):
    """The head as it drafts for a target: its block the target's (with one layer)."""
    return config_for(target, config.mtp, config.mtp_layers)


def mismatch(config, target, params=None) -> str | None:
    """Why the head cannot draft for this target, or None."""
    ours, theirs = families.family_of(config), families.family_of(target)
    if ours is not theirs:
        block, kind = ours.display_name(config), theirs.display_name(target)
        return f"is an MTP layer over a {block} block; the target is a {kind}"
    if config.n_embd != target.n_embd or config.n_vocab != target.n_vocab:
        return (
            f"is {config.n_embd} wide over {config.n_vocab:,} tokens; the target is {target.n_embd} "
            f"wide over {target.n_vocab:,}"
        )
    return None


def words(config) -> str:
    """What a header says of the head."""
    layers = f"the first of its {config.mtp_layers} MTP layers" if config.mtp_layers > 1 else "its MTP layer"
    return f"{layers}, {config.mtp.name}'s layout, over the target's features"


def init_params(config, seed: int = 0, own_head: bool = False) -> dict:
    """Random weights in this module's names (N(0, 0.02) matrices, gains about one, GPT-2's norms'
    biases zero): for the tests and where training starts. `own_head`: the layer's own embedding
    and head (DeepSeek's)."""
    rng = np.random.default_rng(seed)
    H, fmt = config.n_embd, config.mtp
    fresh = net(config).init_params(config, seed + 1)
    bias = {"bias": jnp.zeros(H, jnp.float32)} if "bias" in fresh["ln_f"] else {}
    gain = lambda: (
        {"weight": jnp.asarray(1.0 - fmt.zero_centred + 0.1 * rng.standard_normal(H), jnp.float32)} | bias
    )
    params = {
        "embed_norm": gain(),
        "hidden_norm": gain(),
        "fc": {"weight": jnp.asarray(0.02 * rng.standard_normal((2 * H, H)), jnp.float32)},
        "blocks": fresh["blocks"],
    }
    params |= {"out_norm": gain()} if fmt.out_norm else {}
    params |= {"ln_f": gain()} if fmt.head_norm else {}
    if own_head:
        normal = lambda: jnp.asarray(0.02 * rng.standard_normal((config.n_vocab, H)), jnp.float32)
        params |= {"wte": normal(), "lm_head": normal()}
    return params
