"""Listeners opened once for the life of the process: a cluster node keeps its AMQP, HTTP
and replication ports while it turns from follower to leader and back. Each port has one
server, made once; a role attaches the protocol its connections get, and while no role is
attached a connection is closed at once (the client tries again).

One server per port, not one per role on duplicates of a socket: an event loop's poller
keeps watching a closed duplicate's registration for as long as the socket lives, and mixes
its events up with whatever file gets that descriptor number next."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Final, TypeAlias

BACKLOG: Final = 512

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class _Refused(asyncio.Protocol):
    """A connection that came while no role serves the port."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class Attachment(asyncio.AbstractServer):
    """A role's hold on a port, served as the listeners serve an `asyncio.Server` of their
    own (`sockets`, `close`, `wait_closed`)."""

    def __init__(self, listeners: PreboundSockets, name: str, server: asyncio.Server) -> None:
        self._listeners = listeners
        self._name = name
        self._loop = server.get_loop()
        self.sockets: tuple[socket.socket, ...] = server.sockets

    def close(self) -> None:
        self._listeners.detach(self._name, self)

    async def wait_closed(self) -> None:
        """Nothing to wait for: the server stays, and the role closes its own connections."""

    def is_serving(self) -> bool:
        return self._listeners.attached(self._name) is self

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def start_serving(self) -> None:
        """Serving from the moment it is attached."""

    async def serve_forever(self) -> None:
        raise NotImplementedError("a node's port is served by the node's own server")


# What a listener holds of a port it serves: a server of its own, or a cluster node's port.
ServingPort: TypeAlias = "asyncio.Server | Attachment"


class PreboundSockets:
    def __init__(self) -> None:
        self._servers: dict[str, asyncio.Server] = {}
        self._factories: dict[str, ProtocolFactory] = {}
        self._attached: dict[str, Attachment] = {}

    async def bind(self, name: str, host: str, port: int) -> int:
        """Listen on host:port (0: any free port) under `name`; the port bound."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: self._factories.get(name, _Refused)(), host, port, backlog=BACKLOG, reuse_address=True
        )
        self._servers[name] = server
        return int(server.sockets[0].getsockname()[1])

    def attach(self, name: str, factory: ProtocolFactory) -> Attachment | None:
        """From now on connections to `name` get `factory()`; None when nothing is bound so."""
        server = self._servers.get(name)
        if server is None:
            return None
        self._factories[name] = factory
        attachment = self._attached[name] = Attachment(self, name, server)
        return attachment

    def detach(self, name: str, attachment: Attachment) -> None:
        if self._attached.get(name) is attachment:
            del self._attached[name]
            self._factories.pop(name, None)

    def attached(self, name: str) -> Attachment | None:
        return self._attached.get(name)

    def port(self, name: str) -> int | None:
        server = self._servers.get(name)
        return None if server is None else int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        for server in self._servers.values():
            server.close()
        for server in self._servers.values():
            await server.wait_closed()
        self._servers.clear()
        self._factories.clear()
        self._attached.clear()
