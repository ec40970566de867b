"""Progress for long work: a rich bar on a terminal, plain lines when piped or redirected.

On a terminal the bar is transient and drawn on stderr, so it never mixes with exports on
stdout. When stderr is not a terminal (a log file, CI, `| tee`), a plain line goes to stderr
every `interval` seconds of work instead, saying what runs, how far it is and the ETA; a
heartbeat repeats it while one long unit (a compile, a warm-up) gives no news:

    [progress] train target: step 1200/6000 (20%) · loss 4.31 · 41,000 tok/s · elapsed 2m10s · ETA 8m40s
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def fmt_duration(seconds: float) -> str:
    """3725 -> '1h02m', 130 -> '2m10s', 7.2 -> '7s'."""
    s = int(round(max(seconds, 0)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class PlainProgress:
    """The non-terminal stand-in for rich's bar: one line per `interval` seconds to `stream`."""

    def __init__(self, what: str, total: int | None, stream, interval: float, unit: str):
        self.what, self.total, self.stream, self.interval, self.unit = what, total, stream, interval, unit
        self.done, self.info = 0, ""
        self.t0 = self.last = time.monotonic()
        self.t_first = None  # when the first unit finished: the ETA leaves that one out (it compiles)
        self.printed = None
        self.lock = threading.Lock()  # the heartbeat thread writes too

    def update(
        self,
        done: int | None = None,
        *,
        advance: int = 0,
        info: str | None = None,
        what: str | None = None,
        force: bool = False,
    ) -> None:
        with self.lock:
            self.done = (self.done if done is None else done) + advance
            self.info = self.info if info is None else info
            self.what = self.what if what is None else what
            now = time.monotonic()
            if self.t_first is None and self.done >= 1:
                self.t_first = (now, self.done)
            state = (self.done, self.what, self.info)
            if state != self.printed and (force or now - self.last >= self.interval):
                self.write(now, state)

    def beat(self) -> None:
        """The line again, with its elapsed time, when nothing was printed for `interval` seconds."""
        with self.lock:
            now = time.monotonic()
            if now - self.last >= self.interval:
                self.write(now, (self.done, self.what, self.info))

    def write(self, now: float, state) -> None:
        self.last, self.printed = now, state
        self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def line(self, now: float) -> str:
        elapsed = now - self.t0
        head = f"[progress] {self.what}: {self.unit}{' ' if self.unit else ''}{self.done}"
        if self.total:
            head += f"/{self.total} ({100 * self.done / self.total:.0f}%)"
        parts = [head] + ([self.info] if self.info else []) + [f"elapsed {fmt_duration(elapsed)}"]
        if self.total and self.t_first and self.t_first[1] < self.done < self.total:
            t, done = self.t_first
            parts.append(f"ETA {fmt_duration((now - t) / (self.done - done) * (self.total - self.done))}")
        return " · ".join(parts)


class RichProgress:
    """rich's transient bar with the same update() as PlainProgress."""

    def __init__(self, bar: Progress, what: str, total: int | None):
        self.bar, self.task = bar, bar.add_task(what, total=total, info="")

    def update(
        self,
        done: int | None = None,
        *,
        advance: int = 0,
        info: str | None = None,
        what: str | None = None,
        force: bool = False,
    ) -> None:
        fields = {"advance": advance}
        if done is not None:
            fields["completed"] = done
        if info is not None:
            fields["info"] = info
        if what is not None:
            fields["description"] = what
        self.bar.update(self.task, **fields)


@contextlib.contextmanager
def progress(
    what: str,
    total: int | None = None,
    *,
    unit: str = "",
    interval: float = 5.0,
    stream=None,
    plain: bool | None = None,
):
    """Yield an object with update(done=, advance=, info=, what=) for a piece of long work.

    A rich bar when `stream` (stderr by default) is a terminal, else a plain line every
    `interval` seconds, plus one at the end.
    """
    stream = stream or sys.stderr
    if plain is None:
        plain = not stream.isatty()
    if plain:
        p = PlainProgress(what, total, stream, interval, unit)
        p.update(force=True)  # at once: the first unit may be a long compile
        stop = threading.Event()

        def heartbeat():
            while not stop.wait(interval):
                p.beat()

        if interval > 0:
            threading.Thread(target=heartbeat, name="specbench-progress", daemon=True).start()
        try:
            yield p
        finally:
            stop.set()
        p.update(force=True)
        return
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(file=stream),
        transient=True,
    )
    with bar:
        yield RichProgress(bar, what, total)
