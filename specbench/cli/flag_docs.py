"""docs/usage.md's list of every flag, made from the commands themselves (`python -m
specbench.cli.flag_docs` rewrites it; tests/test_docs.py checks that it agrees): a table per
command, with each flag's value, default and help."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

BEGIN, END = "<!-- flags: made by python -m specbench.cli.flag_docs -->", "<!-- flags: end -->"


def commands(group: click.Group, prefix: str = "specbench") -> list[tuple[str, click.Command]]:
    """(full name, command) of every command under `group`, groups opened, by name."""
    out = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            out += commands(command, f"{prefix} {name}")
        else:
            out.append((f"{prefix} {name}", command))
    return out


def cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "\\|").strip()


def value_of(option: click.Option) -> str:
    if option.is_flag:
        return ""
    if isinstance(option.type, click.Choice):
        return "|".join(map(str, option.type.choices))
    return option.metavar or option.type.name.upper()


def default_of(option: click.Option) -> str:
    default = option.default
    if option.is_flag and option.secondary_opts:  # --save/--no-save: the one in force
        return f"`{option.opts[0] if default else option.secondary_opts[0]}`"
    unset = type(default).__name__ == "Sentinel"  # click 8.3's "no default"
    if option.is_flag or unset or default is None or default == () or default is False:
        return ""
    return ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)


def flag_tables(group: click.Group) -> str:
    """The Markdown of every command's flags."""
    parts = []
    for name, command in commands(group):
        options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
        arguments = [p.name.upper() for p in command.params if isinstance(p, click.Argument)]
        parts.append(f"### `{name}{''.join(' ' + a for a in arguments)}`\n")
        if not options:
            parts.append("No flags.\n")
            continue
        rows = ["| flag | value | default | what |", "|---|---|---|---|"]
        for o in options:
            flags = ", ".join(f"`{f}`" for f in o.opts + o.secondary_opts)
            rows.append(f"| {flags} | {cell(value_of(o))} | {cell(default_of(o))} | {cell(o.help or '')} |")
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def rewritten(text: str, group: click.Group) -> str:
    """`text` (docs/usage.md) with the part between BEGIN and END made anew."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{flag_tables(group)}\n{END}{tail}"


if __name__ == "__main__":
    from specbench.cli.main import cli

    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/usage.md")
    path.write_text(rewritten(path.read_text(), cli))
