"""A process of a run over several (`run --coordinator --processes --process-id`), watched from
outside: this process starts the real one as its child and ends, whatever happens to the run, in
one line naming the process.

XLA's coordination client does not fail as Python does. A coordinator that never comes, a
partner that is killed or interrupted, or a heartbeat that stops all end in SIGABRT with a C++
stack trace, some of them only after a 60-100 s timeout; and gloo prints `[Gloo] Rank N is
connected ...` on standard output, where the table and `--export-json -` go. So the child's
standard output is passed on without gloo's lines, its standard error line by line until the
first line of a failure (a traceback, a C++ log line), after which it is kept back; the child
says when it has joined, and one that has not joined within --join-timeout, or that has lost a
partner, is stopped at once. A child that fails ends here in one line, exit 1.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbench.cli.asked.settings import Processes

CHILD = "SPECBENCH_PROCESS_CHILD"  # set in the child: it joins the run itself
JOINED = "specbench: joined the run"  # the child's line on standard error once jax.distributed is up
GRACE_S = 2.0  # after a partner is lost: the child's own line, if any, has this long to come


# the first line of a failure: a Python traceback, or an error or fatal line of XLA's C++ log
FAILURE = re.compile(
    r"^(Traceback \(most recent call last\)|[EF]\d{4} |\*\*\* |Fatal Python error|terminate )"
)
LOST = (  # what a child's standard error says when another process of the run has gone
    "Connection closed by peer",
    "Connection reset by peer",
    "heartbeat",
    "Broken pipe",
    "has disconnected",
    "CANCELLED",
    "another task died",
    "Socket closed",
)


def in_child() -> bool:
    return os.environ.get(CHILD) == "1"


def watch_parent() -> None:
    """In the child: end (exit 143) once the watching process has gone, so that no child outlives it."""
    parent = os.getppid()

    def wait():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(143)

    threading.Thread(target=wait, name="specbench-parent", daemon=True).start()


def supervise(p: Processes) -> int:
    """Run this command again as a child joined to the run, pass its output on, and return the exit
    code to end with; a failure of the child ends in one `error:` line naming the process."""
    who = f"process {p.index} of {p.count}"
    waits_for = "process 0 (the coordinator)" if p.index else "the other processes"
    child = subprocess.Popen(
        [sys.executable, "-m", "specbench", *sys.argv[1:]],
        env=dict(os.environ, **{CHILD: "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    state = {"joined": False, "failed": False, "lost": None, "kept": []}
    out = threading.Thread(target=pass_stdout, args=(child.stdout,), daemon=True)
    err = threading.Thread(target=pass_stderr, args=(child.stderr, state), daemon=True)
    out.start(), err.start()
    started, reason = time.monotonic(), None
    while child.poll() is None:
        time.sleep(0.1)
        if not state["joined"] and time.monotonic() - started > p.join_timeout:
            reason = (
                f"waited {p.join_timeout:g} s (--join-timeout) at {p.coordinator} for {waits_for}, "
                "which did not come"
            )
        elif state["lost"] is not None and time.monotonic() - state["lost"] > GRACE_S:
            reason = "another process of the run has gone (its connection closed): this one stopped too"
        if reason:
            child.kill()
            break
    child.wait()
    out.join(timeout=5), err.join(timeout=5)
    code = child.returncode
    if reason is None and (code in (0, 2, 130, 143) or code > 0 and not state["failed"]):
        sys.stderr.write("".join(state["kept"]))  # error lines of a run that ended as it should
        return code
    reason = reason or reason_of(state["kept"], code)
    sys.stderr.write(f"error: --processes: {who}: {reason}\n")
    return 1


def reason_of(kept: list[str], code: int) -> str:
    text = "".join(kept)
    if "Failed to start RPC server" in text or "Address already in use" in text:
        return "the coordinator's port is in use on this host: choose a free one"
    if any(word in text for word in LOST):
        return "another process of the run has gone (its connection closed): this one stopped too"
    if "DEADLINE_EXCEEDED" in text:
        return "the run's processes did not all answer in time"
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    said = [line.strip() for line in kept if line.strip() and not line.startswith((" ", "@", "Traceback"))]
    return f"it ended by {how}" + (f" ({said[0][:160]})" if said else "")


def pass_stdout(stream) -> None:
    for line in iter(stream.readline, b""):
        if not line.startswith(b"[Gloo]"):
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()


def pass_stderr(stream, state: dict) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        if line.strip() == JOINED:
            state["joined"] = True
            continue
        if line.startswith("[Gloo]"):
            continue
        if not state["failed"] and FAILURE.match(line):
            state["failed"] = True
        if state["failed"]:
            state["kept"].append(line)
            if state["lost"] is None and any(word in line for word in LOST):
                state["lost"] = time.monotonic()
        else:
            sys.stderr.write(line)
            sys.stderr.flush()
