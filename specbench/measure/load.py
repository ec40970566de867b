"""How busy the machine was while we measured: the CPU time other processes (and the hypervisor)
took, in cores, beside the load average. A timing taken while others ran is marked, not hidden.

On Linux the machine's busy time comes from /proc/stat and ours from time.process_time(), which
counts every thread of this process (XLA's included), plus the CPU time of our helper processes
(the peers' workers, peers.py) from /proc/PID/stat; elsewhere only the load average is known.
"""

from __future__ import annotations

import dataclasses
import os
import time

BUSY_CORES = 0.25  # others took more than a quarter of a core on average: the timing is marked


@dataclasses.dataclass(frozen=True)
class Snapshot:
    wall: float
    own_cpu: float
    machine_busy: float | None  # seconds of CPU time all processes used since boot, or None
    load_average: float | None


def machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine spent busy since boot (user, nice, system, irq, softirq,
    steal of /proc/stat's first line), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """CPU time another process has used, all its threads (Linux's /proc; 0 where unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def snapshot(helpers: tuple[int, ...] = ()) -> Snapshot:
    """The clocks now; `helpers`: pids of processes working for this one (None: a peer with no
    process between calls), whose CPU time is ours, as is that of the children it has waited for
    (a peer's program run once a call: llamacpp.py)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    children = os.times().children_user + os.times().children_system
    own = time.process_time() + children + sum(process_cpu_seconds(pid) for pid in helpers if pid is not None)
    return Snapshot(time.perf_counter(), own, machine_busy_seconds(), load)


def others(start: Snapshot, end: Snapshot) -> dict:
    """What ran beside us between two snapshots: other_load (cores, mean; None where unknown),
    under_load (other_load > BUSY_CORES), and the load averages at both ends."""
    wall = max(end.wall - start.wall, 1e-9)
    other = None
    if start.machine_busy is not None and end.machine_busy is not None:
        theirs = (end.machine_busy - start.machine_busy) - (end.own_cpu - start.own_cpu)
        other = max(0.0, theirs / wall)
    return {
        "other_load": other,
        "under_load": other is not None and other > BUSY_CORES,
        "load_average_start": start.load_average,
        "load_average_end": end.load_average,
    }
