"""A follower passes its clients' AMQP connections through to the leader, byte for byte, as
LavinMQ's followers do: a client may connect to any node. Flow control passes through too
(a side that cannot write stops the other side's reading), so nothing buffers without bound."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, cast

from lavin.listeners.prebound import Attachment, PreboundSockets

log = logging.getLogger(__name__)

CONNECT_TIMEOUT: Final = 5.0
MAX_EARLY_BYTES: Final = 64 * 1024  # sent by a client before the leader's side is connected

LeaderAmqp = Callable[[], tuple[str, int] | None]  # the leader's AMQP host and port, if one is known


class _Pipe(asyncio.Protocol):
    """One side of a proxied connection; `peer` is the other side's transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.lost = False  # closed, perhaps before its peer was known

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class ProxiedClient(_Pipe):
    """A client of this follower; its bytes go to the leader once that side is connected."""

    def __init__(self, leader: LeaderAmqp, clients: set[ProxiedClient]) -> None:
        super().__init__()
        self._leader = leader
        self._clients = clients
        self._early = bytearray()
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        target = self._leader()
        if target is None:
            self.close()  # no leader to pass it to: the client tries again, or another node
            return
        self._clients.add(self)
        self._task = asyncio.ensure_future(self._connect(*target))

    async def _connect(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await asyncio.wait_for(loop.create_connection(_Pipe, host, port), CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            log.debug("Could not reach the leader at %s:%s for a client: %s", host, port, exc)
            self.close()
            return
        if self.transport is None or self.transport.is_closing():
            upstream.close()
            return
        if upstream.lost:  # the leader's side closed before it could be told who to pass that on to
            self.close()
            return
        upstream.peer, self.peer = self, upstream
        if self._early and upstream.transport is not None:
            upstream.transport.write(bytes(self._early))
        self._early.clear()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            super().data_received(data)
            return
        self._early += data
        if len(self._early) > MAX_EARLY_BYTES:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clients.discard(self)
        if self._task is not None:
            self._task.cancel()
        super().connection_lost(exc)


class AmqpProxy:
    """The follower's side of the node's AMQP listener."""

    def __init__(self, leader: LeaderAmqp) -> None:
        self._leader = leader
        self._clients: set[ProxiedClient] = set()
        self._attachment: Attachment | None = None

    def start(self, listeners: PreboundSockets) -> None:
        self._attachment = listeners.attach("amqp", lambda: ProxiedClient(self._leader, self._clients))

    def stop(self) -> None:
        """Stop serving the port, and close every connection passed through: their leader is
        gone or is this node now."""
        if self._attachment is not None:
            self._attachment.close()
            self._attachment = None
        for client in list(self._clients):
            client.close()
