"""Training an EAGLE head (model/nets/eagle.py) against a frozen target, on corpus windows.

The target runs over each window once, in bfloat16 and without gradients, and gives its
features F (gpt2.transformer(features=True)) and its distribution q over the head's vocabulary.
The head reads F, shifted by one, with uniform noise added as EAGLE does (its drafts will read
its own imperfect features), and is trained on EAGLE's two losses (Li et al. 2024, section 4.3):

    loss = smooth_l1(h, F) + cls_weight * CE(q, softmax(ln_f(h) @ wte[vocab].T))

over the `vocab` tokens it will draft among (its drafting.json), so that the distribution it
learns is the one it proposes from.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specbench.model.nets import eagle, gpt2
from specbench.model.nets.layouts import as_loaded
from specbench.model.nets.network import Model
from specbench.train.data import sample_batch
from specbench.train.loop import Task, TrainConfig


@dataclasses.dataclass(frozen=True)
class EagleLoss:
    cls_weight: float = 1.0  # EAGLE's w_cls (0.1 there, for features of unit scale); regression: 1
    noise: float = 0.5  # uniform noise U(-noise, noise) on the features the head reads


def target_view(target: Model, x, vocab):
    """The frozen target over windows x [B, T]: (features [B, T, e] float32, log q [B, T, V'])."""
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), as_loaded(target.params))
    feats = jax.vmap(lambda seq: gpt2.transformer(half, seq, target.config, features=True))(x)
    normed = gpt2.layer_norm(feats, **half["ln_f"], eps=target.config.layer_norm_epsilon)
    logq = jax.nn.log_softmax((normed @ half["wte"][vocab].T).astype(jnp.float32))
    return jax.lax.stop_gradient(feats.astype(jnp.float32)), jax.lax.stop_gradient(logq)


def losses(head, target: Model, x, vocab, key, how: EagleLoss):
    """(total, (regression, cross-entropy, top-1 agreement with the target)) on windows x."""
    feats, logq = target_view(target, x, vocab)
    noisy = feats + jax.random.uniform(key, feats.shape, minval=-how.noise, maxval=how.noise)
    config = eagle.config_for(target.config)
    params = {**{k: target.params[k] for k in eagle.family(config).head_keys(config)}, **head}
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params)
    h = jax.vmap(lambda f, seq: eagle.predict(half, f, seq, config))(noisy, x).astype(jnp.float32)
    diff = jnp.abs(h - feats)
    reg = jnp.mean(jnp.where(diff < 1.0, 0.5 * diff**2, diff - 0.5))  # smooth L1
    normed = gpt2.layer_norm(h.astype(jnp.bfloat16), **half["ln_f"], eps=config.layer_norm_epsilon)
    logp = jax.nn.log_softmax((normed @ half["wte"][vocab].T).astype(jnp.float32))
    ce = -jnp.mean(jnp.sum(jnp.exp(logq) * logp, axis=-1))
    agree = jnp.mean(jnp.argmax(logp, -1) == jnp.argmax(logq, -1))
    return reg + how.cls_weight * ce, (reg, ce, agree)


def eagle_task(target: Model, tc: TrainConfig, how: EagleLoss, vocab, train_tokens, val_tokens) -> Task:
    """The loop's Task for a head over `target`, drafting among `vocab` (token ids)."""
    vocab = jnp.asarray(vocab, jnp.int32)

    def objective(head, x, key):
        loss, (_, ce, _) = losses(head, target, x, vocab, key, how)
        return loss, ce

    return head_task(
        objective,
        lambda: eagle.init_params(eagle.config_for(target.config), tc.seed),
        lambda head: validate(head, target, vocab, val_tokens, tc, how)["loss"],
        tc,
        train_tokens,
    )


def head_task(objective, init, evaluate, tc: TrainConfig, train_tokens) -> Task:
    """The loop's Task for a draft head (this module's, train/eagle3.py's): objective(head, x, key)
    -> (loss, cross-entropy) on windows x of the training tokens, minimised by the loop's optimiser;
    init() -> the head's first parameters; evaluate(head) -> the validation loss."""

    def make_update(opt):
        @jax.jit
        def update(head, opt_state, x, key):
            (loss, ce), grads = jax.value_and_grad(objective, has_aux=True)(head, x, key)
            updates, opt_state = opt.update(grads, opt_state, head)
            return optax.apply_updates(head, updates), opt_state, loss, ce

        return update

    def next_batch(rng):
        x, _ = sample_batch(train_tokens, tc.batch, tc.ctx, rng)
        return x, jnp.asarray(rng.integers(0, 2**32, 2, dtype=np.uint32))

    return Task(
        init=init, make_update=make_update, next_batch=next_batch, evaluate=evaluate, perplexity=False
    )


def validate(head, target: Model, vocab, val_tokens, tc: TrainConfig, how: EagleLoss) -> dict:
    """The losses and the top-1 agreement with the target over the same tc.eval_batches
    validation windows every time, without noise."""
    clean = dataclasses.replace(how, noise=0.0)
    run = jax.jit(lambda head, x: losses(head, target, x, vocab, jax.random.PRNGKey(0), clean))
    return over_windows(lambda x: run(head, x), val_tokens, tc, ("regression", "ce", "agreement"))


def over_windows(run, val_tokens, tc: TrainConfig, names: tuple[str, ...]) -> dict:
    """run(x) -> (loss, (values named `names`)) averaged over the same tc.eval_batches validation
    windows every time (a fixed seed): {"loss", *names}."""
    rng = np.random.default_rng(1234)
    out = [run(sample_batch(val_tokens, tc.batch, tc.ctx, rng)[0]) for _ in range(tc.eval_batches)]
    means = {name: float(np.mean([o[1][i] for o in out])) for i, name in enumerate(names)}
    return {"loss": float(np.mean([o[0] for o in out]))} | means
