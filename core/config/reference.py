"""The table of every setting in docs/configuration.md, rendered from the declarations in
lavin.config.settings.

`python -m lavin.config.reference docs/configuration.md` redraws the table between its
markers; tests/test_config_keys.py fails while the file and the declarations disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

from lavin.config.declaration import Setting
from lavin.config.settings import CONFIG_FILE, SETTINGS

BEGIN: Final = "<!-- settings:begin (made by `python -m lavin.config.reference docs/configuration.md`) -->"
END: Final = "<!-- settings:end -->"
HEADER: Final = ("| section | key | flag | env var | default | meaning |", "|---|---|---|---|---|---|")
NOT_SET_THERE: Final = "—"  # the cell of a column the setting has no entry in
# Rows without a config-file key first, then each section's in declaration order.
SECTION_ORDER: Final = (None, "main", "amqp", "mgmt")


def settings_table() -> str:
    """The table's lines, header included: `--config` first, then every setting."""
    declared = [CONFIG_FILE, *SETTINGS.values()]
    declared.sort(key=lambda each: SECTION_ORDER.index(each.ini.section if each.ini else None))
    return "\n".join([*HEADER, *map(table_row, declared)])


def table_row(declared: Setting) -> str:
    ini, flag = declared.ini, declared.flag
    cells = (
        f"`[{ini.section}]`" if ini else NOT_SET_THERE,
        f"`{ini.key}`" if ini else NOT_SET_THERE,
        f"`{flag.name} {flag.placeholder}`" if flag else NOT_SET_THERE,
        f"`{flag.env_var}`" if flag else NOT_SET_THERE,
        declared.shown_default or shown(declared.default),
        declared.meaning,
    )
    return f"| {' | '.join(cells)} |"


def shown(default: Any) -> str:
    """A default as the table writes it: `none` for an unset path or an empty list."""
    if default is None or default == ():
        return "none"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, tuple):
        return f"`{', '.join(default)}`"
    return f"`{default}`"


def with_settings_table(document: str) -> str:
    """`document` with the table between its markers rendered afresh."""
    before, begin, rest = document.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the document lacks the settings table's markers:\n{BEGIN}\n{END}")
    return f"{before}{BEGIN}\n{settings_table()}\n{END}{after}"


def main(arguments: list[str]) -> None:
    if len(arguments) != 1:
        sys.exit("usage: python -m lavin.config.reference docs/configuration.md")
    path = Path(arguments[0])
    path.write_text(with_settings_table(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
