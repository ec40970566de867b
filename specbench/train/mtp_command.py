"""`python -m specbench.train mtp`: an MTP layer for a frozen GPT-2 target (train/mtp.py), saved
in DeepSeek's layout as a folder of its own (checkpoints/mtp_files.save_head), with its training
record. Named <target>-mtp in gpt2_weights/, `--drafter mtp` finds it for a target whose own
folder ships no MTP layer.

    python -m specbench.train mtp --data data --target tiny-target --out gpt2_weights/tiny-target-mtp
"""

from __future__ import annotations

import json

import click
import numpy as np

from specbench.cli.asked.params import Count
from specbench.train.commands import main
from specbench.train.loop import require_optax
from specbench.train.options import (
    check_run,
    head_data,
    loop_options,
    train_task,
    with_options,
)
from specbench.train.pard_command import load


@main.command("mtp")
@with_options(
    loop_options(lr=1e-3)
    + [
        click.option(
            "--target",
            default="tiny-target",
            show_default=True,
            help="The frozen GPT-2 target it drafts for.",
        ),
        click.option(
            "--depth",
            type=Count(1, 8),
            default=2,
            show_default=True,
            help="Passes unrolled: pass d reads what pass d - 1 returned, as draft d does.",
        ),
        click.option(
            "--vocab",
            type=Count(0),
            default=8192,
            show_default=True,
            help="The most frequent tokens its distillation covers (0 = all).",
        ),
    ]
)
def mtp_cmd(target, depth, vocab, **flags):
    """Train an MTP layer in DeepSeek's layout for a GPT-2 target (specbench/model/nets/mtp.py)."""
    require_optax()
    from specbench.model.checkpoints import draft_vocab, mtp_files
    from specbench.model.nets import mtp
    from specbench.train.mtp import MtpLoss, mtp_task, validate

    check_run(flags)
    t = load(target, "--target")
    ids, tc, train_tokens, val_tokens = head_data(flags, t, vocab)
    how = MtpLoss(depth)
    task = mtp_task(t, tc, how, ids, train_tokens, val_tokens)
    params, record = train_task(flags, t.config, tc, train_tokens, val_tokens, task=task)
    record["validation"] = validate(params, t, ids, val_tokens, tc, how)
    record["mtp"] = {"target": t.name, "format": mtp.DEEPSEEK.name, "depth": depth, "vocab": vocab}
    click.echo(
        "validation: top-1 agreement with the target {agreement:.3f} at the first pass, "
        "{agreement_last:.3f} at the last, cross-entropy {ce:.4f}".format(**record["validation"])
    )
    out = flags["out"]
    config = mtp.config_for(t.config, mtp.DEEPSEEK)
    mtp_files.save_head(out, params, config, t.config, t.name, np.float16)  # the bundled heads' precision
    (out / "train_record.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    if vocab:  # it drafts among the tokens it learnt (--draft-vocab auto)
        (out / draft_vocab.DECLARED_FILE).write_text(json.dumps({"vocab": vocab}) + "\n")
    click.echo(f"saved {out}")
