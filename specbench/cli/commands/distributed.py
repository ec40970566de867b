"""Beyond one device, on the command line: `--mesh tp=N` (nets/mesh.py), `--draft-device N`
(decode/placed.py), and
`run --coordinator HOST:PORT --processes N --process-id I`: one run over several processes
(several hosts, or several processes of one), joined by `jax.distributed` before JAX starts. Every
process runs the same programs on its own devices, the target split over all of them (--mesh);
process 0 alone prints and writes, the others take part quietly. On a CPU the processes' collectives
run over gloo. Each process is watched from outside (processes.py): whatever happens to the run, it
ends in one line naming the process, within --join-timeout while joining."""

from __future__ import annotations

import dataclasses
import errno
import socket
import sys
from typing import TYPE_CHECKING

from specbench.cli.asked.console import BadInput
from specbench.cli.commands import processes

if TYPE_CHECKING:
    from specbench.cli.asked.settings import Processes, Settings

FLAGS = "--coordinator/--processes/--process-id"


def join(s: Settings, p: Processes) -> tuple[bool, Settings]:
    """Join the run's processes where --coordinator/--processes/--process-id say so
    (jax.distributed.initialize): (whether this process reports, process 0 or a run of one
    process; the settings it runs, a follower's writing nothing). BadInput in one line for flags
    that do not go together, or a coordinator that cannot be reached."""
    given = (p.coordinator, p.count, p.index)
    if all(v is None for v in given):
        return True, s
    if any(v is None for v in given):
        raise BadInput(FLAGS, "give all three, or none")
    if p.index >= p.count:
        raise BadInput("--process-id", f"must be 0..{p.count - 1} for --processes {p.count}")
    if not s.models.mesh:
        raise BadInput(
            "--processes", "the processes split one target: give --mesh tp=N (N: their devices in all)"
        )
    host, port = address(p.coordinator)
    leader = p.index == 0
    if s.dry_run:  # the flags are checked; a dry run joins nothing, so this process sees its own
        return leader, dataclasses.replace(s, models=dataclasses.replace(s.models, mesh=None))  # devices
    if not processes.in_child():  # watched from outside: the child joins (processes.py)
        if leader:
            check_free(host, port)
        sys.exit(processes.supervise(p))
    processes.watch_parent()
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # a CPU's; a GPU's are NCCL's
    try:  # the watching process gives up first, at --join-timeout, in one line
        jax.distributed.initialize(
            p.coordinator, p.count, p.index, initialization_timeout=int(p.join_timeout) + 30
        )
    except Exception as e:  # noqa: BLE001 -- jax raises RuntimeError, ValueError or XlaRuntimeError here
        raise BadInput(
            "--coordinator", f"cannot join the run at {p.coordinator}: {str(e).splitlines()[0][:160]}"
        ) from None
    print(processes.JOINED, file=sys.stderr, flush=True)
    from specbench.cli.asked.settings import Output

    return leader, s if leader else dataclasses.replace(s, output=Output())  # process 0 alone writes


def follower_dry_run(p) -> str:
    """What a dry run of process p.index > 0 says: it would only follow process 0."""
    return (
        f"dry run: process {p.index} of {p.count} would join process 0 at {p.coordinator} and hold its "
        f"share of the target; process 0 measures, prints and writes (its own dry run shows the plan); "
        "nothing was joined, compiled or written"
    )


def address(text: str) -> tuple[str, int]:
    """--coordinator's HOST:PORT, checked before anything joins: a host, and a port in 1..65535."""
    host, sep, port = text.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise BadInput(
            "--coordinator", f"{text!r} is not HOST:PORT with a port in 1..65535 (e.g. 127.0.0.1:12345)"
        )
    return host.strip("[]"), int(port)


def check_free(host: str, port: int) -> None:
    """Process 0 serves the coordinator at HOST:PORT: refused in one line if the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be served here ({e.strerror or e})"
            raise BadInput("--coordinator", f"port {port} of {host} {why}: choose another") from None
