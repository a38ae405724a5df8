"""The check both kits make of how a type is registered."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest


def check_registered(group: str, plugin: type) -> None:
    """`plugin.name` is the name of its entry point in `group`, the name clients select it by.

    Skips when no distribution declares that entry point: the tests run from a source tree
    without the package installed.
    """
    name = getattr(plugin, "name", None)
    assert isinstance(name, str) and name, f"{plugin.__qualname__}.name must be a non-empty string"
    found = entry_points(group=group, name=name)
    if not found:
        pytest.skip(f"no entry point {name!r} in group {group}: the package is not installed")
    assert [entry_point.load() for entry_point in found] == [plugin], f"entry points named {name!r}: {list(found)}"
