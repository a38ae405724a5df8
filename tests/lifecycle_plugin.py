"""A lifecycle plugin for tests: one JSON line per hook call, in $LAVIN_TEST_EVENTS_FILE.

Enabled with `lavin serve --plugin tests.lifecycle_plugin` when the folder holding tests/ is
on PYTHONPATH. It reads only what the hook Protocols of `lavin.api` promise, so a run
against a real broker checks that the broker's objects have those attributes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from lavin.api import BrokerInfo, ConnectionInfo, VHostInfo, hookimpl


def record(event: str, **details: Any) -> None:
    # Opened per event and flushed on close, so a killed broker still leaves every line.
    with open(os.environ["LAVIN_TEST_EVENTS_FILE"], "a", encoding="utf-8") as events:
        events.write(json.dumps({"event": event, **details}) + "\n")


def connection_details(connection: ConnectionInfo) -> dict[str, Any]:
    return {
        "peer": connection.peer,
        "user": connection.user.name if connection.user is not None else None,
        "vhost": connection.vhost.name if connection.vhost is not None else None,
        "product": connection.client_properties.get("product"),
    }


@hookimpl
def lavin_configure(name: str, settings: Mapping[str, str]) -> None:
    record("configure", name=name, settings=dict(settings))


@hookimpl
def lavin_startup(broker: BrokerInfo) -> None:
    record("startup", vhosts=sorted(broker.vhosts))


@hookimpl
def lavin_shutdown(broker: BrokerInfo) -> None:
    record("shutdown")


@hookimpl
def lavin_connection_opened(connection: ConnectionInfo) -> None:
    record("connection_opened", **connection_details(connection))


@hookimpl
def lavin_connection_closed(connection: ConnectionInfo) -> None:
    record("connection_closed", **connection_details(connection))


@hookimpl
def lavin_definitions_changed(vhost: VHostInfo, kind: str, name: str, action: str) -> None:
    record("definitions_changed", vhost=vhost.name, kind=kind, name=name, action=action)
