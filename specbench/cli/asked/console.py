"""How the command line ends and where it prints.

Every bad value or impossible configuration ends in one line, `error: ...`, naming the flag and
what is allowed, with exit code 2; Ctrl-C ends with exit code 130 and keeps what was written; a
reader that goes away (`specbench run | head -1`) ends the run quietly with exit code 0.
Human-readable output goes to standard output, or to standard error when an export is `-`.
"""

from __future__ import annotations

import os
import sys
import types

import click
from rich.console import Console

from specbench import environment
from specbench.errors import SpecbenchError


def given() -> set[str]:
    """The parameters the user set on the command line (not left at their defaults)."""
    ctx = click.get_current_context()
    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }


def interrupt_note() -> types.SimpleNamespace:
    """What Ctrl-C prints before exit 130, as `.message`: specbench.__main__ makes the note, hands
    it to the command line as click's context object and prints it from its signal thread; a sweep
    or a report points it at the rows it kept. SpecbenchGroup.main makes one where none is given
    (the tests' CliRunner, `python -m specbench.train`), so every command has one, and prints it on
    a KeyboardInterrupt."""
    return click.get_current_context().find_root().obj


# The flag each setting named by a SpecbenchError stands for, where it is not simply --setting.
FLAGS = {
    "n_tokens": "--n-tokens",
    "draft": "--draft/--target",
    "host_loop": "--host-loop",
    "random_init": "--random-init",
    "weights_dir": "SPECBENCH_WEIGHTS_DIR",
}


class BadInput(click.UsageError):
    """One line naming the flag and what is allowed."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"{flag}: {message}")


def bad_input(e: SpecbenchError, default_flag: str) -> BadInput:
    """A library error as bad input, blaming the flag of the setting it names (else default_flag)."""
    flag = FLAGS.get(e.setting, f"--{e.setting}") if e.setting else default_flag
    return BadInput(flag, str(e))


def usage_line(e: click.UsageError) -> str:
    """click's own usage errors in specbench's form, `FLAG: what is wrong`, like BadInput's."""
    if isinstance(e, BadInput):
        return e.format_message()
    if isinstance(e, click.MissingParameter) and e.param is not None:
        return f"{flag_of(e.param)}: required"
    if isinstance(e, click.BadParameter) and e.param is not None:
        return f"{flag_of(e.param)}: {e.message}"
    if isinstance(e, click.BadOptionUsage) and e.option_name:
        needs = "requires an argument" in e.message
        return f"{e.option_name}: " + ("needs a value" if needs else e.message.rstrip("."))
    if isinstance(e, click.NoSuchOption):
        hint = f" (did you mean {', '.join(e.possibilities)}?)" if e.possibilities else ""
        return f"{e.option_name}: no such option{hint}"
    return e.format_message()


def flag_of(param: click.Parameter) -> str:
    """'--K' for an option (its long name), 'FILE' for an argument."""
    if isinstance(param, click.Option):
        return max(param.opts, key=lambda o: (o.startswith("--"), len(o)))
    return param.human_readable_name


class PipeClosed(Exception):
    """stdout's reader went away (`specbench run | head -1`)."""


class SpecbenchGroup(click.Group):
    """click's group with specbench's exit-code policy."""

    def invoke(self, ctx):
        environment.check()  # a misspelt SPECBENCH_* choice stops every command, as a bad flag does
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click turns it into a bare exit 1
            raise PipeClosed() from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if extra.get("obj") is None:  # the note interrupt_note() gives the commands
            extra["obj"] = types.SimpleNamespace(message="interrupted")
        note = extra["obj"]
        try:
            return super().main(args, prog_name or "specbench", complete_var, standalone_mode=False, **extra)
        except PipeClosed:
            # the reader has what it wanted: end quietly, and point stdout at /dev/null so that
            # the interpreter's last flush cannot fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:  # bare `specbench`: help
                click.echo(e.ctx.get_help())
                sys.exit(0)
            click.echo(f"error: {usage_line(e)}", err=True)
            sys.exit(2)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.echo(note.message, err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"error: {e.format_message()}", err=True)
            sys.exit(2)
        except SpecbenchError as e:
            flag = FLAGS.get(e.setting, f"--{e.setting}") if e.setting else None
            click.echo(f"error: {flag}: {e}" if flag else f"error: {e}", err=True)
            sys.exit(2)


class QuietConsole(Console):
    """rich's Console, but a closed pipe is an ordinary end (exit 0), not rich's exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise PipeClosed()


def make_console(*exports) -> Console:
    """Where the human-readable output goes: stderr when an export writes to stdout."""
    to_stderr = any(e == "-" for e in exports)
    stream = sys.stderr if to_stderr else sys.stdout
    return QuietConsole(stderr=to_stderr, highlight=False, width=None if stream.isatty() else piped_width())


def piped_width() -> int:
    """The columns a pipe or file gets: $COLUMNS where set, else 140 (not rich's default 80), so the
    tables stay readable. The tests set a width no line reaches, so no phrase is cut by a long path."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else 140
