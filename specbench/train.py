"""Reproducible training of the bundled draft/target pair (extra "train": optax).

    python -m specbench.train prepare --corpus ../shared/corpus --out data/
    python -m specbench.train target  --data data/ --out gpt2_weights/tiny-target
    python -m specbench.train draft   --data data/ --teacher gpt2_weights/tiny-target --out gpt2_weights/tiny-draft

`prepare` tokenises every document with our GPT-2 tokenizer, `<|endoftext|>` after each, and
splits train/validation by whole document (a seeded shuffle), into uint16 token files.
`target` trains a GPT-2 from scratch on next-token cross-entropy; `draft` trains a small one,
distilled from the target: loss = kd * KL(q_target || p_draft) + (1 - kd) * CE, because matching
the target's distribution is exactly what raises the acceptance rate. Both use AdamW with linear
warmup and cosine decay (Loshchilov & Hutter, 2019), fp32 master weights and bf16 matmuls, and
save float16 weights in the HF layout, sharded to <= 15 MiB per file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import lzma
import math
import os
import time
from pathlib import Path

import click
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specbench import tokenizer, weights
from specbench.gpt2 import GPT2Config, init_params, transformer

SHARD_BYTES = 15 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Data


def prepare(corpus: Path, out: Path, val_fraction: float = 0.02, seed: int = 0) -> dict:
    """Tokenise every .txt under corpus/ into out/{train,val}.bin (uint16) and out/meta.json."""
    files = sorted(corpus.rglob("*.txt"))
    if not files:
        raise click.UsageError(f"--corpus: no .txt files under {corpus}")
    order = np.random.default_rng(seed).permutation(len(files))
    n_val = max(1, round(val_fraction * len(files)))
    val_files = {files[i] for i in order[:n_val]}
    out.mkdir(parents=True, exist_ok=True)
    enc = tokenizer.get_encoding()
    counts = {}
    for split, chosen in (("train", [f for f in files if f not in val_files]), ("val", sorted(val_files))):
        ids: list[np.ndarray] = []
        for f in chosen:
            ids.append(np.asarray(enc.encode_ordinary(f.read_text(encoding="utf-8")) + [tokenizer.EOT_ID], np.uint16))
        tokens = np.concatenate(ids)
        tokens.tofile(out / f"{split}.bin")
        counts[split] = {"documents": len(chosen), "tokens": int(tokens.size),
                         "sha256": hashlib.sha256(tokens.tobytes()).hexdigest()[:16]}
    meta = {"corpus": str(corpus), "seed": seed, "val_fraction": val_fraction, **counts,
            "val_documents": sorted(str(f.relative_to(corpus)) for f in val_files)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def load_tokens(data: Path, split: str) -> np.ndarray:
    """data/{split}.bin, or its xz-compressed copy {split}.bin.xz (what travels to a GPU machine)."""
    raw = data / f"{split}.bin"
    if raw.exists():
        return np.fromfile(raw, dtype=np.uint16)
    with lzma.open(data / f"{split}.bin.xz") as f:
        return np.frombuffer(f.read(), dtype=np.uint16)


def compress(data: Path) -> list[Path]:
    """Write {train,val}.bin.xz beside the .bin files: 65 MB of tokens become about 31 MB."""
    out = []
    for split in ("train", "val"):
        with lzma.open(data / f"{split}.bin.xz", "wb", preset=6) as f:
            f.write((data / f"{split}.bin").read_bytes())
        out.append(data / f"{split}.bin.xz")
    return out


def sample_batch(tokens: np.ndarray, batch: int, ctx: int, rng: np.random.Generator):
    """Random windows: inputs [batch, ctx] and next-token targets [batch, ctx]."""
    starts = rng.integers(0, tokens.size - ctx - 1, batch)
    window = np.stack([tokens[s: s + ctx + 1] for s in starts]).astype(np.int32)
    return window[:, :-1], window[:, 1:]


# ---------------------------------------------------------------------------------------------
# Losses and the update step


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


# ---------------------------------------------------------------------------------------------
# A sampled softmax for the CPU. The 50,257-wide head is most of a small GPT-2's training step
# (measured on the 2-core CPU, 6x256, 8x256 tokens, bf16: 6.2 s a step with the full head,
# 2.7 s with 16,384 columns). Each step's softmax therefore runs over the corpus's most frequent
# tokens (16,384 cover 98.7% of it), every rarer token that is a target in the batch, and random
# rarer tokens as negatives, so that no target is dropped and every row of the head is still
# pushed down where it does not belong (Jean et al. 2015, "On Using Very Large Target Vocabulary").


def frequent_tokens(tokens: np.ndarray, n: int, n_vocab: int = tokenizer.N_VOCAB) -> np.ndarray:
    """The n most frequent token ids of a corpus, sorted by id."""
    counts = np.bincount(tokens, minlength=n_vocab)
    return np.sort(np.argsort(-counts, kind="stable")[:n])


def sample_vocab(frequent: np.ndarray, y: np.ndarray, n_extra: int, rng: np.random.Generator,
                 n_vocab: int = tokenizer.N_VOCAB):
    """(vocab ids [len(frequent) + n_extra], y re-indexed into them): the frequent tokens, the
    batch's rarer targets, then distinct random rarer tokens to fill up to a fixed size."""
    is_frequent = np.zeros(n_vocab, bool)
    is_frequent[frequent] = True
    rare_targets = np.unique(y[~is_frequent[y]])[:n_extra]
    taken = is_frequent.copy()
    taken[rare_targets] = True
    rest = np.flatnonzero(~taken)
    negatives = rng.choice(rest, n_extra - rare_targets.size, replace=False)
    vocab = np.concatenate([frequent, rare_targets, negatives]).astype(np.int32)
    index = np.full(n_vocab, -1, np.int32)
    index[vocab] = np.arange(vocab.size, dtype=np.int32)
    mapped = index[y]
    if (mapped < 0).any():  # more rare targets than n_extra slots: only possible with tiny n_extra
        raise ValueError(f"sampled softmax: {rare_targets.size} rare targets for {n_extra} extra slots")
    return vocab, mapped


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
        raise click.ClickException("training needs optax, the `train` extra: pip install -e '.[train]'") from None


