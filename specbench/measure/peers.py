"""Peers: other implementations of the same decoding, timed in the same run as specbench's own.

- `transformers`: Hugging Face's `GPT2LMHeadModel` on the same weights; AR is `generate`, SD its
  assisted generation (`assistant_model=`) with the same draft, a constant K and no confidence
  threshold (with --dynamic-K: transformers' own heuristic schedule and threshold).
- `numpy`: the papers' algorithm with no cache (reference.py).

Each peer decodes one prompt and returns host token ids; bench.py alternates it with specbench's
AR and SD. Peers draft with a network: the draft model, or the target's first layers (layer-skip)
as a model of their own. Prompt lookup has no peer here.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from specbench.errors import SpecbenchError
from specbench.model import gpt2, hf_layout, reference
from specbench.model.weights import Model

NAMES = ("transformers", "numpy")
PEERS_EXTRA = "pip install torch==2.13.0 && pip install -e '.[peers]'"  # the CPU build of torch first


class PeerError(SpecbenchError):
    """A peer that cannot run these settings, or is not installed."""


@dataclasses.dataclass(frozen=True)
class PeerResult:
    name: str
    version: str
    ar_times_s: list[float]
    sd_times_s: list[float]
    ar_tokens: list[int]
    sd_tokens: list[int]
    accepted: list[int] | None  # drafts accepted each round, where the peer tells


def draft_model(drafter, draft: Model | None, target: Model) -> Model:
    """The network a peer drafts with: the draft model, or (layer-skip) the target's first
    drafter.config.n_layer blocks with its final norm and head, as a model of their own."""
    if drafter.kind == "model":
        return draft
    if drafter.kind != "layerskip":
        raise PeerError(f"peers draft with a network; the {drafter.kind} drafter has no peer", "peer")
    L = drafter.config.n_layer
    first = lambda node: {k: first(v) for k, v in node.items()} if isinstance(node, dict) else node[:L]
    params = {**target.params, "blocks": first(target.params["blocks"])}
    return Model(f"{target.name}[:{L}]", drafter.config, params, "random")


class NumpyPeer:
    """reference.py's no-cache AR and SD, on float32 copies of the weights."""

    name = "numpy"

    def __init__(self, draft: Model, target: Model, dynamic_K: bool):
        if dynamic_K:
            raise PeerError("numpy runs the papers' constant K; leave out --dynamic-K", "peer")
        if target.params["wte"].dtype != np.float32:
            raise PeerError("numpy has no bfloat16: use --dtype float32", "peer")
        self.version = np.__version__
        self.draft = (reference.as_numpy(draft.params), draft.config)
        self.target = (reference.as_numpy(target.params), target.config)

    def autoregressive(self, prompt, n_tokens, warp, seed):
        rng = np.random.default_rng(seed)
        return reference.autoregressive(self.target, prompt, n_tokens, rng, *astuple(warp)), None

    def speculative(self, prompt, n_tokens, K, warp, seed):
        rng = np.random.default_rng(seed)
        return reference.speculative(self.draft, self.target, prompt, n_tokens, K, rng, *astuple(warp))


class TransformersPeer:
    """Hugging Face transformers on the same weights: `generate`, and assisted generation."""

    name = "transformers"

    def __init__(self, draft: Model, target: Model, dynamic_K: bool, on_gpu: bool):
        try:
            import torch
            import transformers
        except ImportError:
            raise PeerError(f"transformers needs the peers extra: {PEERS_EXTRA}", "peer") from None
        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        self.device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
        self.version = f"{transformers.__version__} (torch {torch.__version__}, {self.device})"
        dtype = torch.bfloat16 if str(target.params["wte"].dtype) == "bfloat16" else torch.float32
        with tempfile.TemporaryDirectory(prefix="specbench-peer-") as tmp:
            load = lambda m, i: transformers.GPT2LMHeadModel.from_pretrained(
                hf_directory(m, f"{tmp}/{i}"), dtype=dtype
            ).to(self.device)
            self.target, self.draft = load(target, 0).eval(), load(draft, 1).eval()
        g = self.draft.generation_config  # the assistant's schedule is read from its own config
        g.num_assistant_tokens_schedule = "heuristic" if dynamic_K else "constant"
        if not dynamic_K:
            g.assistant_confidence_threshold = 0.0  # else transformers stops drafting below 0.4

    def generate(self, prompt, n_tokens, warp, seed, **assist):
        torch = self.torch
        torch.manual_seed(seed)
        x = torch.tensor([prompt], device=self.device)
        sampled = warp.temperature > 0
        options = dict(
            do_sample=sampled,
            temperature=warp.temperature if sampled else None,
            top_k=(warp.top_k or 0) if sampled else None,  # 0: off (transformers' default is 50)
            top_p=(warp.top_p or 1.0) if sampled else None,
        )
        with torch.inference_mode():
            out = self.target.generate(
                x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=n_tokens,
                eos_token_id=None,  # specbench never stops early: N tokens, always
                pad_token_id=0,
                **options,
                **assist,
            )
        return out[0, len(prompt) :].tolist()

    def autoregressive(self, prompt, n_tokens, warp, seed):
        return self.generate(prompt, n_tokens, warp, seed), None

    def speculative(self, prompt, n_tokens, K, warp, seed):
        self.draft.generation_config.num_assistant_tokens = K
        return self.generate(prompt, n_tokens, warp, seed, assistant_model=self.draft), None


def astuple(warp) -> tuple:
    return warp.temperature, warp.top_k, warp.top_p


def hf_directory(model: Model, scratch: str) -> str:
    """A directory transformers can load `model` from: its own, or (random weights, a layer-skip
    draft) a copy saved in the HF layout under `scratch`."""
    if model.source != "random" and hf_layout.is_model_dir(Path(model.source)):
        return model.source
    hf_layout.save(scratch, model.params, model.config)
    return scratch


def make_peers(names, drafter, draft: Model | None, target: Model, batch: int, on_gpu: bool) -> tuple:
    """The peers asked for, loaded and checked for these settings (PeerError otherwise)."""
    if not names:
        return ()
    if batch != 1:
        raise PeerError("peers decode one sequence at a time: use --batch 1", "peer")
    network = draft_model(drafter, draft, target)
    dynamic = drafter.confidence is not None
    make = {
        "numpy": lambda: NumpyPeer(network, target, dynamic),
        "transformers": lambda: TransformersPeer(network, target, dynamic, on_gpu),
    }
    return tuple(make[name]() for name in names)


def first_difference(ours: list[int], theirs: list[int]) -> int | None:
    """The first position where two token lists differ, or None."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def difference_note(
    target: Model, prompt: list[int], ours: list[int], theirs: list[int], who: str
) -> str | None:
    """Where `theirs` first leaves specbench's tokens at T = 0, with the target's logits of the two
    candidates there (a near tie that float rounding may flip), or None where they agree."""
    i = first_difference(ours, theirs)
    if i is None:
        return None
    if i >= min(len(ours), len(theirs)):
        return f"{who} gave {len(theirs)} tokens, specbench {len(ours)}"
    logits = np.asarray(gpt2.gpt2(target.params, np.asarray(prompt + ours[:i]), target.config)[-1])
    a, b = ours[i], theirs[i]
    return (
        f"{who} differs from token {i + 1}: specbench chose {a} (target logit {logits[a]:.5f}), "
        f"{who} chose {b} (target logit {logits[b]:.5f})"
    )
