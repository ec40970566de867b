"""The training commands' options and the checks and bookkeeping every run shares: the data,
the output, the loop and its checkpoints (loop.train), each bad setting blamed on its flag."""

from __future__ import annotations

import json
from pathlib import Path

import click

from specbench.cli.asked.console import BadInput, interrupt_note
from specbench.cli.asked.params import SEED_MAX, Count, Finite
from specbench.model.checkpoints import tokenizer
from specbench.train.loop import TrainConfig, train


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


def check_windows(data: Path, splits: dict, window: int, flag: str) -> None:
    """Each split holds more than one window of `window` tokens; else blame `flag`, which sets it."""
    for split, tokens in splits.items():
        if tokens.size <= window + 1:
            raise BadInput(
                flag,
                f"{data}'s {split} split holds {tokens.size} tokens, fewer than a window of {window}",
            )


def check_tokenizer(data: Path, own: bool) -> None:
    """The data was tokenised for the model: by GPT-2's tokenizer (prepare) for a GPT-2 model or an
    EAGLE head, by the folder's own tokenizer.json (t5-prepare) for a T5 (own). prepare records
    which in meta.json; a folder from before says so by holding a tokenizer.json or not."""
    meta = data_meta(data) or {}
    has_own = (
        meta.get("tokenizer", "tokenizer.json" if (data / "tokenizer.json").is_file() else "gpt2") != "gpt2"
    )
    if own and not has_own:
        raise BadInput(
            "--data", f"{data} was tokenised by GPT-2's tokenizer: make a T5's data with t5-prepare"
        )
    if not own and has_own:
        raise BadInput(
            "--data",
            f"{data} was tokenised by its own tokenizer.json (t5-prepare), not GPT-2's: make it with prepare",
        )


def head_data(flags: dict, target, vocab: int):
    """What training a head over a frozen target reads, checked (BadInput naming the flag): the
    ids of its --vocab most frequent tokens (all with 0), the loop's TrainConfig, and the train
    and validation tokens of --data in windows of --ctx that fit the target's context."""
    import numpy as np

    from specbench.errors import SpecbenchError
    from specbench.model.checkpoints import draft_vocab
    from specbench.train.data import load_tokens

    n_vocab = target.config.n_vocab
    try:
        ids = draft_vocab.frequent_ids(vocab, n_vocab) if vocab else np.arange(n_vocab)
    except SpecbenchError as e:
        raise BadInput("--vocab", str(e)) from None
    check_tokenizer(flags["data"], own=False)
    if flags["ctx"] > target.config.n_ctx:
        raise BadInput(
            "--ctx", f"{flags['ctx']} is longer than {target.name}'s context {target.config.n_ctx}"
        )
    tc = TrainConfig(**{k: flags[k] for k in ("steps", "batch", "ctx", "lr", "warmup", "seed")})
    data = flags["data"]
    train_tokens, val_tokens = load_tokens(data, "train"), load_tokens(data, "val")
    check_windows(data, {"train": train_tokens, "val": val_tokens}, tc.ctx, "--ctx")
    return ids, tc, train_tokens, val_tokens
