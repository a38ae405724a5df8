"""The docs' tables that are made from the code: every setting (docs/configuration.md, from
`lavin.config.settings`) and every queue argument (docs/queue-semantics.md, from
`lavin.broker.policy.queue_arguments`) and every `lavin ctl` command (docs/cli.md, from
the click commands of `lavin.ctl`). Each sits between two markers in its page.

`python -m lavin.reference [REPOSITORY]` redraws every table in the repository's docs/ (the
current directory by default); tests/test_generated_docs.py fails while a page and the code
that makes its table disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from lavin.broker.policy.queue_arguments import markdown_table
from lavin.config.reference import settings_table
from lavin.ctl.reference import commands_table

COMMAND: Final = "python -m lavin.reference"


@dataclass(frozen=True)
class GeneratedTable:
    name: str  # the markers' name
    page: str  # the page that shows it, relative to the repository
    render: Callable[[], str]

    @property
    def begin(self) -> str:
        return f"<!-- {self.name}:begin (made by `{COMMAND}`) -->"

    @property
    def end(self) -> str:
        return f"<!-- {self.name}:end -->"

    def redrawn(self, document: str) -> str:
        """`document` with this table between its markers rendered afresh."""
        before, begin, rest = document.partition(self.begin)
        _, end, after = rest.partition(self.end)
        if not begin or not end:
            raise ValueError(f"{self.page} lacks the {self.name} table's markers:\n{self.begin}\n{self.end}")
        return f"{before}{self.begin}\n{self.render()}\n{self.end}{after}"


TABLES: Final = (
    GeneratedTable("settings", "docs/configuration.md", settings_table),
    GeneratedTable("queue-arguments", "docs/queue-semantics.md", markdown_table),
    GeneratedTable("ctl-commands", "docs/cli.md", commands_table),
)


def redraw(repository: Path) -> None:
    for table in TABLES:
        page = repository / table.page
        page.write_text(table.redrawn(page.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    redraw(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
