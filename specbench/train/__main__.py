"""`python -m specbench.train`: Ctrl-C and SIGTERM made safe before anything else is imported, as
specbench's own entry does (specbench/__main__.py), then the training commands (commands.py):
either signal prints what the run keeps (its checkpoint) and exits 130 or 143."""

import types

from specbench.__main__ import watch_interrupts


def main():
    note = types.SimpleNamespace(message="interrupted")
    watch_interrupts(note)
    from specbench.train import mtp_command, pard_command  # noqa: F401  (register `mtp`, `pard`)
    from specbench.train.commands import main as commands

    commands(prog_name="python -m specbench.train", obj=note)


if __name__ == "__main__":
    main()
