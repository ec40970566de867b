"""Training an EAGLE-3 head (model/nets/eagle3.py) for a GPT-2 target, with EAGLE-3's
training-time test (Li, Wei, Zhang and Zhang 2025, arXiv:2503.01840, section 3).

The frozen target runs over each window once, in bfloat16 and without gradients, and gives its
taps (the inputs of the head's layers: products.run_layers) and its distribution q over the draft
vocabulary. The head then runs `depth` passes over the window, each as a round's drafts see it:

    pass 0  row j reads the target's taps of position j - 1 and attends to rows 1..j (a round's
            window, re-read with the target's features)
    pass d  row j reads its own x of pass d - 1 at row j - 1 (its d-th draft reads its last
            output) and attends to the true rows 1..j - d and to its own chain, pass d' at row
            j - d + d' (d' = 1..d), as that draft's cache holds them

and learns sum_d decay^d CE(q_j, p_j^(d)) over the rows j >= d: token losses only, no feature
regression (EAGLE-3 drops it). The passes run one after another, each over the keys of the ones
before (ttt_mask).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specbench.model.nets import eagle, eagle3, gpt2, llama, products, rotary
from specbench.model.nets.eagle3 import Eagle3Config
from specbench.model.nets.layouts import Layout, as_loaded
from specbench.model.nets.network import Model
from specbench.train.eagle import head_task, over_windows
from specbench.train.loop import Task, TrainConfig


@dataclasses.dataclass(frozen=True)
class TTT:
    depth: int = 3  # passes: the drafts a round's training-time test unrolls
    decay: float = 0.8  # pass d's loss weighs decay^d


def head_config(target, vocab: int) -> Eagle3Config:
    """An EAGLE-3 head for a GPT-2 target: one Llama block as wide as the target (its heads), SwiGLU
    4x wide, vLLM's taps, drafting among `vocab` tokens."""
    return Eagle3Config(
        n_layer=1,
        n_head=target.n_head,
        n_kv_head=target.n_head,
        n_embd=target.n_embd,
        n_inner=4 * target.n_embd,
        n_vocab=target.n_vocab,
        n_ctx=target.n_ctx,
        taps=eagle3.default_taps(target.n_layer),
        target_width=target.n_embd,
        draft_vocab=vocab,
    )


def target_view(target: Model, x, vocab, taps):
    """The frozen target over windows x [B, T]: (taps [B, T, len(taps) e] float32, log q [B, T, V'])."""
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), as_loaded(target.params))
    c = target.config

    def one(seq):
        h = half["wte"][seq] + half["wpe"][jnp.arange(seq.shape[0])]
        h, _, tapped = gpt2.blocks(half, h, gpt2.empty_cache(c, 0, h.dtype), 0, c, taps=taps)
        return tapped, gpt2.final_norm(half, h, c) @ half["wte"][vocab].T

    tapped, logits = jax.vmap(one)(x)
    logq = jax.nn.log_softmax(logits.astype(jnp.float32))
    return jax.lax.stop_gradient(tapped.astype(jnp.float32)), jax.lax.stop_gradient(logq)


def ttt_mask(T: int, d: int) -> np.ndarray:
    """Which keys pass d's rows see, [T, (d + 1) T]: pass 0's rows 1..j - d (row 0 has no feature:
    only itself, at pass 0), then pass d' = 1..d's row j - d + d'."""
    j, i = np.arange(T)[:, None], np.arange(T)[None, :]
    true = ((i >= 1) & (i <= j - d)) | ((i == j) & (d == 0))
    return np.concatenate([true] + [i == j - d + dd for dd in range(1, d + 1)], axis=1)


