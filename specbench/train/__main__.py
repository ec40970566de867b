"""Reproducible training of the bundled draft/target pair (extra "train": optax).

    python -m specbench.train prepare --corpus ../shared/corpus --out data/
    python -m specbench.train target  --data data/ --out gpt2_weights/tiny-target
    python -m specbench.train draft   --data data/ --teacher gpt2_weights/tiny-target \
                                      --out gpt2_weights/tiny-draft

data.py holds the data, loop.py the losses and the loop; this file is the command line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np

from specbench.cli.console import BadInput, SpecbenchGroup, interrupt_note
from specbench.cli.params import SEED_MAX, Count, Finite
from specbench.model import tokenizer, weights
from specbench.model.gpt2 import GPT2Config
from specbench.train.data import compress, greedy_continuations, load_tokens, prepare
from specbench.train.loop import TrainConfig, require_optax, save_model, train


@click.group(cls=SpecbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Train the bundled draft/target pair reproducibly."""


@main.command("prepare")
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("data"), show_default=True)
@click.option("--val-fraction", type=Finite(0, 0.5, min_open=True), default=0.02, show_default=True)
@click.option("--seed", type=Count(0, SEED_MAX), default=0, show_default=True)
@click.option("--xz", is_flag=True, help="Also write .bin.xz copies, small enough to carry to a GPU machine.")
def prepare_cmd(corpus, out, val_fraction, seed, xz):
    """Tokenise a folder of .txt documents into train.bin / val.bin."""
    check_folder(out, "--out")
    meta = prepare(corpus, out, val_fraction, seed)
    click.echo(
        f"train: {meta['train']['tokens']:,} tokens in {meta['train']['documents']} documents; "
        f"val: {meta['val']['tokens']:,} tokens in {meta['val']['documents']} documents -> {out}"
    )
    if xz:
        for path in compress(out):
            click.echo(f"{path}: {path.stat().st_size / 1e6:.1f} MB")


def loop_options(lr: float) -> list:
    """The options every training run has: data, output, the loop and its checkpoints."""
    return [
        click.option(
            "--data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("data")
        ),
        click.option("--out", type=click.Path(path_type=Path), required=True),
        click.option("--steps", type=Count(min=1), default=3000, show_default=True),
        click.option("--batch", type=Count(min=1), default=32, show_default=True),
        click.option("--ctx", type=Count(min=8), default=512, show_default=True),
        click.option("--lr", type=Finite(min=0, min_open=True), default=lr, show_default=True),
        click.option("--warmup", type=Count(min=0), default=200, show_default=True),
        click.option("--seed", type=Count(0, SEED_MAX), default=0, show_default=True),
        click.option(
            "--checkpoint-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("checkpoints"),
            show_default=True,
            help="Where the resumable state goes (git-ignored), as DIR/<out's name>.npz.",
        ),
        click.option(
            "--checkpoint-every",
            type=Finite(min=1),
            default=300,
            show_default=True,
            help="Seconds between checkpoints.",
        ),
        click.option("--resume", is_flag=True, help="Continue from the checkpoint exactly where it stopped."),
    ]


def with_options(options: list):
    def decorator(f):
        for option in reversed(options):
            f = option(f)
        return f

    return decorator


def kd_option(default: float):
    """A draft's distillation weight (loop.loss_fn, seq2seq.loss_fn)."""
    return click.option(
        "--kd",
        type=Finite(0, 1),
        default=default,
        show_default=True,
        help="Weight of KL(target || draft); the rest is cross-entropy.",
    )


def train_options(layers, embd, heads, lr, kd=None):
    options = loop_options(lr) + [
        click.option("--n-layer", type=Count(min=1), default=layers, show_default=True),
        click.option("--n-embd", type=Count(min=8), default=embd, show_default=True),
        click.option("--n-head", type=Count(min=1), default=heads, show_default=True),
        click.option(
            "--n-ctx",
            type=Count(min=16),
            default=1024,
            show_default=True,
            help="Position table size (the trained context is --ctx).",
        ),
        click.option(
            "--head-vocab",
            type=Count(0, tokenizer.N_VOCAB),
            default=16384,
            show_default=True,
            help="Sampled softmax: each step's head covers this many frequent tokens, the "
            "batch's rarer targets and random negatives (0 = the full 50,257).",
        ),
        click.option(
            "--head-extra",
            type=Count(1, tokenizer.N_VOCAB),
            default=2048,
            show_default=True,
            help="Rarer targets plus random negatives added to each step's head.",
        ),
    ]
    if kd is not None:
        options += [
            kd_option(kd),
            click.option(
                "--greedy-fraction",
                type=Finite(0, 1),
                default=0.0,
                show_default=True,
                help="Share of each batch taken from the teacher's own greedy continuations "
                "of corpus prefixes (what the draft is judged on at T=0).",
            ),
            click.option(
                "--greedy-samples",
                type=Count(min=1),
                default=4096,
                show_default=True,
                help="How many greedy continuations to generate for that.",
            ),
        ]
    return with_options(options)


