"""`python -m specbench.train`: reproducible training of the bundled pairs, GPT-2's and T5's, and
of an EAGLE head.

    python -m specbench.train prepare --corpus ../shared/corpus --out data/
    python -m specbench.train target  --data data/ --out gpt2_weights/tiny-target
    python -m specbench.train draft   --data data/ --teacher gpt2_weights/tiny-target \
                                      --out gpt2_weights/tiny-draft

data.py holds the data, loop.py the losses and the loop, options.py the options and checks;
this file is the commands.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np

from specbench.cli.asked.console import BadInput, SpecbenchGroup
from specbench.cli.asked.params import SEED_MAX, Count, Finite
from specbench.model.checkpoints import tokenizer, weights
from specbench.model.nets import network
from specbench.model.nets.families import family_of
from specbench.model.nets.gpt2 import GPT2Config
from specbench.train.data import compress, greedy_continuations, load_tokens, prepare
from specbench.train.loop import TrainConfig, require_optax, save_model
from specbench.train.options import (
    MODEL_FLAGS,
    TRAIN_FLAGS,
    check_folder,
    check_run,
    check_tokenizer,
    check_training,
    check_windows,
    checkpoint_note,
    data_meta,
    head_data,
    loop_options,
    t5_options,
    train_options,
    train_task,
    with_options,
)


@click.group(cls=SpecbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Train the bundled draft/target pairs and EAGLE heads reproducibly."""


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


def train_model(flags: dict, teacher=None):
    """Train one model as the flags say (train_options), from a checkpoint with --resume, and save
    it to --out; a draft is distilled from `teacher` (--kd), a target learns from the data alone."""
    require_optax()
    check_training(flags)
    config = GPT2Config(**{k: flags[k] for k in MODEL_FLAGS}, n_vocab=tokenizer.N_VOCAB)
    tc = TrainConfig(**{k: flags[k] for k in TRAIN_FLAGS if k in flags}, kd=flags.get("kd", 0.0))
    data, ctx, seed = flags["data"], flags["ctx"], flags["seed"]
    check_tokenizer(data, own=False)
    if teacher is not None and not family_of(teacher.config).trains_heads:
        kind = network.display_name(teacher.config)
        raise BadInput("--teacher", f"{teacher.name} is a {kind}: a GPT-2 draft learns from a GPT-2 target")
    train_tokens, val_tokens = load_tokens(data, "train"), load_tokens(data, "val")
    check_windows(data, {"train": train_tokens, "val": val_tokens}, ctx, "--ctx")
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
        click.option(
            "--format",
            "head_format",
            type=click.Choice(["eagle", "eagle3"]),
            default="eagle",
            show_default=True,
            help="eagle: a block of the target's family over its last features, EAGLE's two losses; "
            "eagle3: the published EAGLE-3 layout over three taps, trained with the training-time test "
            "(specbench/train/eagle3.py; --cls-weight and --noise do not apply).",
        ),
        click.option(
            "--ttt-depth", type=Count(1, 8), default=3, show_default=True, help="eagle3: the passes unrolled."
        ),
    ]
)
def eagle_cmd(target, vocab, cls_weight, noise, head_format, ttt_depth, **flags):
    """Train an EAGLE draft head on a frozen target's features (specbench/model/nets/eagle.py), or
    with --format eagle3 an EAGLE-3 head (eagle3.py)."""
    require_optax()
    from specbench.errors import SpecbenchError
    from specbench.model.checkpoints import draft_vocab, eagle_files
    from specbench.model.nets import eagle
    from specbench.train.eagle import EagleLoss, eagle_task, validate

    check_run(flags)
    try:
        t = weights.load_model(target, decoding=False)
    except SpecbenchError as e:
        raise BadInput("--target", str(e)) from None
    if not family_of(t.config).trains_heads:
        kind = network.display_name(t.config)
        raise BadInput(
            "--target", f"{t.name} is a {kind}: specbench.train trains EAGLE heads for GPT-2 targets so far"
        )
    ids, tc, train_tokens, val_tokens = head_data(flags, t, vocab)
    if head_format == "eagle3":
        return train_eagle3(flags, t, tc, ids, train_tokens, val_tokens, ttt_depth)
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
    eagle_files.save(out, params, config, t.name, record)
    if vocab:
        (out / draft_vocab.DECLARED_FILE).write_text(json.dumps({"vocab": vocab}) + "\n")
    click.echo(f"saved {out}")


def train_eagle3(flags: dict, t, tc, ids, train_tokens, val_tokens, depth: int) -> None:
    """`train eagle --format eagle3`: an EAGLE-3 head over `t`, saved in EAGLE-3's published layout
    with its d2t (the drafting vocabulary's ids) and the training record."""
    from specbench.model.checkpoints import eagle3_files
    from specbench.train.eagle3 import TTT, eagle3_task, head_config, validate

    ttt = TTT(depth)
    task = eagle3_task(t, tc, ttt, ids, train_tokens, val_tokens)
    config = head_config(t.config, len(ids))
    params, record = train_task(flags, config, tc, train_tokens, val_tokens, task=task)
    record["validation"] = validate(params, t, ids, val_tokens, tc, ttt)
    record["eagle3"] = {"target": t.name, "vocab": len(ids), "ttt_depth": depth, "taps": list(config.taps)}
    click.echo(
        "validation: top-1 agreement with the target {agreement:.3f} at the first pass, "
        "{agreement_last:.3f} at the last, cross-entropy {ce:.4f}".format(**record["validation"])
    )
    out = flags["out"]
    d2t = np.asarray(ids, np.int64) - np.arange(len(ids))
    eagle3_files.save(out, {**params, "d2t": d2t}, config)
    (out / "train_record.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    click.echo(f"saved {out}")


def train_t5(flags: dict, teacher=None):
    """Train one T5 of the bundled pair as the flags say (t5_options) and save it to --out with the
    data's tokenizer.json; a draft is distilled from `teacher` (a T5 Model)."""
    require_optax()
    from specbench.model.nets.t5 import T5Config
    from specbench.train import seq2seq

    check_run(flags)
    data = flags["data"]
    tokenizer_json = data / seq2seq.TOKENIZER_FILE
    check_tokenizer(data, own=True)
    if not tokenizer_json.is_file():
        raise BadInput(
            "--data", f"{data} holds no {seq2seq.TOKENIZER_FILE}: make it with t5-prepare --out {data}"
        )
    if teacher is not None and not family_of(teacher.config).encoder_decoder:
        raise BadInput("--teacher", f"{teacher.name} is a GPT-2 model: a T5 draft learns from a T5 target")
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
    if teacher is not None and teacher.config.n_vocab != config.n_vocab:
        raise BadInput(
            "--teacher",
            f"{teacher.name} predicts {teacher.config.n_vocab:,} tokens; {tokenizer_json} has "
            f"{config.n_vocab:,}",
        )
    train_tokens, val_tokens = load_tokens(data, "train"), load_tokens(data, "val")
    windows = {"train": train_tokens, "val": val_tokens}
    check_windows(
        data, windows, split.source + split.target, "--source" if split.source > split.target else "--target"
    )
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
    meta = prepare(
        corpus,
        out,
        val_fraction,
        seed,
        encoder=seq2seq.bpe_encoder(out, vocab),
        tokenizer_name=seq2seq.TOKENIZER_FILE,
    )
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
