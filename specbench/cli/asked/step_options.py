"""The options of the two commands that decode nothing: `theory`, the speedup formula as a
calculator, and `roofline`, decode steps against their memory and compute roofs (the decoding
commands' options: options.py)."""

from __future__ import annotations

import dataclasses

import click

from specbench.cli.asked import devices
from specbench.cli.asked.console import BadInput
from specbench.cli.asked.params import CONTEXT_MAX, ITERS_MAX, K_MAX, KERNELS, Count, Finite, ListParam
from specbench.draft_cost import DraftCost

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
        help="Target step over K+1 tokens, for the refined formula (and, with one K, the verify "
        "cost's growth in K for the optimal K).",
    ),
    click.option(
        "--draft-cost",
        type=click.Choice([c.value for c in DraftCost]),
        default="sequential",
        show_default=True,
        help="How the drafter spends a round: K draft steps of --t-draft (sequential: a draft model, "
        "EAGLE), one step of --t-draft over K rows (one-pass: PARD, DFlash) or nothing (free: lookup).",
    ),
]


@dataclasses.dataclass(frozen=True)
class Theory:
    """theory's options: the Ks, the step times (any one unit), r or alpha, the verify step over
    K+1 tokens where given, and the drafter's cost shape."""

    Ks: tuple[int, ...]
    t_draft: float
    t_target: float
    r: float | None = None
    alpha: float | None = None
    t_verify: float | None = None
    cost: DraftCost = DraftCost.SEQUENTIAL

    @classmethod
    def of_flags(cls, f: dict) -> Theory:
        """The flags, checked: one of --r and --alpha, and --t-verify with one K."""
        if (f["r"] is None) == (f["alpha"] is None):
            raise BadInput("--r/--alpha", "give exactly one of --r or --alpha")
        if f["t_verify"] is not None and len(f["K"]) > 1:
            raise BadInput("--t-verify", "is the target step over K+1 tokens of one K: give one K with it")
        fields = (f["t_draft"], f["t_target"], f["r"], f["alpha"], f["t_verify"])
        return cls(tuple(f["K"]), *fields, DraftCost(f["draft_cost"]))

    def verify_of(self, k: int) -> float:
        """The target step over k+1 tokens: linear between t_target (k = 0) and --t-verify at the
        one K given; t_target whatever k without --t-verify (Leviathan et al.'s model)."""
        if self.t_verify is None:
            return self.t_target
        return self.t_target + (self.t_verify - self.t_target) * k / self.Ks[0]


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
        help="Comma list of float32,bfloat16,int8 [default: both floats on GPU, float32 on CPU].",
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
