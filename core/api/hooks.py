"""Lifecycle hooks that plugins enabled with `lavin serve --plugin NAME` may implement.

Every hook is called synchronously in the broker's main thread: `lavin_configure` before
the event loop starts, the others on the event loop (asyncio's or uvloop's). None may
block: a hook that needs I/O starts a task (`asyncio.get_running_loop().create_task`) and
returns. No hook is called per message, as a call costs microseconds. Return values are
ignored. An exception from a hook propagates into the broker code that called it, so a
hook catches its own errors (`lavin_configure` is the exception: raising there refuses the
settings and stops start-up with the message).

The objects hooks receive are the broker's own; the Protocols below name the part of them
a plugin may read. Treat them as read-only: the rest may change without notice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

import pluggy
from lavin.api.auth import User

hookspec = pluggy.HookspecMarker("lavin")

DefinitionKind = Literal["queue", "exchange", "binding"]
DefinitionAction = Literal["declared", "deleted"]


class VHostInfo(Protocol):
    """A virtual host."""

    @property
    def name(self) -> str: ...


class BrokerInfo(Protocol):
    """The running broker."""

    @property
    def vhosts(self) -> Mapping[str, VHostInfo]:
        """Every virtual host, by name."""


class ConnectionInfo(Protocol):
    """One client connection. In the connection hooks `user` and `vhost` are set."""

    @property
    def peer(self) -> str:
        """The client's address, "host:port"."""

    @property
    def user(self) -> User | None:
        """Who logged in; None until authentication succeeded."""

    @property
    def vhost(self) -> VHostInfo | None:
        """The virtual host opened; None until connection.open succeeded."""

    @property
    def client_properties(self) -> Mapping[str, Any]:
        """What the client sent in connection.start-ok (product, version, capabilities...)."""


@hookspec
def lavin_configure(name: str, settings: Mapping[str, str]) -> None:
    """Once per enabled plugin, before the broker starts, with the plugin's own settings.

    `name` is the name the plugin was enabled by (`--plugin NAME`); `settings` holds the
    keys of the INI file's `[plugin.NAME]` section (lower-cased, values as text), empty
    when there is none. Only this plugin's implementation is called, never another's.
    Runs before the event loop exists, so reading a file here is fine. Raise an exception
    to refuse the settings: start-up stops with its message.
    """


@hookspec
def lavin_startup(broker: BrokerInfo) -> None:
    """After the broker has recovered its data and its listeners accept connections."""


@hookspec
def lavin_shutdown(broker: BrokerInfo) -> None:
    """When the broker begins a graceful shutdown, before connections are closed."""


@hookspec
def lavin_connection_opened(connection: ConnectionInfo) -> None:
    """After a client connection completed connection.open (user and vhost are known)."""


@hookspec
def lavin_connection_closed(connection: ConnectionInfo) -> None:
    """After an opened client connection is gone, whatever the reason."""


@hookspec
def lavin_definitions_changed(vhost: VHostInfo, kind: DefinitionKind, name: str, action: DefinitionAction) -> None:
    """After a queue, exchange or binding was declared or deleted in `vhost`.

    `name` is the queue's or exchange's name; for a binding, its source exchange's name.
    """
