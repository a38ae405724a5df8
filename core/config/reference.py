"""The table of every setting in docs/configuration.md, rendered from the declarations in
lavin.config.settings (`python -m lavin.reference` redraws it there)."""

from __future__ import annotations

from typing import Any, Final

from lavin.config.declaration import Setting
from lavin.config.settings import CONFIG_FILE, READY_FILE, SETTINGS

HEADER: Final = ("| section | key | flag | env var | default | meaning |", "|---|---|---|---|---|---|")
NOT_SET_THERE: Final = "—"  # the cell of a column the setting has no entry in
# Rows without a config-file key first, then each section's in declaration order.
SECTION_ORDER: Final = (None, "main", "amqp", "mgmt", "clustering")


def settings_table() -> str:
    """The table's lines, header included: `--config` and `--ready-file` first, then every setting."""
    declared = [CONFIG_FILE, READY_FILE, *SETTINGS.values()]
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