MODEL_FLAGS = ("n_layer", "n_head", "n_embd", "n_ctx")
TRAIN_FLAGS = ("steps", "batch", "ctx", "lr", "warmup", "seed", "greedy_fraction", "head_vocab", "head_extra")


def check_folder(path: Path, flag: str) -> None:
    """A folder to write into: absent (it is made) or a folder, never a file."""
    if path.exists() and not path.is_dir():
        raise BadInput(flag, f"{path} is a file: name a folder")


def check_training(flags: dict) -> None:
    """Every setting of a training run that can be checked before any work, each blaming its flag."""
    if flags["n_embd"] % flags["n_head"]:
        raise BadInput("--n-head", f"{flags['n_head']} heads do not divide --n-embd {flags['n_embd']}")
    if flags["ctx"] > flags["n_ctx"]:
        raise BadInput(
            "--ctx", f"{flags['ctx']} is longer than --n-ctx {flags['n_ctx']}, the model's position table"
        )
    if flags["head_vocab"] and flags["head_vocab"] + flags["head_extra"] > tokenizer.N_VOCAB:
        raise BadInput(
            "--head-extra", f"--head-vocab plus --head-extra must be at most {tokenizer.N_VOCAB:,}"
        )
    check_run(flags)


def check_run(flags: dict) -> None:
    """The folders a run writes and the data it reads, each blaming its flag."""
    check_folder(flags["out"], "--out")
    check_folder(flags["checkpoint_dir"], "--checkpoint-dir")
    data = flags["data"]
    for split in ("train", "val"):
        if not any((data / f"{split}.bin{xz}").is_file() for xz in ("", ".xz")):
            raise BadInput(
                "--data",
                f"{data} holds no {split}.bin: make it with python -m specbench.train prepare --out {data}",
            )


def checkpoint_note(flags: dict):
    """(the run's checkpoint file, on_checkpoint): Ctrl-C's note says what is kept, from the start."""
    checkpoint = flags["checkpoint_dir"] / f"{flags['out'].name}.npz"
    note = interrupt_note()
    note.message = (
        f"interrupted: the checkpoint {checkpoint} is kept; rerun with --resume"
        if flags["resume"] and checkpoint.exists()
        else "interrupted before the first checkpoint: nothing is kept"
    )

    def saved(step: int) -> None:
        note.message = f"interrupted: the checkpoint {checkpoint} (step {step}) is kept; rerun with --resume"

    return checkpoint, saved


