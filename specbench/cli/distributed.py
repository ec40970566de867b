"""Beyond one device, on the command line: `--mesh tp=N` (nets/mesh.py), `--draft-device N`
(decode/placed.py), and
`run --coordinator HOST:PORT --processes N --process-id I`: one run over several processes
(several hosts, or several processes of one), joined by `jax.distributed` before JAX starts. Every
process runs the same programs on its own devices, the target split over all of them (--mesh);
process 0 alone prints and writes, the others take part quietly. On a CPU the processes' collectives
run over gloo."""

from __future__ import annotations

import click

from specbench.cli.console import BadInput

FLAGS = "--coordinator/--processes/--process-id"

mesh_option = click.option(  # run's, sweep's, trace's, report's and roofline's
    "--mesh",
    default=None,
    metavar="tp=N",
    help="Split the target over N devices (tensor parallel, JAX SPMD); the draft is replicated on them.",
)

draft_device_option = click.option(  # run's and sweep's
    "--draft-device",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Put the draft model on device N alone (of its own, or one of --mesh's): each round is then "
    "two programs, the drafts carried between the devices [default: with the target].",
)

options = [
    click.option(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="Process 0's address, for a run over several processes.",
    ),
    click.option(
        "--processes", type=click.IntRange(min=1), default=None, help="How many processes the run spans."
    ),
    click.option(
        "--process-id",
        type=click.IntRange(min=0),
        default=None,
        help="This process's index, 0 .. --processes - 1.",
    ),
]


def join(f: dict) -> bool:
    """Join the run's processes where the flags say so (jax.distributed.initialize); whether this
    process reports (process 0, or a run of one process). BadInput in one line for flags that do
    not go together, or a coordinator that cannot be reached."""
    given = (f["coordinator"], f["processes"], f["process_id"])
    if all(v is None for v in given):
        return True
    if any(v is None for v in given):
        raise BadInput(FLAGS, "give all three, or none")
    if f["process_id"] >= f["processes"]:
        raise BadInput("--process-id", f"must be 0..{f['processes'] - 1} for --processes {f['processes']}")
    if not f["mesh"]:
        raise BadInput(
            "--processes", "the processes split one target: give --mesh tp=N (N: their devices in all)"
        )
    if f.get("dry_run"):  # the flags are checked; a dry run joins nothing
        return f["process_id"] == 0
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # a CPU's; a GPU's are NCCL's
    try:
        jax.distributed.initialize(
            f["coordinator"], f["processes"], f["process_id"], initialization_timeout=60
        )
    except Exception as e:  # noqa: BLE001 -- jax raises RuntimeError, ValueError or XlaRuntimeError here
        raise BadInput(
            "--coordinator", f"cannot join the run at {f['coordinator']}: {str(e).splitlines()[0][:160]}"
        ) from None
    return f["process_id"] == 0


def follower(f: dict) -> dict:
    """A follower's flags: it saves and exports nothing (process 0 does)."""
    return f | {"save": False, "export_csv": None, "export_json": None}
