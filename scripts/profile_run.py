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


def module_of(event: dict) -> str | None:
    args = event.get("args") or {}
    return args.get("hlo_module") or args.get("hlo_module_name")


def executions(device: list[dict], modules_line: list[dict]) -> list[tuple[str, float, float]]:
    """(module, start, end) of each program execution: from the profiler's 'XLA Modules' line where
    it has one, else runs of consecutive device events that name the same module."""
    if modules_line:
        return [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in sorted(modules_line, key=lambda e: e["ts"])]
    spans: list[list] = []
    for e in sorted(device, key=lambda e: e["ts"]):
        name = module_of(e) or "?"
        if spans and spans[-1][0] == name:
            spans[-1][2] = max(spans[-1][2], e["ts"] + e["dur"])
        else:
            spans.append([name, e["ts"], e["ts"] + e["dur"]])
    return [tuple(s) for s in spans]


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
    on_line = collections.defaultdict(list)
    for e in events:
        if e["pid"] in device_pids:
            on_line[threads.get((e["pid"], e["tid"]), "")].append(e)
    modules_line = [e for name, evs in on_line.items() if name == "XLA Modules" for e in evs]
    device = [e for name, evs in on_line.items() if name.startswith("Stream") for e in evs]
    if not device:  # an unknown layout: every device line but the derived ones
        derived = ("XLA Modules", "XLA Ops", "Steps", "TensorFlow Name Scope", "Framework", "Source")
        device = [e for name, evs in on_line.items() if not name.startswith(derived) for e in evs]
    fmt["device_sample"] = sorted(device, key=lambda e: e["ts"])[:60]
    fmt["modules_sample"] = modules_line[:20]
    device.sort(key=lambda e: e["ts"])
    starts = [e["ts"] for e in device]
    per_module = collections.defaultdict(lambda: collections.defaultdict(list))
    before_gap = collections.Counter()
    spans = executions(device, modules_line)
    import bisect

    for name, s, e in spans:
        lo, hi = bisect.bisect_left(starts, s), bisect.bisect_right(starts, e)
        inside = device[lo:hi]
        busy = union([(x["ts"], x["ts"] + x["dur"]) for x in inside])
        if not busy:
            continue
        first, last = busy[0][0], busy[-1][1]
        gaps = [(b0 - a1, a1) for (_, a1), (b0, _) in zip(busy, busy[1:])]
        long = [g for g, _ in gaps if g > LONG_GAP_US]
        row = per_module[name]
        row["span"].append(last - first)
        row["busy"].append(sum(b - a for a, b in busy))
        row["kernels"].append(len(inside))
        row["copies"].append(sum("memcpy" in x["name"].lower() for x in inside))
        row["short"].append(sum(g for g, _ in gaps if g <= LONG_GAP_US))
        row["long"].append(sum(long))
        row["n_long"].append(len(long))
        ends = {x["ts"] + x["dur"]: x["name"] for x in inside}
        for g, at in gaps:
            if g > LONG_GAP_US:
                before_gap[ends.get(at, "?")[:70]] += g
    window = (device[-1]["ts"] + device[-1]["dur"]) - device[0]["ts"]
    in_programs = sum(e - s for _, s, e in spans)
    med = statistics.median
    lines = [
        f"trace {os.path.basename(os.path.dirname(path))}: {len(device)} device events in "
        f"{len(spans)} program executions; device window {window / 1e3:.1f} ms, "
        f"{in_programs / 1e3:.1f} ms inside programs",
        "medians per execution, µs | idle = gaps inside the program (short ≤ 5 µs, long > 5 µs)",
        f"{'program':48s} {'runs':>5s} {'span':>9s} {'busy':>9s} {'short':>8s} {'long':>9s} "
        f"{'#long':>6s} {'kernels':>8s} {'copies':>7s}",
    ]
    order = sorted(per_module.items(), key=lambda kv: -sum(kv[1]["span"]))
    for name, row in order:
        lines.append(
            f"{name[:48]:48s} {len(row['span']):5d} {med(row['span']):9.1f} {med(row['busy']):9.1f} "
            f"{med(row['short']):8.1f} {med(row['long']):9.1f} {med(row['n_long']):6.0f} "
            f"{med(row['kernels']):8.0f} {med(row['copies']):7.0f}"
        )
    lines.append("long gaps by the event before them, µs in all (the whole trace):")
    lines += [f"  {us:10.1f}  {name}" for name, us in before_gap.most_common(12)]
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
