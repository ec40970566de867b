"""The training loop of the bundled pair (extra "train": optax), read straight down as nanoGPT's:
the losses, the optimizer, the update step, the batches, the checkpoint to restore, the loop.

`target` trains on next-token cross-entropy; `draft` is distilled from the target: loss =
kd * KL(q_target || p_draft) + (1 - kd) * CE, because matching the target's distribution is
exactly what raises the acceptance rate. AdamW with linear warmup and cosine decay (Loshchilov &
Hutter, 2019), fp32 master weights and bf16 matmuls; the model is saved as float16 in the HF
layout, sharded to <= 15 MiB per file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specbench.errors import TrainError
from specbench.model.checkpoints import hf_layout, weights
from specbench.model.nets.gpt2 import GPT2Config, init_params, transformer
from specbench.train.data import frequent_tokens, sample_batch, sample_vocab
from specbench.train.resume import Checkpoints, restore

SHARD_BYTES = 15 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Losses


def logits_fn(params, x, config: GPT2Config, vocab=None):
    """[batch, ctx] -> [batch, ctx, n_vocab] float32 logits, matmuls in bfloat16.

    With `vocab` (token ids), only those columns of the head: [batch, ctx, len(vocab)].
    """
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params)
    h = jax.vmap(lambda seq: transformer(half, seq, config))(x)  # [batch, ctx, n_embd]
    head = half["wte"] if vocab is None else half["wte"][vocab]
    return (h @ head.T).astype(jnp.float32)


def cross_entropy(logits, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], axis=-1))


def loss_fn(params, x, y, config, teacher_params=None, teacher_config=None, kd: float = 0.0, vocab=None):
    """Cross-entropy, or kd * KL(teacher || model) + (1 - kd) * CE; over `vocab` when given (y indexes it)."""
    logits = logits_fn(params, x, config, vocab)
    ce = cross_entropy(logits, y)
    if teacher_params is None or kd == 0:
        return ce, ce
    q = jax.nn.softmax(jax.lax.stop_gradient(logits_fn(teacher_params, x, teacher_config, vocab)))
    kl = jnp.mean(jnp.sum(q * (jnp.log(q + 1e-9) - jax.nn.log_softmax(logits)), axis=-1))
    return kd * kl + (1 - kd) * ce, ce


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    batch: int = 32
    ctx: int = 512
    lr: float = 1e-3
    warmup: int = 200
    weight_decay: float = 0.1
    kd: float = 0.7  # distillation weight (draft only)
    greedy_fraction: float = 0.0  # draft only: share of each batch taken from the target's greedy text
    head_vocab: int = 0  # sampled softmax over this many frequent tokens (+ head_extra); 0 = full head
    head_extra: int = 2048  # rarer targets and random negatives added to each step's softmax
    seed: int = 0
    eval_batches: int = 20


def require_optax():
    """optax is the `train` extra: say how to get it, in one line, instead of a traceback."""
    try:
        import optax  # noqa: F401
    except ModuleNotFoundError:
        raise TrainError("training needs optax, the `train` extra: pip install -e '.[train]'") from None


def make_optimizer(tc: TrainConfig):
    import optax

    schedule = optax.warmup_cosine_decay_schedule(
        0.0, tc.lr, tc.warmup, max(tc.steps, tc.warmup + 1), tc.lr * 0.1
    )
    # no decay on biases, norm gains and position table: only the matrices of the blocks and wte
    decay_mask = lambda params: jax.tree_util.tree_map_with_path(
        lambda path, p: path[0].key == "wte" or (path[0].key == "blocks" and p.ndim == 3), params
    )
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay, mask=decay_mask),
    )


def make_update(config: GPT2Config, tc: TrainConfig, opt, teacher: weights.Model | None):
    """The jitted step: (params, opt_state, x, y, vocab) -> (params, opt_state, loss, cross-entropy)."""
    import optax

    t_params, t_config = (teacher.params, teacher.config) if teacher else (None, None)
    kd = tc.kd if teacher else 0.0

    @jax.jit
    def update(params, opt_state, x, y, vocab):
        (loss, ce), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, x, y, config, t_params, t_config, kd, vocab
        )
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, ce

    return update


def make_batches(train_tokens: np.ndarray, tc: TrainConfig, greedy: np.ndarray | None):
    """next_batch(rng) -> (x, y, vocab): corpus windows, with tc.greedy_fraction of each batch from
    the teacher's greedy text; with the sampled softmax, y re-indexed into that step's vocab."""
    n_greedy = round(tc.greedy_fraction * tc.batch) if greedy is not None else 0
    frequent = frequent_tokens(train_tokens, tc.head_vocab) if tc.head_vocab else None

    def next_batch(rng):
        x, y = sample_batch(train_tokens, tc.batch - n_greedy, tc.ctx, rng)
        if n_greedy:
            rows = greedy[rng.integers(0, len(greedy), n_greedy)].astype(np.int32)
            x, y = np.concatenate([x, rows[:, :-1]]), np.concatenate([y, rows[:, 1:]])
        if frequent is None:
            return x, y, None
        vocab, y = sample_vocab(frequent, y, tc.head_extra, rng)
        return x, y, vocab

    return next_batch


@dataclasses.dataclass(frozen=True)
class Task:
    """What a run trains, for the loop: fresh parameters, the jitted update for an optimizer,
    the batches, and the validation loss. A language model's (lm_task) by default; the EAGLE
    head's is train/eagle.py's."""

    init: Callable[[], dict]  # () -> fresh parameters
    make_update: (
        Callable  # optimizer -> update(params, opt_state, *batch) -> (params, opt_state, loss, metric)
    )
    next_batch: Callable  # rng -> the update's batch arguments
    evaluate: Callable[[dict], float]  # params -> validation loss
    perplexity: bool = True  # the loss is a cross-entropy, whose exp is a perplexity


def lm_task(config: GPT2Config, tc: TrainConfig, train_tokens, val_tokens, teacher, greedy) -> Task:
    """A GPT-2 trained on next-token cross-entropy, or distilled from `teacher` (loss_fn)."""
    return Task(
        init=lambda: init_params(config, tc.seed),
        make_update=lambda opt: make_update(config, tc, opt, teacher),
        next_batch=make_batches(train_tokens, tc, greedy),
        evaluate=lambda params: val_loss(params, config, val_tokens, tc),
    )


def val_loss(params, config: GPT2Config, val_tokens: np.ndarray, tc: TrainConfig) -> float:
    """Mean cross-entropy over the same tc.eval_batches validation windows every time."""
    evaluate = jax.jit(lambda params, x, y: cross_entropy(logits_fn(params, x, config), y))
    rng = np.random.default_rng(1234)
    return float(
        np.mean(
            [
                evaluate(params, *sample_batch(val_tokens, tc.batch, tc.ctx, rng))
                for _ in range(tc.eval_batches)
            ]
        )
    )


def train(
    config: GPT2Config,
    train_tokens: np.ndarray,
    val_tokens: np.ndarray,
    tc: TrainConfig,
    teacher: weights.Model | None = None,
    log=print,
    checkpoint: Path | None = None,
    resume: bool = False,
    checkpoint_every: float = 300.0,
    stop_after: int | None = None,
    progress_interval: float = 60.0,
    greedy: np.ndarray | None = None,
    on_checkpoint=None,
    task: Task | None = None,
):
    """Train from scratch (or resume); returns (params, record) where record has the losses and settings.

    With `checkpoint`, the state is saved there every `checkpoint_every` seconds and at the end;
    `resume` continues from it exactly (same batches, same parameters as an unbroken run).
    `stop_after` ends the loop after that step, as a kill would (for tests). `greedy` is a
    [n, ctx + 1] array of the teacher's greedy text, mixed in at tc.greedy_fraction of each batch.
    `on_checkpoint(step)` is told of every checkpoint written. `task` replaces the language
    model's (lm_task) with another network's; `config` then only names the run.
    """
    require_optax()
    from specbench.cli.views.progress import progress

    task = task or lm_task(config, tc, train_tokens, val_tokens, teacher, greedy)
    opt = make_optimizer(tc)
    update, next_batch = task.make_update(opt), task.next_batch
    params = task.init()
    opt_state, rng = opt.init(params), np.random.default_rng(tc.seed)
    settings = {"train": dataclasses.asdict(tc), "config": dataclasses.asdict(config)}
    params, opt_state, history, first, elapsed_before = restore(
        checkpoint if resume else None, params, opt_state, rng, settings, log
    )
    ckpt = Checkpoints(checkpoint, checkpoint_every, settings, elapsed_before, on_checkpoint)
    t_steady, n_steady = None, 0  # throughput from the second step on: the first one compiles
    last = min(tc.steps, stop_after or tc.steps)
    title = f"train {config.n_layer}x{getattr(config, 'n_embd', None) or config.d_model}"
    with progress(title, tc.steps, unit="step", interval=progress_interval) as bar:
        bar.update(first - 1)
        for i in range(first, last + 1):
            params, opt_state, loss, ce = update(params, opt_state, *next_batch(rng))
            if t_steady is None:
                jax.block_until_ready(loss)
                t_steady = time.perf_counter()
            else:
                n_steady += 1
            rate = n_steady * tc.batch * tc.ctx / max(time.perf_counter() - t_steady, 1e-9)
            bar.update(i, info=logged(history, i, first, tc.steps, loss, ce, rate))
            ckpt.save(i, params, opt_state, rng, history, due=True)
    if last > first - 1:
        ckpt.save(last, params, opt_state, rng, history)
    if last < tc.steps:
        return params, {"stopped_at": last, "history": history}
    seconds = elapsed_before + time.perf_counter() - ckpt.started
    return params, final_record(task, params, settings, history, teacher, tc, seconds, log)


def logged(history: list, i: int, first: int, steps: int, loss, ce, rate: float) -> str | None:
    """Step i's entry in the history (the first, every 2% and the last), and its progress words."""
    if not (i == first or i % max(1, steps // 50) == 0 or i == steps):
        return None
    history.append({"step": i, "loss": float(loss), "train_ce": float(ce), "tokens_per_s": rate})
    return f"loss {float(loss):.3f} · {rate:,.0f} tok/s"


def final_record(
    task: Task, params, settings: dict, history: list, teacher, tc: TrainConfig, seconds, log
) -> dict:
    """A finished run's record: its settings, the validation loss (and perplexity for a language
    model, logged), its history, its teacher and what it cost."""
    final_val = task.evaluate(params)
    if task.perplexity:
        log(f"validation cross-entropy {final_val:.4f} (perplexity {math.exp(final_val):.1f})")
    else:
        log(f"validation loss {final_val:.4f}")
    return {
        **settings,
        "val_loss": final_val,
        **({"val_perplexity": math.exp(final_val)} if task.perplexity else {}),
        "history": history,
        "teacher": teacher.source if teacher else None,
        "tokens_seen": tc.steps * tc.batch * tc.ctx,
        "seconds": seconds,
        "device": jax.devices()[0].device_kind,
    }


def save_model(out: Path, params, config: GPT2Config, record: dict) -> None:
    """float16 weights in the HF layout, sharded, and the training record beside them."""
    hf_layout.save(out, params, config, np_dtype=np.float16, max_shard_bytes=SHARD_BYTES)
    (out / "train_record.json").write_text(json.dumps(record, indent=1) + "\n")