def passes(params, taps, tokens, config: Eagle3Config, depth: int) -> list:
    """The head's logits over its draft vocabulary [T, V'] at each pass (the module's equations)."""
    T, eps = tokens.shape[0], config.rms_norm_eps
    blk = jax.tree_util.tree_map(lambda a: a[0], params["blocks"])
    embed = llama.rms_norm(params["wte"][tokens], blk["ln_1"]["weight"], eps)
    feat, positions = eagle3.combine(params, eagle.shifted(taps), config), jnp.arange(T)
    H, KV, hd = config.n_head, config.n_kv_head, config.head_dim
    keys, values, out = [], [], []
    for d in range(depth):
        h = llama.rms_norm(feat, blk["hidden_norm"]["weight"], eps)
        qkv = jnp.concatenate([embed, h], -1) @ blk["attn"]["c_attn"]["weight"]
        q, k, v = jnp.split(qkv, [H * hd, (H + KV) * hd], axis=-1)
        q = rotary.rotate(q.reshape(T, H, hd), positions, config)
        keys.append(rotary.rotate(k.reshape(T, KV, hd), positions, config))
        values.append(v.reshape(T, KV, hd))
        k_all = jnp.repeat(jnp.concatenate(keys), H // KV, axis=1)
        v_all = jnp.repeat(jnp.concatenate(values), H // KV, axis=1)
        scores = jnp.einsum("qhd,khd->hqk", q, k_all) / np.sqrt(hd)
        weights = jax.nn.softmax(jnp.where(ttt_mask(T, d)[None], scores, -jnp.inf), -1)
        attn = jnp.einsum("hqk,khd->qhd", weights, v_all).reshape(T, H * hd) @ blk["attn"]["c_proj"]["weight"]
        x = llama.swiglu((h if config.norm_before_residual else feat) + attn, blk, config, Layout.HF, None)
        out.append(products.head(params, llama.rms_norm(x, params["ln_f"]["weight"], eps)))
        feat = eagle.shifted(x)  # the next pass's row j reads this pass's row j - 1
    return out


def losses(head, target: Model, x, vocab, config: Eagle3Config, ttt: TTT):
    """(total, (pass 0's cross-entropy, pass 0's top-1 agreement, the last pass's)) on windows x."""
    taps, logq = target_view(target, x, vocab, config.taps)
    params = {**head, "wte": target.params["wte"]}
    logps = jax.vmap(lambda f, seq: passes(params, f, seq, config, ttt.depth))(taps, x)
    total, T = 0.0, x.shape[1]
    ces, agrees = [], []
    for d, logits in enumerate(logps):
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        rows = jnp.arange(T) >= max(d, 1)  # rows with d drafts behind them (row 0 reads nothing)
        ce = -jnp.sum(jnp.sum(jnp.exp(logq) * logp, -1) * rows) / (rows.sum() * x.shape[0])
        agree = jnp.sum((jnp.argmax(logp, -1) == jnp.argmax(logq, -1)) * rows) / (rows.sum() * x.shape[0])
        total, ces, agrees = total + ttt.decay**d * ce, ces + [ce], agrees + [agree]
    return total, (ces[0], agrees[0], agrees[-1])


def eagle3_task(target: Model, tc: TrainConfig, ttt: TTT, vocab, train_tokens, val_tokens) -> Task:
    """The loop's Task for an EAGLE-3 head over `target`, drafting among `vocab` (token ids)."""
    config = head_config(target.config, len(vocab))
    vocab = jnp.asarray(vocab, jnp.int32)

    def objective(head, x, key):
        loss, (ce, _, _) = losses(head, target, x, vocab, config, ttt)
        return loss, ce

    def init():
        params = eagle3.init_params(config, tc.seed)
        return {k: v for k, v in params.items() if k != "d2t"}  # d2t is the vocabulary's, not trained

    evaluate = lambda head: validate(head, target, vocab, val_tokens, tc, ttt)["loss"]
    return head_task(objective, init, evaluate, tc, train_tokens)


def validate(head, target: Model, vocab, val_tokens, tc: TrainConfig, ttt: TTT) -> dict:
    """The loss, pass 0's cross-entropy and the top-1 agreement with the target at the first and
    the last pass, over the same tc.eval_batches validation windows every time."""
    config = head_config(target.config, len(vocab))
    run = jax.jit(lambda head, x: losses(head, target, x, jnp.asarray(vocab), config, ttt))
    return over_windows(lambda x: run(head, x), val_tokens, tc, ("ce", "agreement", "agreement_last"))