def train_model(flags: dict, teacher=None):
    """Train one model as the flags say (train_options), from a checkpoint with --resume, and save
    it to --out; a draft is distilled from `teacher` (--kd), a target learns from the data alone."""
    require_optax()
    check_training(flags)
    config = GPT2Config(**{k: flags[k] for k in MODEL_FLAGS}, n_vocab=tokenizer.N_VOCAB)
    tc = TrainConfig(**{k: flags[k] for k in TRAIN_FLAGS if k in flags}, kd=flags.get("kd", 0.0))
    data, ctx, seed = flags["data"], flags["ctx"], flags["seed"]
    train_tokens, val_tokens = load_tokens(data, "train"), load_tokens(data, "val")
    for split, tokens in (("train", train_tokens), ("val", val_tokens)):
        if tokens.size <= ctx + 1:
            raise BadInput(
                "--ctx", f"{data}'s {split} split holds {tokens.size} tokens, fewer than a window of {ctx}"
            )
    checkpoint, saved = checkpoint_note(flags)
    greedy = None
    if teacher is not None and tc.greedy_fraction > 0:
        t0, n_samples = time.perf_counter(), flags["greedy_samples"]
        prefix_len = max(8, ctx // 4)
        starts = np.random.default_rng(seed + 1).integers(0, train_tokens.size - prefix_len, n_samples)
        prefixes = np.stack([train_tokens[s : s + prefix_len] for s in starts]).astype(np.int32)
        greedy = greedy_continuations(
            teacher.params,
            teacher.config,
            prefixes,
            ctx + 1 - prefix_len,
            log=lambda m: click.echo(m, err=True),
        )
        click.echo(
            f"{n_samples} greedy continuations of {ctx + 1 - prefix_len} tokens from the teacher "
            f"in {time.perf_counter() - t0:.0f} s"
        )
    out = flags["out"]
    params, record = train_task(
        flags, config, tc, train_tokens, val_tokens, (checkpoint, saved), teacher=teacher, greedy=greedy
    )
    record["data"] = data_meta(data)
    save_model(out, params, config, record)
    click.echo(f"saved {out}")


def data_meta(data: Path) -> dict | None:
    """What a model's record says of its data: prepare's meta.json, less the held-out list."""
    if not (data / "meta.json").exists():
        return None
    meta = json.loads((data / "meta.json").read_text())
    meta.pop("val_documents", None)
    return meta


def train_task(flags: dict, config, tc: TrainConfig, train_tokens, val_tokens, note=None, **kw):
    """loop.train as the loop's flags say, with its checkpoint, --resume and the note Ctrl-C
    prints (checkpoint_note's, or `note` made earlier); kw: a teacher, greedy text or a Task (an
    EAGLE head's, a T5's). (params, record)."""
    checkpoint, saved = note or checkpoint_note(flags)
    return train(
        config,
        train_tokens,
        val_tokens,
        tc,
        log=click.echo,
        checkpoint=checkpoint,
        resume=flags["resume"],
        checkpoint_every=flags["checkpoint_every"],
        on_checkpoint=saved,
        **kw,
    )


@main.command("target")
@train_options(layers=6, embd=384, heads=6, lr=1e-3)
def target_cmd(**kw):
    """Train the target from scratch on next-token cross-entropy."""
    train_model(kw)


@main.command("draft")
@train_options(layers=2, embd=128, heads=2, lr=2e-3, kd=0.7)
@click.option(
    "--teacher", type=click.Path(exists=True, file_okay=False), required=True, help="The trained target."
)
def draft_cmd(teacher, **kw):
    """Train the draft, distilled from the target's soft predictions."""
    train_model(kw, teacher=weights.load_model(teacher, decoding=False))


@main.command("eagle")
@with_options(
    loop_options(lr=1e-3)
    + [
        click.option(
            "--target",
            default="tiny-target",
            show_default=True,
            help="The frozen target whose features the head reads (a name or a folder).",
        ),
        click.option(
            "--vocab",
            type=Count(0, tokenizer.N_VOCAB),
            default=8192,
            show_default=True,
            help="The most frequent tokens the head drafts among (its drafting.json; 0 = all).",
        ),
        click.option(
            "--cls-weight",
            type=Finite(min=0),
            default=1.0,
            show_default=True,
            help="Weight of the token cross-entropy; the feature regression's is 1 (EAGLE: 0.1, for "
            "features of unit scale; GPT-2's are about 10).",
        ),
        click.option(
            "--noise",
            type=Finite(min=0),
            default=0.5,
            show_default=True,
            help="U(-noise, noise) added to the features the head reads.",
        ),
    ]
)
def eagle_cmd(target, vocab, cls_weight, noise, **flags):
    """Train an EAGLE draft head on a frozen target's features (specbench/model/eagle.py)."""
    require_optax()
    from specbench.errors import SpecbenchError
    from specbench.model import draft_vocab, eagle
    from specbench.train.eagle import EagleLoss, eagle_task, validate

    check_run(flags)
    try:
        t = weights.load_model(target, decoding=False)
        ids = draft_vocab.frequent_ids(vocab, t.config.n_vocab) if vocab else np.arange(t.config.n_vocab)
    except SpecbenchError as e:
        raise BadInput("--target" if "vocab" not in str(e) else "--vocab", str(e)) from None
    if flags["ctx"] > t.config.n_ctx:
        raise BadInput("--ctx", f"{flags['ctx']} is longer than {t.name}'s context {t.config.n_ctx}")
    tc = TrainConfig(**{k: flags[k] for k in ("steps", "batch", "ctx", "lr", "warmup", "seed")})
    data = flags["data"]
    train_tokens, val_tokens = load_tokens(data, "train"), load_tokens(data, "val")
    how = EagleLoss(cls_weight, noise)
    task = eagle_task(t, tc, how, ids, train_tokens, val_tokens)
    config = eagle.config_for(t.config)
    params, record = train_task(flags, config, tc, train_tokens, val_tokens, task=task)
    record["validation"] = validate(params, t, ids, val_tokens, tc, how)
    record["eagle"] = {"target": t.name, "vocab": vocab, "cls_weight": cls_weight, "noise": noise}
    click.echo(
        "validation: top-1 agreement with the target {agreement:.3f}, regression {regression:.4f}, "
        "cross-entropy {ce:.4f}".format(**record["validation"])
    )
    out = flags["out"]
    eagle.save(out, params, config, t.name, record)
    if vocab:
        (out / draft_vocab.DECLARED_FILE).write_text(json.dumps({"vocab": vocab}) + "\n")
    click.echo(f"saved {out}")


def t5_options(enc: int, dec: int, width: int, heads: int, ff: int, lr: float, kd=None):
    options = loop_options(lr) + [
        click.option("--encoder-layers", type=Count(min=1), default=enc, show_default=True),
        click.option("--decoder-layers", type=Count(min=1), default=dec, show_default=True),
        click.option("--d-model", type=Count(min=8), default=width, show_default=True),
        click.option("--n-head", type=Count(min=1), default=heads, show_default=True),
        click.option("--d-ff", type=Count(min=8), default=ff, show_default=True),
        click.option(
            "--source", type=Count(min=1), default=64, show_default=True, help="Tokens the encoder reads."
        ),
        click.option(
            "--target", type=Count(min=1), default=32, show_default=True, help="Tokens the decoder writes."
        ),
    ]
    if kd is not None:
        options.append(kd_option(kd))
    return with_options(options)


def train_t5(flags: dict, teacher=None):
    """Train one T5 of the bundled pair as the flags say (t5_options) and save it to --out with the
    data's tokenizer.json; a draft is distilled from `teacher` (a T5 Model)."""
    require_optax()
    from specbench.model.t5 import T5Config
    from specbench.train import seq2seq

    check_run(flags)
    data = flags["data"]
    tokenizer_json = data / seq2seq.TOKENIZER_FILE
    if not tokenizer_json.is_file():
        raise BadInput(
            "--data", f"{data} holds no {seq2seq.TOKENIZER_FILE}: make it with t5-prepare --out {data}"
        )
    if flags["d_model"] % flags["n_head"]:
        raise BadInput("--n-head", f"{flags['n_head']} heads do not divide --d-model {flags['d_model']}")
    from tokenizers import Tokenizer

    config = T5Config(
        n_vocab=Tokenizer.from_file(str(tokenizer_json)).get_vocab_size(),
        d_model=flags["d_model"],
        d_kv=flags["d_model"] // flags["n_head"],
        d_ff=flags["d_ff"],
        n_layer=flags["encoder_layers"],
        n_decoder_layer=flags["decoder_layers"],
        n_head=flags["n_head"],
        scale_decoder_outputs=True,  # a tied head, as the original T5's: the embedding is most of the pair
    )
    split = seq2seq.Split(flags["source"], flags["target"])
    tc = TrainConfig(
        **{k: flags[k] for k in ("steps", "batch", "lr", "warmup", "seed")},
        ctx=split.source + split.target,
        kd=flags.get("kd", 0.0),
    )
    train_tokens, val_tokens = load_tokens(data, "train"), load_tokens(data, "val")
    t = (teacher.params, teacher.config) if teacher is not None else None
    task = seq2seq.t5_task(config, tc, split, train_tokens, val_tokens, t)
    params, record = train_task(flags, config, tc, train_tokens, val_tokens, task=task)
    record |= {"split": {"source": split.source, "target": split.target}, "teacher": teacher and teacher.name}
    record["data"] = data_meta(data)
    seq2seq.save_model(flags["out"], params, config, record, tokenizer_json)
    click.echo(f"saved {flags['out']}")


@main.command("t5-prepare")
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("data-t5"), show_default=True)
@click.option("--vocab", type=Count(min=260, max=65535), default=4096, show_default=True)
@click.option("--val-fraction", type=Finite(0, 0.5, min_open=True), default=0.02, show_default=True)
@click.option("--seed", type=Count(0, SEED_MAX), default=0, show_default=True)
def t5_prepare_cmd(corpus, out, vocab, val_fraction, seed):
    """Train the T5 pair's byte-level BPE on the training documents (tokenizer.json) and tokenise
    the corpus with it into train.bin / val.bin."""
    from specbench.train import seq2seq

    check_folder(out, "--out")
    meta = prepare(corpus, out, val_fraction, seed, encoder=seq2seq.bpe_encoder(out, vocab))
    click.echo(
        f"a {vocab:,}-token BPE in {out / seq2seq.TOKENIZER_FILE}; "
        f"train: {meta['train']['tokens']:,} tokens, val: {meta['val']['tokens']:,} -> {out}"
    )


@main.command("t5-target")
@t5_options(enc=2, dec=3, width=128, heads=4, ff=384, lr=2e-3)
def t5_target_cmd(**kw):
    """Train the T5 target: the encoder reads a passage, the decoder writes what follows."""
    train_t5(kw)


@main.command("t5-draft")
@t5_options(enc=1, dec=1, width=64, heads=2, ff=192, lr=3e-3, kd=0.7)
@click.option(
    "--teacher", type=click.Path(exists=True, file_okay=False), required=True, help="The trained T5 target."
)
def t5_draft_cmd(teacher, **kw):
    """Train the T5 draft, distilled from the target's soft predictions."""
    train_t5(kw, teacher=weights.load_model(teacher, decoding=False))


def cli_main():
    """`python -m specbench.train`: specbench's exit-code policy (cli/console.py): bad input and a
    missing extra in one line with exit 2, Ctrl-C with exit 130 and the checkpoint kept."""
    main(prog_name="python -m specbench.train")


if __name__ == "__main__":
    cli_main()