def make_optimizer(tc: TrainConfig):
    import optax

    schedule = optax.warmup_cosine_decay_schedule(0.0, tc.lr, tc.warmup, max(tc.steps, tc.warmup + 1), tc.lr * 0.1)
    # no decay on biases, norm gains and position table: only the matrices of the blocks and wte
    decay_mask = lambda params: jax.tree_util.tree_map_with_path(
        lambda path, p: path[0].key == "wte" or (path[0].key == "blocks" and p.ndim == 3), params)
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay, mask=decay_mask))


# ---------------------------------------------------------------------------------------------
# The target's own greedy text, for the draft (sequence-level distillation, Kim & Rush 2016):
# at T = 0 the draft is judged along the target's greedy continuations, so it trains on them.


def greedy_continuations(params, config: GPT2Config, prefixes: np.ndarray, n_new: int, batch: int = 256,
                         log=None) -> np.ndarray:
    """[n, P] prompt tokens -> [n, P + n_new]: each prefix continued greedily by the model (cached steps)."""
    from specbench.gpt2 import init_cache, step

    n, P = prefixes.shape

    @jax.jit
    def continue_batch(params, prefix):  # [b, P] -> [b, n_new]
        def one(prefix):
            cache = init_cache(config, P + n_new - 1)  # the last new token is never fed back
            logits, cache = step(params, cache, prefix, 0, config, logits_at=P - 1)

            def body(carry, _):
                token, cache, pos = carry
                logits, cache = step(params, cache, token[None], pos, config)
                nxt = jnp.argmax(logits[-1]).astype(jnp.int32)
                return (nxt, cache, pos + 1), token

            first = jnp.argmax(logits[-1]).astype(jnp.int32)
            (last, _, _), tokens = lax.scan(body, (first, cache, jnp.int32(P)), None, length=n_new - 1)
            return jnp.concatenate([tokens, last[None]])
        return jax.vmap(one)(prefix)

    out = []
    for i in range(0, n, batch):
        chunk = prefixes[i: i + batch]
        pad = batch - len(chunk)
        new = np.asarray(continue_batch(params, jnp.asarray(np.pad(chunk, ((0, pad), (0, 0))), jnp.int32)))
        out.append(np.concatenate([chunk, new[: len(chunk)]], axis=1))
        if log:
            log(f"greedy continuations: {min(i + batch, n)}/{n}")
    return np.concatenate(out).astype(np.uint16)


