"""Where a run's device time goes: one `specbench run` under JAX's profiler, reduced to a table.

    python scripts/profile_run.py --out DIR -- --K 4 -t 0 -n 21
    python scripts/profile_run.py --reduce DIR/plugins/profile/*/perfetto_trace.json.gz

The run (its flags after `--`; --no-save --repeats 1 are added) is traced with
`jax.profiler.trace(create_perfetto_trace=True)`, the Python tracer off. The trace is then reduced,
per compiled program (XLA module), to what its executions spent on the device:

- span: from the program's first kernel to its last, per execution;
- busy: the union of its kernels and copies on the GPU's streams inside that span;
- idle: span - busy, the gaps, split into those under 5 µs (launch spacing) and over;
- the events that precede the long gaps, by name: a device-to-host copy there is a loop's
  condition read by the host, a kernel there is the host late with the next launch.

Idle time between programs (the host's own work between calls) is summed apart. On a machine
without a device stream (the CPU) it says so and prints the host's program calls instead, so the
script can be tried anywhere. The table goes to stdout and DIR/profile.txt; the trace's process
and thread names and a sample of device events go to DIR/trace-format.json, for the next reader.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import gzip
import json
import os
import statistics
import sys

LONG_GAP_US = 5.0


def trace_run(out: str, flags: list[str]) -> str:
    """Run `specbench run FLAGS --no-save --repeats 1` under the profiler; the perfetto trace's path."""
    import jax

    from specbench.cli.main import cli

    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with jax.profiler.trace(out, create_perfetto_trace=True, profiler_options=options):
        try:
            cli.main(["run", *flags, "--no-save", "--repeats", "1"], standalone_mode=False)
        except SystemExit as stop:
            if stop.code:
                raise
    traces = sorted(glob.glob(os.path.join(out, "plugins", "profile", "*", "perfetto_trace.json.gz")))
    if not traces:
        sys.exit(f"no perfetto trace under {out}")
    return traces[-1]


