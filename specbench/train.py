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
import time
from pathlib import Path

import click
import jax
import jax.numpy as jnp
import numpy as np

from specbench import tokenizer, weights
from specbench.gpt2 import GPT2Config, gpt2, init_params

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


def logits_fn(params, x, config: GPT2Config):
    """[batch, ctx] -> [batch, ctx, n_vocab] float32, matmuls in bfloat16."""
    half = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params)
    return jax.vmap(lambda seq: gpt2(half, seq, config))(x)


def cross_entropy(logits, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], axis=-1))


def loss_fn(params, x, y, config, teacher_params=None, teacher_config=None, kd: float = 0.0):
    logits = logits_fn(params, x, config)
    ce = cross_entropy(logits, y)
    if teacher_params is None or kd == 0:
        return ce, ce
    q = jax.nn.softmax(jax.lax.stop_gradient(logits_fn(teacher_params, x, teacher_config)))
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
    seed: int = 0
    eval_batches: int = 20


def make_optimizer(tc: TrainConfig):
    import optax

    schedule = optax.warmup_cosine_decay_schedule(0.0, tc.lr, tc.warmup, max(tc.steps, tc.warmup + 1), tc.lr * 0.1)
    # no decay on biases, norm gains and position table: only the matrices of the blocks and wte
    decay_mask = lambda params: jax.tree_util.tree_map_with_path(
        lambda path, p: path[0].key == "wte" or (path[0].key == "blocks" and p.ndim == 3), params)
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay, mask=decay_mask))


def train(config: GPT2Config, train_tokens: np.ndarray, val_tokens: np.ndarray, tc: TrainConfig,
          teacher: weights.Model | None = None, log=print):
    """Train from scratch; returns (params, record) where record has the losses and settings."""
    import optax

    params = init_params(config, tc.seed)
    opt = make_optimizer(tc)
    opt_state = opt.init(params)
    t_params, t_config = (teacher.params, teacher.config) if teacher else (None, None)
    kd = tc.kd if teacher else 0.0

    @jax.jit
    def update(params, opt_state, x, y):
        (loss, ce), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y, config, t_params, t_config, kd)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, ce

    @jax.jit
    def evaluate(params, x, y):
        return cross_entropy(logits_fn(params, x, config), y)

    def val_loss(params):
        rng = np.random.default_rng(1234)  # the same validation windows every time
        return float(np.mean([evaluate(params, *sample_batch(val_tokens, tc.batch, tc.ctx, rng))
                              for _ in range(tc.eval_batches)]))

    rng = np.random.default_rng(tc.seed)
    history, t0 = [], time.perf_counter()
    for i in range(1, tc.steps + 1):
        x, y = sample_batch(train_tokens, tc.batch, tc.ctx, rng)
        params, opt_state, loss, ce = update(params, opt_state, x, y)
        if i == 1 or i % max(1, tc.steps // 20) == 0 or i == tc.steps:
            loss, ce = float(loss), float(ce)
            tokens_per_s = i * tc.batch * tc.ctx / (time.perf_counter() - t0)
            history.append({"step": i, "loss": loss, "train_ce": ce})
            log(f"step {i:6d}/{tc.steps}  loss {loss:.4f}  ce {ce:.4f}  {tokens_per_s:,.0f} tok/s")
    final_val = val_loss(params)
    log(f"validation cross-entropy {final_val:.4f} (perplexity {math.exp(final_val):.1f})")
    record = {"config": dataclasses.asdict(config), "train": dataclasses.asdict(tc), "val_loss": final_val,
              "val_perplexity": math.exp(final_val), "history": history,
              "teacher": teacher.source if teacher else None,
              "tokens_seen": tc.steps * tc.batch * tc.ctx, "seconds": time.perf_counter() - t0,
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
            click.option("--lr", type=float, default=lr, show_default=True),
            click.option("--warmup", type=click.IntRange(min=0), default=200, show_default=True),
            click.option("--seed", type=int, default=0, show_default=True),
        ]
        if kd is not None:
            options.append(click.option("--kd", type=click.FloatRange(0, 1), default=kd, show_default=True,
                                        help="Weight of KL(target || draft); the rest is cross-entropy."))
        for option in reversed(options):
            f = option(f)
        return f
    return decorator


def _run(data, out, n_layer, n_embd, n_head, n_ctx, steps, batch, ctx, lr, warmup, seed, kd=0.0, teacher=None):
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=n_ctx, n_vocab=tokenizer.N_VOCAB)
    tc = TrainConfig(steps=steps, batch=batch, ctx=ctx, lr=lr, warmup=warmup, seed=seed, kd=kd)
    params, record = train(config, load_tokens(data, "train"), load_tokens(data, "val"), tc, teacher,
                           log=click.echo)
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


if __name__ == "__main__":
    main()
