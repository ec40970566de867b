"""Where the test suite's time goes: a pytest plugin that logs, test by test, each JAX compile
phase (tracing, lowering to MLIR, XLA's backend compile, persistent-cache reads) with the
function's name, and a summary of those logs by file, by function and by worker.

    PYTHONPATH=scripts SUITE_PROFILE=/tmp/prof python -m pytest -q -p suite_profile
    python scripts/suite_profile.py /tmp/prof

Each xdist worker writes one JSON-lines file. The worker processes the tests start themselves
(test_mesh.py's 4-device worker, the peers) are not seen: their time counts as "rest".
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

PHASES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache read",
}

EVENTS = {  # the persistent compilation cache's counters (jax/_src/compiler.py, compilation_cache.py)
    "/jax/compilation_cache/compile_requests_use_cache": "cache asked",
    "/jax/compilation_cache/cache_hits": "cache hit",
    "/jax/compilation_cache/cache_misses": "cache miss",
}
READ_ERROR = "Error reading persistent compilation cache entry"

_log = {"file": None, "test": "(collection)"}


def _write(*record) -> None:
    if _log["file"] is not None:
        _log["file"].write(json.dumps(record) + "\n")


def _on_duration(event: str, seconds: float, **kwargs) -> None:
    if event in PHASES:
        _write(_log["test"], PHASES[event], kwargs.get("fun_name", ""), round(seconds, 4))


def _on_event(event: str, **kwargs) -> None:
    if event in EVENTS:
        _write(_log["test"], EVENTS[event], "", 1)


def _count_read_errors() -> None:
    """Count the cache's read errors, which JAX reports as a warning (pyproject filters it)."""
    import warnings

    from jax._src import compiler

    class Counting:
        def __getattr__(self, name):
            return getattr(warnings, name)

        @staticmethod
        def warn(message, *args, **kwargs):
            if str(message).startswith(READ_ERROR):
                _write(_log["test"], "cache read error", str(message)[len(READ_ERROR) :][:80], 1)
            return warnings.warn(message, *args, **kwargs)

    compiler.warnings = Counting()


def pytest_configure(config) -> None:
    """Open this process's log and listen to JAX's duration events and cache counters."""
    from jax import monitoring

    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        return  # the xdist controller: its workers run the tests and log them
    folder = Path(os.environ.get("SUITE_PROFILE", "suite-profile"))
    folder.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _log["file"] = open(folder / f"events-{worker}.jsonl", "w", buffering=1)  # noqa: SIM115
    monitoring.register_event_duration_secs_listener(_on_duration)
    monitoring.register_event_listener(_on_event)
    _count_read_errors()


def pytest_runtest_logstart(nodeid, location) -> None:
    _log["test"] = nodeid
    _write(nodeid, "start", "", time.time())


def pytest_runtest_logfinish(nodeid, location) -> None:
    _write(nodeid, "end", "", time.time())


def summarize(folder: Path) -> None:
    """Print each worker's busy time, each file's time split into the compile phases and the rest,
    and the functions whose XLA compiles cost most."""
    by_file = collections.defaultdict(collections.Counter)
    by_function = collections.defaultdict(collections.Counter)
    for log in sorted(folder.glob("events-*.jsonl")):
        started, busy, first, last = {}, 0.0, None, None
        for line in log.open():
            test, phase, function, value = json.loads(line)
            file = test.split("::")[0]
            if phase == "start":
                started[test], first = value, first or value
            elif phase == "end" and test in started:
                seconds, last = value - started.pop(test), value
                busy += seconds
                by_file[file]["wall"] += seconds
            else:
                by_file[file][phase] += value
                by_function[function][phase] += value
                by_function[function]["programs"] += phase == "compile"
        span = (last or 0) - (first or 0)
        print(f"{log.stem}: tests busy {busy:.0f} s, first start to last end {span:.0f} s")
    phases = ["trace", "lower", "compile", "cache read"]
    counts = collections.Counter()
    for c in by_file.values():
        counts.update({k: c[k] for k in ("cache asked", "cache hit", "cache miss", "cache read error")})
    print(
        f"\npersistent cache: {counts['cache asked']} programs asked it, {counts['cache hit']} hits, "
        f"{counts['cache miss']} misses, {counts['cache read error']} read errors"
    )
    print(f"\n{'file':34} {'tests':>7} " + " ".join(f"{p:>10}" for p in phases) + f" {'rest':>7}")
    for file, c in sorted(by_file.items(), key=lambda kv: -kv[1]["wall"]):
        rest = c["wall"] - sum(c[p] for p in phases)
        print(f"{file:34} {c['wall']:7.1f} " + " ".join(f"{c[p]:10.1f}" for p in phases) + f" {rest:7.1f}")
    print(f"\n{'function':34} {'programs':>8} " + " ".join(f"{p:>10}" for p in phases))
    for function, c in sorted(by_function.items(), key=lambda kv: -sum(kv[1][p] for p in phases))[:30]:
        name = function[:34] or "(cache reads)"
        print(f"{name:34} {c['programs']:8d} " + " ".join(f"{c[p]:10.1f}" for p in phases))


if __name__ == "__main__":
    summarize(Path(sys.argv[1] if len(sys.argv) > 1 else "suite-profile"))
