"""A lifecycle plugin for tests that puts a real fault inside a request: declaring a queue
named FAULTY_QUEUE runs into a RecursionError, as a bug deep in the broker would.

Enabled with `lavin serve --plugin tests.faulty_plugin` when the folder holding tests/ is on
PYTHONPATH; every other name passes untouched.
"""

from __future__ import annotations

from lavin.api import VHostInfo, hookimpl

FAULTY_QUEUE = "fault-recursion"


def _descend(depth: int) -> int:
    return _descend(depth + 1) + 1


@hookimpl
def lavin_definitions_changed(vhost: VHostInfo, kind: str, name: str, action: str) -> None:
    if kind == "queue" and name == FAULTY_QUEUE:
        _descend(0)
