"""Training an MTP layer (model/nets/mtp.py) for a frozen GPT-2 target, in DeepSeek's layout:
enorm, hnorm, eh_proj, one GPT-2 block and shared_head.norm, the target's embedding and head
(DeepSeek-V3, arXiv:2412.19437, section 2.2).

The target runs over each window once, in bfloat16 and without gradients, and gives its last
hidden state after ln_f, f (what vLLM hands DeepSeek's layer), and its distribution q over the
`vocab` tokens. Pass 1 reads (f_{j-1}, t_j) at row j, as drafting's first round does; pass d
reads, in place of f_{j-1}, what pass d - 1 returned for row j - 1 (the block's output before
shared_head.norm, which vLLM's proposer carries to the next draft), as draft d does. Each pass is
distilled onto q (DeepSeek trains its MTP modules on the next tokens; the target's distribution
is what its drafts are verified against):

    loss = mean over passes d of CE(q_j, softmax(shared_head.norm(h^d_j) @ wte[vocab].T))
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specbench.model.nets import eagle, gpt2, mtp
from specbench.model.nets.layouts import as_loaded
from specbench.model.nets.network import Model
from specbench.train.eagle import head_task, over_windows
from specbench.train.loop import Task, TrainConfig


@dataclasses.dataclass(frozen=True)
class MtpLoss:
    depth: int = 2  # passes unrolled: pass d reads what pass d - 1 returned


def target_view(target: Model, x, vocab):
    """The frozen target over windows x [B, T]: (f after ln_f [B, T, e] float32, log q [B, T, V'])."""
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), as_loaded(target.params))
    normed = jax.vmap(lambda seq: gpt2.transformer(half, seq, target.config))(x)
    logq = jax.nn.log_softmax((normed @ half["wte"][vocab].T).astype(jnp.float32))
    return jax.lax.stop_gradient(normed.astype(jnp.float32)), jax.lax.stop_gradient(logq)


def passes(params, feats, tokens, config, depth: int) -> list:
    """Uncached, over one window: what the layer returns at every row [T, e], for each of `depth`
    passes, pass 1 reading the target's features and pass d the previous pass's output."""
    n_seq, out, read = tokens.shape[-1], [], feats
    for _ in range(depth):
        x = mtp.embed(params, eagle.shifted(read), tokens, jnp.arange(n_seq), config)
        h, _ = gpt2.blocks(params, x, gpt2.empty_cache(config, 0, x.dtype), 0, config, first=1)
        out.append(h)
        read = h
    return out


def losses(head, target: Model, x, vocab, config, how: MtpLoss):
    """(total, (cross-entropy of pass 1, top-1 agreement with the target at pass 1, at the last))."""
    feats, logq = target_view(target, x, vocab)
    params = {"wte": target.params["wte"], "wpe": target.params["wpe"], **head}
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params)
    hs = jax.vmap(lambda f, seq: passes(half, f, seq, config, how.depth))(feats, x)
    ces, agrees = [], []
    for h in hs:
        normed = mtp.norm(half, "ln_f", h, config)
        logp = jax.nn.log_softmax((normed @ half["wte"][vocab].T).astype(jnp.float32))
        ces.append(-jnp.mean(jnp.sum(jnp.exp(logq) * logp, axis=-1)))
        agrees.append(jnp.mean(jnp.argmax(logp, -1) == jnp.argmax(logq, -1)))
    return sum(ces) / len(ces), (ces[0], agrees[0], agrees[-1])


def init_params(target: Model, config, seed: int) -> dict:
    """mtp.init_params, with eh_proj passing the normed feature through ([enorm(e); hnorm(f)] @
    [noise; I]) and shared_head.norm starting as the target's ln_f: at first the layer predicts
    what the target's own head reads from f."""
    params = mtp.init_params(config, seed)
    e = config.n_embd
    noise = np.random.default_rng(seed + 7).normal(0.0, 0.02, (e, e))
    params["fc"] = {"weight": jnp.asarray(np.concatenate([noise, np.eye(e)]), jnp.float32)}
    params["ln_f"] = {k: jnp.asarray(v, jnp.float32) for k, v in as_loaded(target.params)["ln_f"].items()}
    return params


def mtp_task(target: Model, tc: TrainConfig, how: MtpLoss, vocab, train_tokens, val_tokens) -> Task:
    """The loop's Task for an MTP layer over `target`, distilled over `vocab` (token ids)."""
    vocab = jnp.asarray(vocab, jnp.int32)
    config = mtp.config_for(target.config, mtp.DEEPSEEK)

    def objective(head, x, key):
        loss, (ce, _, _) = losses(head, target, x, vocab, config, how)
        return loss, ce

    return head_task(
        objective,
        lambda: init_params(target, config, tc.seed),
        lambda head: validate(head, target, vocab, val_tokens, tc, how)["loss"],
        tc,
        train_tokens,
    )


def validate(head, target: Model, vocab, val_tokens, tc: TrainConfig, how: MtpLoss) -> dict:
    """The loss, pass 1's cross-entropy and the top-1 agreement with the target at the first and
    the last pass, over the same tc.eval_batches validation windows every time."""
    config = mtp.config_for(target.config, mtp.DEEPSEEK)
    run = jax.jit(lambda head, x: losses(head, target, x, jnp.asarray(vocab), config, how))
    return over_windows(lambda x: run(head, x), val_tokens, tc, ("ce", "agreement", "agreement_last"))
