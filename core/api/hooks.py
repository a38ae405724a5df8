"""Lifecycle hooks that plugins enabled with `lavin serve --plugin NAME` may implement.

Hooks run on the event loop; they must not block. None is called per message.
"""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("lavin")


@hookspec
def lavin_startup(broker: Any) -> None:
    """After the broker has recovered its data and its listeners accept connections."""


@hookspec
def lavin_shutdown(broker: Any) -> None:
    """When the broker begins a graceful shutdown, before connections are closed."""


@hookspec
def lavin_connection_opened(connection: Any) -> None:
    """After a client connection completed connection.open (user and vhost are known)."""


@hookspec
def lavin_connection_closed(connection: Any) -> None:
    """After a client connection is gone, whatever the reason."""


@hookspec
def lavin_definitions_changed(vhost: Any, kind: str, name: str, action: str) -> None:
    """After a queue, exchange or binding was declared or deleted.

    kind is "queue", "exchange" or "binding"; action is "declared" or "deleted".
    """