def load(path: str) -> tuple[dict, dict, list[dict]]:
    """Process names, thread names and complete ('X') events of a Chrome/perfetto trace."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return procs, threads, [e for e in events if e.get("ph") == "X" and "dur" in e]


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping [start, end) intervals (several streams run at once)."""
    merged: list[list[float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def program_names(events: list[dict]) -> tuple[list[float], list[str]]:
    """Start times and names of the host's launches of jitted programs, jnp's one-op calls left out."""
    import jax.numpy as jnp
    from jax import lax

    def one_op(name: str) -> bool:
        bare = name.lstrip("_")
        return any(hasattr(m, n) for m in (jnp, lax) for n in (name, bare)) or bare.startswith(ONE_OPS)

    launches = []
    for e in events:
        if e["name"].startswith("PjitFunction(") and not one_op(e["name"][13:-1]):
            launches.append((e["ts"], e["name"][13:-1]))
    launches.sort()
    return [t for t, _ in launches], [n for _, n in launches]


ONE_OPS = ("reduce", "threefry", "one_hot", "squeeze", "pad", "einsum", "broadcast", "mean", "var", "where")
CONDITIONS = ("set_while_condition", "set_case_condition")


def executions(device: list[dict]) -> list[list[dict]]:
    """The device's work split into program executions: the kernels of one CUDA graph (XLA's
    command buffers, a loop's body included) until a pause of 2 ms, else runs of kernels that name
    the same HLO module."""
    graphs, plain = collections.defaultdict(list), []
    for e in device:
        graph = (e.get("args") or {}).get("cuda_graph_id")
        (graphs[graph] if graph else plain).append(e)
    runs: list[list[dict]] = []
    for evs in graphs.values():
        for e in evs:
            if (
                runs
                and runs[-1][0].get("args", {}).get("cuda_graph_id") == e["args"]["cuda_graph_id"]
                and (e["ts"] - max(x["ts"] + x["dur"] for x in runs[-1][-4:]) < 2000)
            ):
                runs[-1].append(e)
            else:
                runs.append([e])
    for e in plain:
        module = (e.get("args") or {}).get("hlo_module", "?")
        if (
            runs
            and runs[-1][0].get("args", {}).get("hlo_module", "?") == module
            and "cuda_graph_id" not in runs[-1][0].get("args", {})
        ):
            runs[-1].append(e)
        else:
            runs.append([e])
    return runs


def reduce(path: str) -> tuple[str, dict]:
    """The per-program table of a trace (text), and a sample of its format."""
    procs, threads, events = load(path)
    device_pids = {pid for pid, name in procs.items() if name.startswith("/device:")}
    fmt = {
        "processes": {str(k): v for k, v in procs.items()},
        "threads": {f"{p}/{t}": n for (p, t), n in threads.items() if p in device_pids},
    }
    if not device_pids:
        calls = collections.Counter(e["name"] for e in events if e["name"].startswith("PjitFunction"))
        lines = ["no device stream in this trace (a CPU run): the host's program calls, by count"]
        lines += [f"  {n:6d}  {name}" for name, n in calls.most_common(15)]
        return "\n".join(lines), fmt
    # the GPU's own work: kernels, copies and memsets on its streams, not the CUDA API's calls
    device = [
        e
        for e in events
        if e["pid"] in device_pids and threads.get((e["pid"], e["tid"]), "").startswith("Stream")
    ]
    device.sort(key=lambda e: e["ts"])
    fmt["device_sample"] = device[:60]
    starts, names = program_names([e for e in events if e["pid"] not in device_pids])
    per_program = collections.defaultdict(lambda: collections.defaultdict(list))
    for run in executions(device):
        run.sort(key=lambda e: e["ts"])
        at = bisect.bisect_right(starts, run[0]["ts"]) - 1
        graph = run[0].get("args", {}).get("cuda_graph_id")
        name = (names[at] if at >= 0 else "?") + (f" [graph {graph}]" if graph else "")
        busy = union([(x["ts"], x["ts"] + x["dur"]) for x in run])
        ends = {}
        for x in run:
            ends[x["ts"] + x["dur"]] = x["name"]
        gaps = [(b0 - a1, ends.get(a1, "?")) for (_, a1), (b0, _) in zip(busy, busy[1:])]
        row = per_program[name]
        row["span"].append(busy[-1][1] - busy[0][0])
        row["busy"].append(sum(b - a for a, b in busy))
        row["kernels"].append(len(run))
        row["iterations"].append(sum(x["name"].startswith(CONDITIONS) for x in run))
        row["after_condition"].append(sum(g for g, before in gaps if before.startswith(CONDITIONS)))
        row["other_gaps"].append(
            sum(g for g, before in gaps if g > LONG_GAP_US and not before.startswith(CONDITIONS))
        )
        row["short_gaps"].append(sum(g for g, _ in gaps if g <= LONG_GAP_US))
    med = statistics.median
    lines = [
        f"{len(device)} device events; medians per execution, µs. iterations: the loop conditions the",
        "graph evaluated (a while loop's, a cond's); after cond.: the device idle just after them;",
        f"other gaps: idle over {LONG_GAP_US:.0f} µs elsewhere; short: idle under it (launch spacing)",
        f"{'program':40s} {'runs':>4s} {'span':>8s} {'busy':>8s} {'kernels':>7s} {'iters':>5s} "
        f"{'after cond.':>11s} {'per iter':>8s} {'other gaps':>10s} {'short':>7s}",
    ]
    order = sorted(per_program.items(), key=lambda kv: -sum(kv[1]["span"]))
    for name, row in order[:25]:
        iters = med(row["iterations"])
        per = med(row["after_condition"]) / iters if iters else 0.0
        lines.append(
            f"{name[:40]:40s} {len(row['span']):4d} {med(row['span']):8.1f} {med(row['busy']):8.1f} "
            f"{med(row['kernels']):7.0f} {iters:5.0f} {med(row['after_condition']):11.1f} {per:8.1f} "
            f"{med(row['other_gaps']):10.1f} {med(row['short_gaps']):7.1f}"
        )
    return "\n".join(lines), fmt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for the trace and the table")
    parser.add_argument("--reduce", help="reduce this perfetto_trace.json.gz instead of running")
    parser.add_argument("flags", nargs="*", help="specbench run's flags, after --")
    a = parser.parse_args()
    if a.reduce:
        path, out = a.reduce, os.path.dirname(a.reduce)
    else:
        if not a.out:
            parser.error("--out is needed to run")
        path, out = trace_run(a.out, a.flags), a.out
    table, fmt = reduce(path)
    print(table)
    with open(os.path.join(out, "profile.txt"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(out, "trace-format.json"), "w") as f:
        json.dump(fmt, f, indent=1, default=str)


if __name__ == "__main__":
    main()
