"""The options of the two commands that decode nothing: `theory`, the speedup formula as a
calculator, and `roofline`, decode steps against their memory and compute roofs (the decoding
commands' options: options.py)."""

from __future__ import annotations

import click

from specbench.cli.asked import devices
from specbench.cli.asked.params import CONTEXT_MAX, ITERS_MAX, K_MAX, KERNELS, Count, Finite, ListParam

theory_cmd = [
    click.option(
        "--K",
        "-k",
        "K",
        type=ListParam(int, most=K_MAX),
        required=True,
        help="K, a range (1-8) or a list (1,2,4).",
    ),
    click.option(
        "--t-draft",
        type=Finite(min=0, min_open=True),
        required=True,
        help="Draft step time (any unit, the same as --t-target).",
    ),
    click.option("--t-target", type=Finite(min=0, min_open=True), required=True, help="Target step time."),
    click.option("--r", "r", type=Finite(0, 1), default=None, help="r = tokens per round / (K+1)."),
    click.option("--alpha", type=Finite(0, 1), default=None, help="Per-token acceptance probability."),
    click.option(
        "--t-verify",
        type=Finite(min=0, min_open=True),
        default=None,
        help="Target step over K+1 tokens, for the refined formula.",
    ),
]


roofline = [
    click.option(
        "--model",
        "-m",
        "model_names",
        multiple=True,
        default=None,
        help="Model(s) to measure: registry name, alias or directory [default: the bundled pair].",
    ),
    click.option(
        "--random-init",
        is_flag=True,
        help="Random weights of the registry shape (timing only), for sizes not on disk.",
    ),
    click.option(
        "--dtype",
        "dtypes",
        type=ListParam(str),
        default=None,
        help="Comma list of float32,bfloat16 [default: both on GPU, float32 on CPU].",
    ),
    click.option(
        "--K",
        "-k",
        "K",
        type=Count(1, K_MAX),
        default=4,
        show_default=True,
        help="Measure steps of 1 .. K+1 tokens.",
    ),
    click.option(
        "--kernels",
        "kernels",
        type=ListParam(str, click.Choice(KERNELS)),
        default="auto",
        show_default=True,
        help="Comma list of auto, cpu, pallas, xla: each model is measured with each (see run --help).",
    ),
    click.option(
        "--context", type=Count(8, CONTEXT_MAX), default=128, show_default=True, help="Cache length."
    ),
    click.option(
        "--iters", type=Count(1, ITERS_MAX), default=20, show_default=True, help="Steps per device loop."
    ),
    devices.mesh_option,
    devices.compile_cache_option,
]
