"""The options that say where the work runs: --mesh (a target split over devices, nets/mesh.py),
--draft-device (a draft on a device of its own, decode/placed.py), a run over several processes
(--coordinator, --processes, --process-id, --join-timeout: commands/distributed.py and
processes.py), whether compiled programs are kept between runs (--no-compile-cache,
measure/compile_cache.py), the weights' format (--dtype, --target-dtype, --draft-dtype) and the
llama.cpp build a peer runs (--llamacpp)."""

from __future__ import annotations

import click

from specbench.cli.asked.params import DTYPES, Count, llamacpp_folder


def use_compile_cache(ctx, param, no_cache: bool) -> None:
    """--no-compile-cache's callback, run as the flags are read, before any program compiles."""
    from specbench.measure import compile_cache

    compile_cache.configure(not no_cache)


compile_cache_option = click.option(  # every command that compiles (measure/compile_cache.py)
    "--no-compile-cache",
    is_flag=True,
    expose_value=False,
    callback=use_compile_cache,
    help="Compile every program anew: keep none in, and read none from, the user's cache folder "
    "($XDG_CACHE_HOME/specbench/xla) [default: programs are kept there between runs].",
)

join_timeout_option = click.option(
    "--join-timeout",
    type=click.FloatRange(min=1, max=3600),
    default=60.0,
    show_default=True,
    help="Seconds a process waits for the others to join the run before it gives up.",
)

mesh_option = click.option(  # run's, sweep's, trace's, report's and roofline's
    "--mesh",
    default=None,
    metavar="tp=N",
    help="Split the target over N devices (tensor parallel, JAX SPMD); the draft is replicated on them.",
)

draft_device_option = click.option(  # run's and sweep's
    "--draft-device",
    type=Count(min=0),
    default=None,
    metavar="N",
    help="Put the draft model on device N alone (of its own, or one of --mesh's): each round is then "
    "two programs, the drafts carried between the devices [default: with the target].",
)

processes_options = [  # run's
    click.option(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="Process 0's address, for a run over several processes.",
    ),
    click.option("--processes", type=Count(min=1), default=None, help="How many processes the run spans."),
    click.option(
        "--process-id",
        type=Count(min=0),
        default=None,
        help="This process's index, 0 .. --processes - 1.",
    ),
    join_timeout_option,
]


dtype_options = [
    click.option(
        "--dtype",
        type=click.Choice(DTYPES),
        default="float32",
        show_default=True,
        help="Weights of both models: float32, bfloat16, or int8 (llama.cpp's Q8_0, on the CPU kernel; "
        "docs/cpu.md).",
    ),
    click.option("--target-dtype", type=click.Choice(DTYPES), help="The target's [default: --dtype]."),
    click.option("--draft-dtype", type=click.Choice(DTYPES), help="The draft's [default: --dtype]."),
]
llamacpp_option = click.option(
    "--llamacpp",
    metavar="DIR",
    default=None,
    expose_value=False,
    callback=llamacpp_folder,
    help="The llama.cpp build --peer llamacpp runs (scripts/build_llamacpp.sh) "
    "[default: $SPECBENCH_LLAMACPP].",
)