# ---------------------------------------------------------------------------------------------
# Checkpoints: one .npz written atomically (tmp file, then os.replace), so a kill mid-write
# leaves the previous checkpoint whole.


def save_checkpoint(path: Path, step: int, params, opt_state, rng: np.random.Generator, extra: dict) -> None:
    """Parameters, optimizer state, step, the data RNG's state and the history, in one file."""
    leaves = jax.tree_util.tree_leaves((params, opt_state))
    meta = {"step": step, "rng": rng.bit_generator.state, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                 **{f"leaf{i:05d}": np.asarray(leaf) for i, leaf in enumerate(leaves)})
    os.replace(tmp, path)


def load_checkpoint(path: Path, params, opt_state):
    """(params, opt_state, meta) from a checkpoint, shaped like the given fresh ones."""
    with np.load(path) as z:
        meta = json.loads(z["meta"].tobytes().decode())
        leaves = [z[f"leaf{i:05d}"] for i in range(len(z.files) - 1)]
    treedef = jax.tree_util.tree_structure((params, opt_state))
    if treedef.num_leaves != len(leaves):
        raise click.ClickException(f"--resume: {path} does not match this model and optimizer")
    params, opt_state = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(x) for x in leaves])
    return params, opt_state, meta


def train(config: GPT2Config, train_tokens: np.ndarray, val_tokens: np.ndarray, tc: TrainConfig,
          teacher: weights.Model | None = None, log=print, checkpoint: Path | None = None,
          resume: bool = False, checkpoint_every: float = 300.0, stop_after: int | None = None,
          progress_interval: float = 60.0, greedy: np.ndarray | None = None):
    """Train from scratch (or resume); returns (params, record) where record has the losses and settings.

    With `checkpoint`, the state is saved there every `checkpoint_every` seconds and at the end;
    `resume` continues from it exactly (same batches, same parameters as an unbroken run).
    `stop_after` ends the loop after that step, as a kill would (for tests). `greedy` is a
    [n, ctx + 1] array of the teacher's greedy text, mixed in at tc.greedy_fraction of each batch.
    """
    require_optax()
    import optax

    from specbench.progress import progress

    params = init_params(config, tc.seed)
    opt = make_optimizer(tc)
    opt_state = opt.init(params)
    t_params, t_config = (teacher.params, teacher.config) if teacher else (None, None)
    kd = tc.kd if teacher else 0.0

    @jax.jit
    def update(params, opt_state, x, y, vocab):
        (loss, ce), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y, config, t_params, t_config,
                                                                     kd, vocab)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, ce

    @jax.jit
    def evaluate(params, x, y):
        return cross_entropy(logits_fn(params, x, config), y)

    def val_loss(params):
        rng = np.random.default_rng(1234)  # the same validation windows every time
        return float(np.mean([evaluate(params, *sample_batch(val_tokens, tc.batch, tc.ctx, rng))
                              for _ in range(tc.eval_batches)]))

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

    rng = np.random.default_rng(tc.seed)
    history, first, elapsed_before = [], 1, 0.0
    if resume and checkpoint is not None and checkpoint.exists():
        params, opt_state, meta = load_checkpoint(checkpoint, params, opt_state)
        if meta["train"] != dataclasses.asdict(tc) or meta["config"] != dataclasses.asdict(config):
            raise click.ClickException(f"--resume: {checkpoint} was written with other settings; "
                                       "start afresh without --resume, or pass the same settings")
        rng.bit_generator.state = meta["rng"]
        history, first, elapsed_before = meta["history"], meta["step"] + 1, meta["elapsed"]
        log(f"resumed from {checkpoint} at step {meta['step']}")
    elif resume:
        log(f"--resume: no checkpoint at {checkpoint} yet; starting afresh")

    def checkpoint_now(i):
        save_checkpoint(checkpoint, i, params, opt_state, rng,
                        {"train": dataclasses.asdict(tc), "config": dataclasses.asdict(config),
                         "history": history, "elapsed": elapsed_before + time.perf_counter() - t0})

    tokens_per_step = tc.batch * tc.ctx
    t0 = last_ckpt = time.perf_counter()
    t_steady, n_steady = None, 0  # throughput from the second step on: the first one compiles
    last = min(tc.steps, stop_after or tc.steps)
    with progress(f"train {config.n_layer}x{config.n_embd}", tc.steps, unit="step",
                  interval=progress_interval) as bar:
        bar.update(first - 1)
        for i in range(first, last + 1):
            x, y, vocab = next_batch(rng)
            params, opt_state, loss, ce = update(params, opt_state, x, y, vocab)
            if t_steady is None:
                jax.block_until_ready(loss)
                t_steady = time.perf_counter()
            else:
                n_steady += 1
            if i == first or i % max(1, tc.steps // 50) == 0 or i == tc.steps:
                loss, ce = float(loss), float(ce)
                rate = n_steady * tokens_per_step / max(time.perf_counter() - t_steady, 1e-9)
                history.append({"step": i, "loss": loss, "train_ce": ce, "tokens_per_s": rate})
                bar.update(i, info=f"loss {loss:.3f} · {rate:,.0f} tok/s")
            else:
                bar.update(i)
            if checkpoint is not None and time.perf_counter() - last_ckpt >= checkpoint_every:
                checkpoint_now(i)
                last_ckpt = time.perf_counter()
    if checkpoint is not None and last > first - 1:
        checkpoint_now(last)
    if last < tc.steps:
        return params, {"stopped_at": last, "history": history}
    final_val = val_loss(params)
    log(f"validation cross-entropy {final_val:.4f} (perplexity {math.exp(final_val):.1f})")
    record = {"config": dataclasses.asdict(config), "train": dataclasses.asdict(tc), "val_loss": final_val,
              "val_perplexity": math.exp(final_val), "history": history,
              "teacher": teacher.source if teacher else None,
              "tokens_seen": tc.steps * tc.batch * tc.ctx,
              "seconds": elapsed_before + time.perf_counter() - t0,
              "device": jax.devices()[0].device_kind}
    return params, record


def save_model(out: Path, params, config: GPT2Config, record: dict) -> None:
    weights.save(out, params, config, np_dtype=np.float16, max_shard_bytes=SHARD_BYTES)
    (out / "train_record.json").write_text(json.dumps(record, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# Command line


@click.group()
def main():
    """Train the bundled draft/target pair reproducibly."""


@main.command("prepare")
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("data"), show_default=True)
@click.option("--val-fraction", type=click.FloatRange(0, 0.5, min_open=True), default=0.02, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--xz", is_flag=True, help="Also write .bin.xz copies, small enough to carry to a GPU machine.")
def prepare_cmd(corpus, out, val_fraction, seed, xz):
    """Tokenise a folder of .txt documents into train.bin / val.bin."""
    meta = prepare(corpus, out, val_fraction, seed)
    click.echo(f"train: {meta['train']['tokens']:,} tokens in {meta['train']['documents']} documents; "
               f"val: {meta['val']['tokens']:,} tokens in {meta['val']['documents']} documents -> {out}")
    if xz:
        for path in compress(out):
            click.echo(f"{path}: {path.stat().st_size / 1e6:.1f} MB")


def train_options(layers, embd, heads, lr, kd=None):
    def decorator(f):
        options = [
            click.option("--data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("data")),
            click.option("--out", type=click.Path(path_type=Path), required=True),
            click.option("--n-layer", type=click.IntRange(min=1), default=layers, show_default=True),
            click.option("--n-embd", type=click.IntRange(min=8), default=embd, show_default=True),
            click.option("--n-head", type=click.IntRange(min=1), default=heads, show_default=True),
            click.option("--n-ctx", type=click.IntRange(min=16), default=1024, show_default=True,
                         help="Position table size (the trained context is --ctx)."),
            click.option("--steps", type=click.IntRange(min=1), default=3000, show_default=True),
            click.option("--batch", type=click.IntRange(min=1), default=32, show_default=True),
            click.option("--ctx", type=click.IntRange(min=8), default=512, show_default=True),
            click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=lr, show_default=True),
            click.option("--warmup", type=click.IntRange(min=0), default=200, show_default=True),
            click.option("--seed", type=int, default=0, show_default=True),
            click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path),
                         default=Path("checkpoints"), show_default=True,
                         help="Where the resumable state goes (git-ignored), as DIR/<out's name>.npz."),
            click.option("--checkpoint-every", type=click.FloatRange(min=1), default=300, show_default=True,
                         help="Seconds between checkpoints."),
            click.option("--resume", is_flag=True, help="Continue from the checkpoint exactly where it stopped."),
            click.option("--head-vocab", type=click.IntRange(min=0), default=16384, show_default=True,
                         help="Sampled softmax: each step's head covers this many frequent tokens, the "
                              "batch's rarer targets and random negatives (0 = the full 50,257)."),
            click.option("--head-extra", type=click.IntRange(min=1), default=2048, show_default=True,
                         help="Rarer targets plus random negatives added to each step's head."),
        ]
        if kd is not None:
            options += [
                click.option("--kd", type=click.FloatRange(0, 1), default=kd, show_default=True,
                             help="Weight of KL(target || draft); the rest is cross-entropy."),
                click.option("--greedy-fraction", type=click.FloatRange(0, 1), default=0.0, show_default=True,
                             help="Share of each batch taken from the teacher's own greedy continuations "
                                  "of corpus prefixes (what the draft is judged on at T=0)."),
                click.option("--greedy-samples", type=click.IntRange(min=1), default=4096, show_default=True,
                             help="How many greedy continuations to generate for that."),
            ]
        for option in reversed(options):
            f = option(f)
        return f
    return decorator


def _run(data, out, n_layer, n_embd, n_head, n_ctx, steps, batch, ctx, lr, warmup, seed, checkpoint_dir,
         checkpoint_every, resume, head_vocab, head_extra, kd=0.0, teacher=None, greedy_fraction=0.0,
         greedy_samples=0):
    require_optax()
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=n_ctx, n_vocab=tokenizer.N_VOCAB)
    tc = TrainConfig(steps=steps, batch=batch, ctx=ctx, lr=lr, warmup=warmup, seed=seed, kd=kd,
                     greedy_fraction=greedy_fraction, head_vocab=head_vocab, head_extra=head_extra)
    train_tokens = load_tokens(data, "train")
    greedy = None
    if teacher is not None and greedy_fraction > 0:
        t0 = time.perf_counter()
        prefix_len = max(8, ctx // 4)
        starts = np.random.default_rng(seed + 1).integers(0, train_tokens.size - prefix_len, greedy_samples)
        prefixes = np.stack([train_tokens[s: s + prefix_len] for s in starts]).astype(np.int32)
        greedy = greedy_continuations(teacher.params, teacher.config, prefixes, ctx + 1 - prefix_len,
                                      log=lambda m: click.echo(m, err=True))
        click.echo(f"{greedy_samples} greedy continuations of {ctx + 1 - prefix_len} tokens from the teacher "
                   f"in {time.perf_counter() - t0:.0f} s")
    params, record = train(config, train_tokens, load_tokens(data, "val"), tc, teacher, log=click.echo,
                           checkpoint=checkpoint_dir / f"{out.name}.npz", resume=resume,
                           checkpoint_every=checkpoint_every, greedy=greedy)
    record["data"] = json.loads((data / "meta.json").read_text()) if (data / "meta.json").exists() else None
    if record["data"]:
        record["data"].pop("val_documents", None)
    save_model(out, params, config, record)
    click.echo(f"saved {out}")


@main.command("target")
@train_options(layers=6, embd=384, heads=6, lr=1e-3)
def target_cmd(**kw):
    """Train the target from scratch on next-token cross-entropy."""
    _run(**kw)


@main.command("draft")
@train_options(layers=2, embd=128, heads=2, lr=2e-3, kd=0.7)
@click.option("--teacher", type=click.Path(exists=True, file_okay=False), required=True, help="The trained target.")
def draft_cmd(teacher, **kw):
    """Train the draft, distilled from the target's soft predictions."""
    _run(**kw, teacher=weights.load_model(teacher))


def cli_main():
    """`python -m specbench.train`: usage errors and missing extras as one line and exit 2."""
    try:
        main(standalone_mode=False)
    except click.exceptions.Exit as e:
        raise SystemExit(e.exit_code)
    except (click.ClickException, weights.WeightsError) as e:
        message = e.format_message() if isinstance(e, click.ClickException) else str(e)
        click.echo(f"error: {message}", err=True)
        raise SystemExit(2)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted: the last checkpoint is kept; rerun with --resume", err=True)
        raise SystemExit(130)


if __name__ == "__main__":
    cli_main()
