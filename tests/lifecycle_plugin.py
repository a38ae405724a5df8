"""A lifecycle plugin for tests: one JSON line per hook call, in $LAVIN_TEST_EVENTS_FILE.

Enabled with `lavin serve --plugin tests.lifecycle_plugin` when the folder holding tests/ is
on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
from typing import Any

from lavin.api import hookimpl


def record(event: str, **details: Any) -> None:
    # Opened per event and flushed on close, so a killed broker still leaves every line.
    with open(os.environ["LAVIN_TEST_EVENTS_FILE"], "a", encoding="utf-8") as events:
        events.write(json.dumps({"event": event, **details}) + "\n")


@hookimpl
def lavin_startup(broker: Any) -> None:
    record("startup")


@hookimpl
def lavin_shutdown(broker: Any) -> None:
    record("shutdown")


@hookimpl
def lavin_connection_opened(connection: Any) -> None:
    record("connection_opened")


@hookimpl
def lavin_connection_closed(connection: Any) -> None:
    record("connection_closed")


@hookimpl
def lavin_definitions_changed(vhost: Any, kind: str, name: str, action: str) -> None:
    record(
        "definitions_changed",
        vhost=getattr(vhost, "name", None),
        kind=kind,
        name=name,
        action=action,
    )
