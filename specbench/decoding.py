"""Autoregressive and speculative decoding over the cached GPT-2, with the statistics that explain them.

Speculative sampling: Chen et al. (DeepMind, 2023), "Accelerating Large Language Model
Decoding with Speculative Sampling", arXiv:2302.01318; Leviathan et al. (2023), "Fast Inference
from Transformers via Speculative Decoding", arXiv:2211.17192. p = draft, q = target.

Both methods start the same way: prefill the prompt and draw the first new token from the
target. The state then always has a *pending* token, the last one committed, that neither
cache has processed yet:

    tokens[0 .. n-1] committed;  caches valid for positions < n-1;  tokens[n-1] pending.

Autoregressive step: the target reads the pending token at n-1 and a token is drawn from q.

Speculative round (K drafts):
  1. The draft reads [tokens[n-2], tokens[n-1]] at n-2, n-1, then its own samples, K steps in
     all, keeping p for each. Re-reading tokens[n-2] is what makes an all-accepted round
     correct: the draft never read its K-th draft token, and this step writes it into its cache
     (when the previous round rejected, it rewrites an entry that was already right).
  2. The target verifies [tokens[n-1], x_1..x_K] at n-1 .. n+K-1 in one step: q_1..q_{K+1}.
  3. sampling.accept_reject: a accepted drafts, then one emitted token (residual or bonus).
  4. n += a + 1. Rollback is only the position: entries past it are masked, later overwritten.

Each round is one jitted program of fixed shape; `n`, positions and the token buffer are device
values, so nothing recompiles per round or per N. Two drivers run the same round function:
  * host loop: Python calls one round at a time and reads `n` back (one sync per round); it can
    record every round for `specbench trace`;
  * device loop: the whole generation is one `lax.while_loop` (AR: `lax.fori_loop`), so no
    Python dispatch per token; it is also what `jax.vmap` runs for the statistical tests.
Generation stops at exactly N new tokens; a last round that overshoots is cut.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench import drafters
from specbench.drafters import Drafter
from specbench.gpt2 import GPT2Config, init_cache, step
from specbench.sampling import Warp, accept_reject, draw, probs
from specbench.weights import Model


class DecodeError(ValueError):
    """An impossible decoding configuration; the message names the setting and what is allowed."""


@dataclasses.dataclass
class DecodeStats:
    """Counts from one generation. AR is the special case K = 0, one token per round."""

    K: int
    n_generated: int  # new tokens returned (exactly N)
    n_rounds: int  # speculative rounds (the first token comes from the prefill, not a round)
    accepted_hist: np.ndarray  # [K+1]: rounds in which 0, 1, ..., K drafts were accepted
    evaluated: np.ndarray  # [K]: rounds in which draft position i was tested
    accepted: np.ndarray  # [K]: rounds in which draft position i was accepted
    rounds: list[dict] | None = None  # per round (host loop with record=True): drafts, n_accepted, emitted
    drafted_hist: np.ndarray | None = None  # [K+1]: rounds in which 0, 1, ..., K drafts were proposed
    # a batch (batch.py): the counts above are summed over its n_seqs sequences
    n_seqs: int = 1
    batch_rounds: int | None = None  # rounds the batch ran: its slowest sequence's (one sequence: n_rounds)
    idle_slots: int = 0  # (sequence, round) slots in which a finished sequence waited for the others

    @property
    def tokens_per_round(self) -> float:
        """New tokens per target forward after the prefill, the resampled/bonus token included; AR: 1."""
        return (self.n_generated - self.n_seqs) / self.n_rounds if self.n_rounds else 1.0

    @property
    def rounds_run(self) -> int:
        """Rounds the decoding ran: a batch's batch_rounds, one sequence's n_rounds."""
        return self.n_rounds if self.batch_rounds is None else self.batch_rounds

    @property
    def tokens_per_batch_round(self) -> float:
        """New tokens per sequence per round the batch ran: tokens_per_round less what stragglers
        cost, since the batch runs until its slowest sequence is done."""
        slots = self.n_seqs * self.rounds_run
        return (self.n_generated - self.n_seqs) / slots if slots else 1.0

    @property
    def idle_fraction(self) -> float:
        """idle_slots / (sequences x rounds the batch ran): the share of batch slots wasted."""
        slots = self.n_seqs * self.rounds_run
        return self.idle_slots / slots if slots else 0.0

    @property
    def r(self) -> float:
        """tokens_per_round / (K+1): the r of the DeepMind paper (seed 003's footnote)."""
        return self.tokens_per_round / (self.K + 1)

    @property
    def alpha(self) -> float:
        """accepted / (accepted + rejections): MLE of Leviathan's per-token acceptance rate."""
        n_acc, n_eval = int(self.accepted.sum()), int(self.evaluated.sum())
        return n_acc / n_eval if n_eval else float("nan")

    @property
    def accept_rate_drafted(self) -> float:
        """accepted / (K * rounds): the "acceptance rate" of vLLM and llama.cpp, for comparison."""
        return int(self.accepted.sum()) / (self.K * self.n_rounds) if self.K and self.n_rounds else float("nan")

    @property
    def per_position(self) -> list[float]:
        return [a / e if e else float("nan") for a, e in zip(self.accepted.tolist(), self.evaluated.tolist())]


# ---------------------------------------------------------------------------------------------
# Sizes and validation


def bucket(n: int, smallest: int = 16) -> int:
    """The power of two >= n (at least `smallest`): prompts are padded to a few fixed shapes."""
    return max(smallest, 1 << (max(n, 1) - 1).bit_length())


def plan_max_len(n_prompt: int, n_tokens: int, K: int, n_ctx: int) -> int:
    """Cache length for a run: room for prompt + N + K + 1, rounded up to a bucket, <= n_ctx."""
    return min(n_ctx, bucket(max(n_prompt + n_tokens + K + 1, bucket(n_prompt)), 64))


def validate(prompt_ids, n_tokens: int, K: int, models: list[Model], max_len: int | None):
    if len(prompt_ids) < 1:
        raise DecodeError("prompt must have at least one token")
    if n_tokens < 1:
        raise DecodeError(f"n-tokens must be >= 1 (got {n_tokens})")
    if K < 0:
        raise DecodeError(f"K must be >= 1 (got {K})")
    vocabs = {m.config.n_vocab for m in models}
    if len(vocabs) > 1:
        raise DecodeError(f"draft and target must share the vocabulary (vocab sizes {sorted(vocabs)})")
    n_vocab = vocabs.pop()
    if max(prompt_ids) >= n_vocab or min(prompt_ids) < 0:
        raise DecodeError(f"prompt token ids must be in 0..{n_vocab - 1}")
    n_ctx = min(m.config.n_ctx for m in models)
    need = len(prompt_ids) + n_tokens + K + 1
    if need > n_ctx:
        raise DecodeError(f"prompt ({len(prompt_ids)}) + n-tokens ({n_tokens}) + K + 1 = {need} exceeds the "
                          f"context of {n_ctx}; n-tokens can be at most {n_ctx - len(prompt_ids) - K - 1}")
    if max_len is not None and need > max_len:
        raise DecodeError(f"prompt + n-tokens + K + 1 = {need} exceeds the cache length {max_len}")


# ---------------------------------------------------------------------------------------------
# The pure programs (jitted below with static configs and sizes)


def _start(params, prompt_buf, n_prompt, key, config: GPT2Config, warp: Warp, max_len: int):
    """Prefill the prompt (padded to a bucket), draw the first token from q. Returns the state."""
    cache = init_cache(config, max_len, params["wte"].dtype)
    logits, cache = step(params, cache, prompt_buf, 0, config, logits_at=n_prompt - 1)
    key, k_first = jax.random.split(key)
    first, _ = draw(k_first, logits[0], warp)
    tokens = jnp.zeros(max_len, jnp.int32).at[: prompt_buf.shape[0]].set(prompt_buf).at[n_prompt].set(first)
    return {"tokens": tokens, "n": jnp.asarray(n_prompt + 1, jnp.int32), "key": key, "target_cache": cache}


def _ar_step(params, state, config: GPT2Config, warp: Warp):
    key, k = jax.random.split(state["key"])
    n, tokens = state["n"], state["tokens"]
    logits, cache = step(params, state["target_cache"], lax.dynamic_slice(tokens, (n - 1,), (1,)), n - 1, config)
    token, _ = draw(k, logits[0], warp)
    return {"tokens": tokens.at[n].set(token), "n": n + 1, "key": key, "target_cache": cache}


def _spec_start(draft_params, target_params, prompt_buf, n_prompt, key, drafter, target_config, warp, max_len, K):
    state = _start(target_params, prompt_buf, n_prompt, key, target_config, warp, max_len)
    stats = {"rounds": jnp.int32(0), "hist": jnp.zeros(K + 1, jnp.int32), "drafted": jnp.zeros(K + 1, jnp.int32),
             "evaluated": jnp.zeros(K, jnp.int32), "accepted": jnp.zeros(K, jnp.int32)}
    # the drafter reads the prompt too (a network drafter re-reads its last token in round 1)
    return {**state, "draft": drafters.start(drafter, draft_params, prompt_buf, max_len), "stats": stats}


def _spec_round(draft_params, target_params, state, drafter, target_config, warp, K, verdict=accept_reject):
    """One speculative round (module docstring, steps 1-4).

    Returns (state, (drafts, n_accepted, emitted, n_drafted)).

    `verdict` is sampling.accept_reject; the tests swap in a broken one to show they can fail.
    """
    key, k_draft, k_verdict = jax.random.split(state["key"], 3)
    n, tokens = state["n"], state["tokens"]

    # 1. the drafter proposes up to K tokens, with the p each was drawn from (drafters.py)
    dstate, drafts, p, n_drafted = drafters.propose(drafter, draft_params, state["draft"], tokens, n, k_draft, warp,
                                                    K, target_config.n_vocab)

    # 2. the target scores all K+1 positions at once
    verify_in = jnp.concatenate([lax.dynamic_slice(tokens, (n - 1,), (1,)), drafts])
    logits, target_cache = step(target_params, state["target_cache"], verify_in, n - 1, target_config)
    q = probs(logits, warp)  # [K+1, V]

    # 3. accept / reject, 4. commit a + 1 tokens (the rest of the write is overwritten later)
    n_accepted, emitted = verdict(k_verdict, drafts, p, q, greedy=warp.temperature == 0, n_drafted=n_drafted)
    idx = jnp.arange(K + 1)
    out = jnp.where(idx < n_accepted, jnp.concatenate([drafts, drafts[:1]]), emitted)
    tokens = lax.dynamic_update_slice(tokens, out, (n,))

    s = state["stats"]
    tested = (idx[:K] <= n_accepted) & (idx[:K] < n_drafted)  # drafts after a rejection were never tested
    stats = {"rounds": s["rounds"] + 1, "hist": s["hist"].at[n_accepted].add(1),
             "drafted": s["drafted"].at[n_drafted].add(1),
             "evaluated": s["evaluated"] + tested, "accepted": s["accepted"] + (idx[:K] < n_accepted)}
    new_state = {"tokens": tokens, "n": n + n_accepted + 1, "key": key, "target_cache": target_cache,
                 "draft": dstate, "stats": stats}
    return new_state, (drafts, n_accepted, emitted, n_drafted)


def _ar_generate(params, prompt_buf, n_prompt, n_tokens, key, config, warp, max_len):
    state = _start(params, prompt_buf, n_prompt, key, config, warp, max_len)
    return lax.fori_loop(0, n_tokens - 1, lambda _, s: _ar_step(params, s, config, warp), state)


def _spec_generate(draft_params, target_params, prompt_buf, n_prompt, n_tokens, key,
                   drafter, target_config, warp, max_len, K, verdict=accept_reject):
    state = _spec_start(draft_params, target_params, prompt_buf, n_prompt, key, drafter, target_config,
                        warp, max_len, K)
    body = lambda s: _spec_round(draft_params, target_params, s, drafter, target_config, warp, K, verdict)[0]
    return lax.while_loop(lambda s: s["n"] < n_prompt + n_tokens, body, state)


_static = ("config", "warp", "max_len")
_spec_static = ("drafter", "target_config", "warp", "max_len", "K", "verdict")
start_jit = jax.jit(_start, static_argnames=_static)
ar_step_jit = jax.jit(_ar_step, static_argnames=("config", "warp"), donate_argnames=("state",))
ar_generate_jit = jax.jit(_ar_generate, static_argnames=_static)
spec_start_jit = jax.jit(_spec_start, static_argnames=_spec_static[:-1])
spec_round_jit = jax.jit(_spec_round, static_argnames=("drafter", "target_config", "warp", "K", "verdict"),
                         donate_argnames=("state",))
spec_generate_jit = jax.jit(_spec_generate, static_argnames=_spec_static)


# ---------------------------------------------------------------------------------------------
# Public entry points


def _prompt_buffer(prompt_ids, max_len: int):
    n_prompt = len(prompt_ids)
    buf = np.zeros(min(bucket(n_prompt), max_len), np.int32)
    buf[:n_prompt] = prompt_ids
    return jnp.asarray(buf), jnp.int32(n_prompt)


def autoregressive(target: Model, prompt_ids, n_tokens: int, warp: Warp = Warp(), seed: int = 0, *,
                   key=None, max_len: int | None = None, device_loop: bool = True):
    """Sample n_tokens from the target one at a time. Returns (new token ids [N], DecodeStats)."""
    validate(prompt_ids, n_tokens, 0, [target], max_len)
    max_len = max_len or plan_max_len(len(prompt_ids), n_tokens, 0, target.config.n_ctx)
    key = jax.random.PRNGKey(seed) if key is None else key
    prompt_buf, n_prompt = _prompt_buffer(prompt_ids, max_len)
    kw = dict(config=target.config, warp=warp, max_len=max_len)
    if device_loop:
        state = ar_generate_jit(target.params, prompt_buf, n_prompt, jnp.int32(n_tokens), key, **kw)
    else:  # one dispatch per token, no sync until the end
        state = start_jit(target.params, prompt_buf, n_prompt, key, **kw)
        for _ in range(n_tokens - 1):
            state = ar_step_jit(target.params, state, config=target.config, warp=warp)
    new = np.asarray(state["tokens"])[len(prompt_ids): len(prompt_ids) + n_tokens]
    K0 = np.zeros(0, np.int64)
    return new, DecodeStats(0, n_tokens, n_tokens - 1, np.array([n_tokens - 1]), K0, K0)


def speculative(draft: Model | None, target: Model, prompt_ids, n_tokens: int, K: int = 4, warp: Warp = Warp(),
                seed: int = 0, *, key=None, max_len: int | None = None, device_loop: bool = True,
                record: bool = False, drafter: Drafter | None = None):
    """Speculative sampling of n_tokens. Returns (new token ids [N], DecodeStats).

    `drafter` says who drafts (drafters.py); by default the draft model `draft`. Layer-skip
    drafts with the target's own weights and lookup with none, so `draft` may then be None.
    record=True runs the host loop and keeps every round in stats.rounds (for `trace`).
    """
    if K < 1:
        raise DecodeError(f"K must be >= 1 (got {K})")
    drafter = drafter or drafters.model_drafter(draft.config)
    draft_params = draft_params_for(drafter, draft, target)
    models = [target] + ([draft] if drafter.kind == "model" else [])
    validate(prompt_ids, n_tokens, K, models, max_len)
    max_len = max_len or plan_max_len(len(prompt_ids), n_tokens, K, min(m.config.n_ctx for m in models))
    key = jax.random.PRNGKey(seed) if key is None else key
    prompt_buf, n_prompt = _prompt_buffer(prompt_ids, max_len)
    kw = dict(drafter=drafter, target_config=target.config, warp=warp, K=K)
    end = len(prompt_ids) + n_tokens
    rounds = [] if record else None
    if device_loop and not record:
        state = spec_generate_jit(draft_params, target.params, prompt_buf, n_prompt, jnp.int32(n_tokens), key,
                                  max_len=max_len, **kw)
    else:
        state = spec_start_jit(draft_params, target.params, prompt_buf, n_prompt, key, max_len=max_len, **kw)
        n = len(prompt_ids) + 1
        while n < end:
            state, (drafts, n_accepted, emitted, n_drafted) = spec_round_jit(draft_params, target.params, state, **kw)
            n = int(state["n"])  # the round's one host sync
            if record:
                rounds.append({"drafts": np.asarray(drafts).tolist(), "n_accepted": int(n_accepted),
                               "emitted": int(emitted), "n_drafted": int(n_drafted)})
    s = jax.device_get(state["stats"])
    new = np.asarray(state["tokens"])[len(prompt_ids): end]
    return new, DecodeStats(K, n_tokens, int(s["rounds"]), s["hist"], s["evaluated"], s["accepted"], rounds,
                            s["drafted"])


def draft_params_for(drafter: Drafter, draft: Model | None, target: Model):
    """The weights a drafter runs: the draft model's, the target's own (layer-skip), or none (lookup)."""
    if drafter.kind == "model":
        if draft is None:
            raise DecodeError("the model drafter needs a draft model")
        if draft.config.n_vocab != target.config.n_vocab:
            raise DecodeError(f"draft and target must share the vocabulary (vocab sizes "
                              f"{sorted({draft.config.n_vocab, target.config.n_vocab})})")
        return draft.params
    return target.params if drafter.kind == "layerskip" else {}
