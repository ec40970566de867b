"""Honest timing: warm-up excluded, device sync before every clock read, repeats, context.

Rules (as in gpt-fast and hyperfine): the compile run is timed and reported on its own;
`block_until_ready` before reading the clock; tokenisation happens outside the timed region;
AR and SD run alternately so that drift (thermal, other load) hits both alike.
"""

from __future__ import annotations

import jax


class CompileCounter:
    """Counts XLA compilations inside a `with` block (jax.monitoring's backend-compile events)."""

    _active: list["CompileCounter"] = []
    _registered = False

    def __init__(self):
        self.count = 0
        self.seconds = 0.0

    @classmethod
    def _listener(cls, event: str, duration: float, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            for counter in cls._active:
                counter.count += 1
                counter.seconds += duration

    def __enter__(self):
        if not CompileCounter._registered:
            jax.monitoring.register_event_duration_secs_listener(CompileCounter._listener)
            CompileCounter._registered = True
        CompileCounter._active.append(self)
        return self

    def __exit__(self, *exc):
        CompileCounter._active.remove(self)
