"""How large a run's buffers are, and whether its settings fit the models: the prompt's padded
bucket, the cache length (room for the prompt, N new tokens and a round's drafts), and the one
check every entry point makes, each fault blamed on its setting (errors.DecodeError)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from specbench.errors import DecodeError
from specbench.model.nets import network
from specbench.model.nets.network import Model


def bucket(n: int, smallest: int = 16) -> int:
    """The power of two >= n (at least `smallest`): prompts are padded to a few fixed shapes."""
    return max(smallest, 1 << (max(n, 1) - 1).bit_length())


class Planned(int):
    """A cache length that generate.plan chose or checked for a generation's prompts and settings
    (once, where a run is prepared): a generation given one checks nothing again, so that nothing
    is checked inside a timed region. It is the int it holds everywhere else (a static argument)."""


def plan_max_len(n_prompt: int, n_tokens: int, K: int, n_ctx: int) -> int:
    """Cache length for a run: room for prompt + N + K + 1, rounded up to a bucket, <= n_ctx."""
    return min(n_ctx, bucket(max(n_prompt + n_tokens + K + 1, bucket(n_prompt)), 64))


def validate(prompt_ids, n_tokens: int, K: int, models: list[Model], max_len: int | None, reach: str = "K"):
    """Raise DecodeError, naming the setting to blame, unless one prompt can be decoded as asked.
    K is what a round writes past the pending token; `reach` names the setting that sets it: "K",
    or "tree" (a tree's drafts, Drafter.reach)."""
    if len(prompt_ids) < 1:
        raise DecodeError("prompt must have at least one token", "prompt")
    if n_tokens < 1:
        raise DecodeError(f"n-tokens must be >= 1 (got {n_tokens})", "n_tokens")
    if K < 0:  # 0: autoregressive; speculative decoding needs K >= 1 (generate.speculative)
        raise DecodeError(f"K must be >= 0 (got {K})", "K")
    vocabs = {network.vocabulary(m.config) for m in models}
    if len(vocabs) > 1:
        raise DecodeError(
            f"draft and target must share the vocabulary (vocab sizes {sorted(vocabs)})", "draft"
        )
    n_vocab = vocabs.pop()
    if max(prompt_ids) >= n_vocab or min(prompt_ids) < 0:
        raise DecodeError(f"prompt token ids must be in 0..{n_vocab - 1}", "prompt")
    # the last round may write K tokens past N; the last token is never read back, so no + 1.
    # Blame what cannot fit: the prompt alone, then K (even with N = 2, the least), then N.
    n_ctx, P = min(m.config.n_ctx for m in models), len(prompt_ids)
    name = "K" if reach == "K" else "the tree's drafts"
    need, least = P + n_tokens + K, 2 + min(K, 1)
    if P + least > n_ctx:  # too long whatever N and K: say what fits with these, and at the least
        most = max(0, n_ctx - n_tokens - K)
        here = f"with n-tokens {n_tokens} and {name} {K}, a context of {n_ctx} allows at most {most}"
        raise DecodeError(f"has {P} tokens; {here} ({n_ctx - least} with the fewest)", "prompt")
    total = f"prompt ({P}) + n-tokens ({n_tokens}) + {name} ({K}) = {need} exceeds the context of {n_ctx}"
    if P + 2 + K > n_ctx:
        most = n_ctx - P - n_tokens
        limit = f"{most}" if most >= 1 else f"{n_ctx - P - 2} (with --n-tokens 2)"
        most = f"K can be at most {limit}" if reach == "K" else "use a smaller tree"
        raise DecodeError(f"{total}; {most}", reach)
    if need > n_ctx:
        raise DecodeError(f"{total}; n-tokens can be at most {n_ctx - P - K}", "n_tokens")
    if max_len is not None and need > max_len:
        raise DecodeError(
            f"prompt + n-tokens + {name} = {need} exceeds the cache length {max_len}", "n_tokens"
        )


def prompt_buffer(prompt_ids, max_len: int):
    """(prompt padded with zeros to its bucket [bucket] int32, its length [] int32)."""
    n_prompt = len(prompt_ids)
    buf = np.zeros(min(bucket(n_prompt), max_len), np.int32)
    buf[:n_prompt] = prompt_ids
    return jnp.asarray(buf), jnp.int32(n_prompt)
