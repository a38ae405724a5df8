"""docs/cli.md's table of `lavin ctl` commands, made from the click commands themselves, so
a new command cannot be left out of the docs."""

from __future__ import annotations

from typing import Final

import click
from lavin.ctl.group import ctl

# Options every table or JSON command takes; the page says so once, above the table.
SHARED_OPTIONS: Final = frozenset({"json", "formatter", "no_table_headers", "help"})


def _usage(name: str, command: click.Command) -> str:
    """`name [-p VHOST] [--if-empty] ARGUMENT [COLUMNS...]`: the options first, as the page writes them."""
    pieces = [name]
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in SHARED_OPTIONS:
            flag = min(param.opts, key=len)
            pieces.append(f"[{flag}]" if param.is_flag else f"[{flag} {param.name.upper() if param.name else ''}]")
    for param in command.params:
        if isinstance(param, click.Argument):
            metavar = (param.name or "").upper()
            if param.nargs == -1:
                metavar += "..."
            pieces.append(metavar if param.required else f"[{metavar}]")
    return " ".join(pieces)


def _summary(command: click.Command) -> str:
    """The help's first paragraph, on one line, with the table's pipes escaped."""
    first = (command.help or "").strip().split("\n\n")[0]
    return " ".join(first.split()).replace("|", "\\|")


def commands_table() -> str:
    rows = ["| command | what it does |", "|---|---|"]
    for name in sorted(ctl.commands):
        command = ctl.commands[name]
        rows.append(f"| `{_usage(name, command)}` | {_summary(command)} |")
    return "\n".join(rows)
