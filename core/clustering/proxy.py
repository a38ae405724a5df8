"""A follower passes its clients' AMQP connections through to the leader, byte for byte, as
LavinMQ's followers do: a client may connect to any node (after the follower's front read
its start-ok: lavin.clustering.start_gate). Flow control passes through too
(a side that cannot write stops the other side's reading), so nothing buffers without bound."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, Protocol, cast

from lavin.amqp import codec

log = logging.getLogger(__name__)

CONNECT_TIMEOUT: Final = 5.0
# Sent by a client before the leader's side is connected: its start-ok, and what followed it.
MAX_EARLY_BYTES: Final = 128 * 1024
MAX_START_BYTES: Final = 64 * 1024  # the leader's connection.start, dropped

LeaderAmqp = Callable[[], tuple[str, int] | None]  # the leader's AMQP host and port, if one is known


class ClientSide(Protocol):
    """A client connection of the follower's front, whichever way it is served."""

    def close(self) -> None: ...


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


class _LeaderSide(_Pipe):
    """The leader's side of a proxied connection. When the follower answered the client's
    protocol header itself (`drop_start`), the leader's connection.start (the first frame it
    sends) is dropped: the client already has the follower's."""

    def __init__(self, drop_start: bool) -> None:
        super().__init__()
        self._start: bytearray | None = bytearray() if drop_start else None  # None: passing through

    def data_received(self, data: bytes) -> None:
        if self._start is None:
            super().data_received(data)
            return
        self._start += data
        end = codec.frame_end(self._start)
        if end > MAX_START_BYTES or len(self._start) > MAX_START_BYTES:
            self.close()  # not a broker's connection.start
            return
        if end == 0 or len(self._start) < end:
            return
        rest = bytes(self._start[end:])
        self._start = None
        if rest:
            super().data_received(rest)


class ProxiedClient(_Pipe):
    """A client of this follower passed through to the leader at `target`: `early` (what the
    follower's front read: the protocol header and the client's start-ok, which the follower
    `answered` with its own connection.start; or bytes it did not answer) goes to the leader
    first, then every byte either way."""

    def __init__(self, target: tuple[str, int], clients: set[ClientSide], early: bytes, *, answered: bool) -> None:
        super().__init__()
        self._target = target
        self._answered = answered
        self._clients = clients
        self._early = bytearray(early)
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._clients.add(self)
        self._task = asyncio.ensure_future(self._connect(*self._target))

    async def _connect(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await asyncio.wait_for(
                loop.create_connection(lambda: _LeaderSide(self._answered), host, port), CONNECT_TIMEOUT
            )
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
