"""PARD's drafts: one forward of a draft model proposes all K (An et al. 2025, "PARD: Accelerating
LLM Inference with Low-Cost PARallel Draft Model Adaptation", arXiv:2504.18583).

A PARD draft is an ordinary draft model taught one more token, the mask (its config.json's
`pard_token`: an unused id of its vocabulary, or one appended after the target's, as
`specbench.train pard` appends one to GPT-2's 50,257). After the real tokens up to the pending
one at n - 1 it reads K - 1 masks at n .. n + K - 2, in one causal step, and the logits of row
n - 1 + i give draft i + 1:

    rows:    t_{s} .. t_{n-1}   m  m .. m        (2K rows from s = max(n - K - 1, 0))
    drafts:            d_1     d_2 .. d_K        each drawn from its own row's distribution

Each draft is drawn from its own row, which depends on the committed tokens only, so the row is
exactly the distribution p it came from and the accept/reject rule keeps sampling exact. The
masks' keys and values written at n .. are not the accepted tokens': the next round re-reads the
K + 1 real positions up to its own pending token (a + 1 <= K + 1 of them new), which rewrites
them, as PARD's loop re-reads its kept tokens. Drafting costs one step of 2K rows a round
(draft_cost.ONE_PASS): `specbench.train pard` adapts a draft model to it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from specbench.errors import DecodeError
from specbench.model.decode import sampling
from specbench.model.decode.draft_states import NetworkState
from specbench.model.decode.drafter import Drafter
from specbench.model.decode.sampling import Warp, draw
from specbench.model.nets import layouts, network, products
from specbench.model.nets.network import Model


def mask_id(config) -> int:
    """The mask token of a PARD draft of this config (its config.json's pard_token)."""
    return config.mask_token


def pass_rows(K: int) -> int:
    """The rows of one drafting pass: the K + 1 real positions up to the pending token and K - 1 masks."""
    return 2 * K


def own_draft(config, name: str) -> str | None:
    """The folder that drafts for `--drafter pard` where --draft is not a PARD draft: <name>-pard
    in gpt2_weights/ (`python -m specbench.train pard` writes tiny-draft-pard), or None where it is one."""
    return None if mask_id(config) is not None else f"{name}-pard"


def pard_weights(drafter: Drafter, draft: Model | None, target: Model, reference=None):
    """A PARD draft's own weights; DecodeError unless its vocabulary is its target's and the mask."""
    if draft is None:
        raise DecodeError("the pard drafter needs a PARD draft model (--draft)", "draft")
    if draft.config.mask_token is None:
        raise DecodeError(
            f"{draft.name} has no mask token (its config.json's pard_token), and gpt2_weights/ has no "
            f"{own_draft(draft.config, draft.name)}: a PARD draft is a draft model taught one (train "
            f"one: python -m specbench.train pard --draft {draft.name} --out gpt2_weights/"
            f"{own_draft(draft.config, draft.name)})",
            "draft",
        )
    if network.vocabulary(draft.config) != target.config.n_vocab:
        raise DecodeError(f"{draft.name} does not share {target.name}'s vocabulary", "draft")
    return draft.params


def pard_propose(drafter: Drafter, params, dstate, tokens, n, key, warp: Warp, K: int, n_vocab: int):
    """PARD's K drafts from one step (the module's rows), each drawn from its own row; with dynamic
    K those from the first whose own top probability is below the threshold on are not proposed.
    Returns (state, drafts [K], p [K, V], n_drafted)."""
    config, rows = drafter.config, pass_rows(K)
    s = jnp.maximum(n - K - 1, 0)
    real = lax.dynamic_slice(tokens, (s,), (rows,))
    read = jnp.where(s + jnp.arange(rows) <= n - 1, real, mask_id(config))
    rows_drafted = products.Rows(n - 1 - s, K)  # rows n - 1 .. n + K - 2: the head runs on these alone
    logits, cache = network.step(params, dstate.cache, read, s, config, logits_at=rows_drafted)
    head_tokens = layouts.head_tokens(params)
    V = sampling.p_width(warp, n_vocab)
    if head_tokens is None:
        logits = logits[:, :n_vocab]  # never the mask
    picked, p = jax.vmap(lambda k, row: draw(k, row, warp))(jax.random.split(key, K), logits)
    drafts = picked if head_tokens is None else head_tokens[picked]
    columns = V if head_tokens is None or V == 0 else head_tokens.shape[0]  # none at T = 0 (p_width)
    p = p[:, :columns]
    if columns != V:  # column j is token head_tokens[j]; p is zero at every other token
        p = jnp.zeros((K, V), jnp.float32).at[:, head_tokens].set(p)
    n_drafted = jnp.int32(K)
    if drafter.confidence is not None:  # the first draft short of the threshold is not proposed
        top = jnp.max(jax.nn.softmax(logits.astype(jnp.float32)), axis=-1)
        n_drafted = jnp.argmin(jnp.append(top >= drafter.confidence, False)).astype(jnp.int32)
        p = sampling.zero_after(p, n_drafted)
    return NetworkState(cache), drafts.astype(jnp.int32), p, n_drafted
