"""The options of the two commands that read files only, without JAX: `predict` (a saved run's
acceptance with a device's step times) and `plot` (a results file drawn), and the typed object
each becomes, checked, before any file is read (as settings.Settings is for the decoding commands)."""

from __future__ import annotations

import dataclasses

import click

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.params import K_MAX, Finite, ListParam
from specbench.draft_cost import DraftCost

predict = [
    click.option(
        "--run", "run_file", default=None, help="A saved run or sweep (JSON): its acceptance per position."
    ),
    click.option(
        "--row",
        "row_index",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Which of its rows.",
    ),
    click.option(
        "--alpha", type=Finite(0, 1), default=None, help="One acceptance at every position, instead of --run."
    ),
    click.option(
        "--roofline",
        "roofline_file",
        required=True,
        help="A roofline export, or a report (folder or report.json): t(n).",
    ),
    click.option(
        "--target-model", default=None, help="The target's name in the roofline [default: the run's]."
    ),
    click.option(
        "--draft-model", default=None, help="The draft's name in the roofline [default: the run's]."
    ),
    click.option(
        "--kernels", default=None, help="Which kernels' rows of the roofline [default: the run's, else any]."
    ),
    click.option(
        "--device",
        type=ListParam(float, item=Finite(min=0), distinct=False),
        default=None,
        help="GB/s,GFLOP/s,fixed µs: t(n) of a device modelled from the roofline's bytes and FLOPs.",
    ),
    *(
        click.option(flag, type=Finite(min=0), default=0.0, show_default=True, help=words)
        for flag, words in (
            ("--comm-us", "Communication per target step."),
            ("--overhead-us", "Other work per round (accept/reject)."),
        )
    ),
    click.option(
        "--K", "-k", "Ks", type=ListParam(int, most=K_MAX), default="1-8", help="K to predict [1-8]."
    ),
    click.option(
        "--draft-cost",
        type=click.Choice([c.value for c in DraftCost]),
        default=None,
        help="How the drafter spends a round: K draft steps (sequential), one step over K rows "
        "(one-pass: PARD, DFlash) or nothing (free) [default: the run's, else sequential].",
    ),
]


@dataclasses.dataclass(frozen=True)
class Predict:
    """predict's options: where the acceptance comes from (a run's row, or one alpha), where t(n)
    comes from (a roofline, and the models and kernels in it, or a device's three numbers), and
    the costs a round adds (s)."""

    roofline_file: str
    run_file: str | None = None
    row_index: int = 0
    alpha: float | None = None
    target_model: str | None = None
    draft_model: str | None = None
    kernels: str | None = None
    device: tuple[float, float, float] | None = None  # GB/s, GFLOP/s, fixed µs
    comm_s: float = 0.0
    overhead_s: float = 0.0
    Ks: tuple[int, ...] = tuple(range(1, 9))
    draft_cost: DraftCost | None = None  # None: the run's (draft_cost.py)

    @classmethod
    def of_flags(cls, f: dict) -> Predict:
        """The flags, checked: one source of acceptance, and a device of three positive rates."""
        if (f["run_file"] is None) == (f["alpha"] is None):
            raise BadInput("--run/--alpha", "give exactly one of --run or --alpha")
        device = f["device"]
        if device is not None and len(device) != 3:
            raise BadInput("--device", "give three numbers: GB/s,GFLOP/s,fixed µs (e.g. 3350,989000,20)")
        if device is not None and not (device[0] > 0 and device[1] > 0):
            raise BadInput("--device", "GB/s and GFLOP/s must be above 0 (e.g. 3350,989000,20)")
        return cls(
            f["roofline_file"],
            f["run_file"],
            f["row_index"],
            f["alpha"],
            f["target_model"],
            f["draft_model"],
            f["kernels"],
            None if device is None else tuple(device),
            f["comm_us"] * 1e-6,
            f["overhead_us"] * 1e-6,
            tuple(f["Ks"]),
            None if f["draft_cost"] is None else DraftCost(f["draft_cost"]),
        )


plot = [
    click.argument("file", type=click.Path(exists=True, dir_okay=False)),
    click.option(
        "--output", "-o", default=None, metavar="PNG", help="[default: FILE's name with .png, here]"
    ),
    click.option("--force", is_flag=True, help="Replace an existing PNG."),
    click.option(
        "--budget", is_flag=True, help="Draw each row's time budget (AR beside SD) as stacked bars."
    ),
]


@dataclasses.dataclass(frozen=True)
class Plot:
    """plot's options: the results file, the PNG (None: FILE's name with .png, in the working
    directory), whether it may replace one, and what to draw."""

    file: str
    output: str | None = None
    force: bool = False
    budget: bool = False

    @classmethod
    def of_flags(cls, f: dict) -> Plot:
        return cls(f["file"], f["output"], bool(f["force"]), bool(f["budget"]))
