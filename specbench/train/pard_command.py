"""`python -m specbench.train pard`: a draft model adapted into a PARD draft (train/pard.py), saved
as a GPT-2 folder whose vocabulary is its target's and the mask token, with its drafting.json and
training record.

    python -m specbench.train pard --data data --draft tiny-draft --target tiny-target \
                                   --out tiny-draft-pard
"""

from __future__ import annotations

import json

import click
import jax.numpy as jnp
import numpy as np

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.params import Count, Finite
from specbench.model.checkpoints import weights
from specbench.model.nets.families import GPT2, family_of
from specbench.train.commands import main
from specbench.train.data import load_tokens, sample_batch
from specbench.train.loop import TrainConfig, require_optax, save_model
from specbench.train.options import (
    check_run,
    check_tokenizer,
    check_windows,
    loop_options,
    train_task,
    with_options,
)


def load(name: str, flag: str):
    """A GPT-2 model by name or folder, as trained (not laid out for decoding); BadInput naming `flag`."""
    from specbench.errors import SpecbenchError

    try:
        model = weights.load_model(name, decoding=False)
    except SpecbenchError as e:
        raise BadInput(flag, str(e)) from None
    if family_of(model.config) is not GPT2:
        what = "specbench.train adapts drafts and trains heads for GPT-2s so far"
        raise BadInput(flag, f"{model.name} is not a GPT-2: {what}")
    return model


@main.command("pard")
@with_options(
    loop_options(lr=3e-4)
    + [
        click.option("--draft", default="tiny-draft", show_default=True, help="The draft model adapted."),
        click.option(
            "--target", default="tiny-target", show_default=True, help="The frozen target it learns."
        ),
        click.option(
            "--K", "K", type=Count(2, 16), default=8, show_default=True, help="Drafts a pass proposes."
        ),
        click.option(
            "--anchors",
            type=Count(1),
            default=32,
            show_default=True,
            help="Prefixes of each window that carry K - 1 masks (PARD's conditional drop).",
        ),
        click.option("--kd", type=Finite(0, 1), default=0.7, show_default=True, help="Distillation weight."),
        click.option(
            "--vocab",
            type=Count(0),
            default=8192,
            show_default=True,
            help="The most frequent tokens it drafts among (its drafting.json; 0 = all).",
        ),
    ]
)
def pard_cmd(draft, target, K, anchors, kd, vocab, **flags):
    """Adapt a draft model into a PARD draft (one pass proposes K drafts: decode/pard.py)."""
    require_optax()
    from specbench.errors import SpecbenchError
    from specbench.model.checkpoints import draft_vocab
    from specbench.train.pard import PardLoss, masked, pard_task, per_position

    check_run(flags)
    d, t = load(draft, "--draft"), load(target, "--target")
    if d.config.n_vocab != t.config.n_vocab:
        raise BadInput("--draft", f"{d.name} and {t.name} do not share a vocabulary")
    try:
        ids = draft_vocab.frequent_ids(vocab, t.config.n_vocab) if vocab else np.arange(t.config.n_vocab)
    except SpecbenchError as e:
        raise BadInput("--vocab", str(e)) from None
    check_tokenizer(flags["data"], own=False)
    if flags["ctx"] > min(d.config.n_ctx, t.config.n_ctx) or flags["ctx"] < K + anchors:
        raise BadInput(
            "--ctx", f"must hold --anchors + --K tokens and fit both models' context (got {flags['ctx']})"
        )
    tc = TrainConfig(**{k: flags[k] for k in ("steps", "batch", "ctx", "lr", "warmup", "seed")})
    data = flags["data"]
    train_tokens, val_tokens = load_tokens(data, "train"), load_tokens(data, "val")
    check_windows(data, {"train": train_tokens, "val": val_tokens}, tc.ctx, "--ctx")
    how = PardLoss(K, anchors, kd)
    task = pard_task(d, t, ids, train_tokens, val_tokens, tc, how)
    config = masked(d.config)
    params, record = train_task(flags, config, tc, train_tokens, val_tokens, task=task)
    rng = np.random.default_rng(4321)
    x, _ = sample_batch(val_tokens, 8, tc.ctx, rng)
    agreement = per_position(params, t, x, config, jnp.asarray(ids, jnp.int32), how, rng)
    record["pard"] = {"draft": d.name, "target": t.name, "K": K, "anchors": anchors, "kd": kd, "vocab": vocab}
    record["validation"] = {"agreement_per_position": agreement}
    click.echo(
        "validation: top-1 agreement with the target by draft " + ", ".join(f"{a:.3f}" for a in agreement)
    )
    out = flags["out"]
    save_model(out, params, config, record)
    if vocab:
        (out / draft_vocab.DECLARED_FILE).write_text(json.dumps({"vocab": vocab}) + "\n")
    click.echo(f"saved {out}")
