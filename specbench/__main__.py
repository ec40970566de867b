"""`specbench` and `python -m specbench`: Ctrl-C (and SIGTERM) made safe before anything else is imported.

Ctrl-C must end the process at once with exit 130, whatever it is doing. A Python-level
handler runs only when the main thread returns from XLA, and a KeyboardInterrupt raised while
XLA compiled tore the process down with a segmentation fault. So SIGINT is blocked in the main
thread before JAX (or any library) starts a thread, every later thread inherits the mask, and
one thread waits for the signal with sigwait, says what was kept, and leaves with os._exit(130).
Every file specbench writes is replaced atomically, so exiting at any instant loses only the
unfinished row. The message is the note's that main() hands the command line (a sweep points it at
the rows it kept: specbench.cli.asked.console.interrupt_note).
"""

import os
import signal
import sys
import threading
import types


def watch_interrupts(note: types.SimpleNamespace) -> None:
    """Block SIGINT and SIGTERM in this (main) thread and end the process from a waiting thread
    instead: exit 130 for Ctrl-C, 143 for SIGTERM (128 + the signal), printing note.message."""
    if not hasattr(signal, "pthread_sigmask"):
        return
    signals = {signal.SIGINT, signal.SIGTERM}

    def wait():
        received = signal.sigwait(signals)
        try:
            sys.stderr.write(note.message + "\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + received)

    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    threading.Thread(target=wait, name="specbench-signals", daemon=True).start()


def main():
    note = types.SimpleNamespace(message="interrupted")
    watch_interrupts(note)
    from specbench.cli.main import main as cli_main

    cli_main(note)


if __name__ == "__main__":
    main()
