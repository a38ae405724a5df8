"""A follower's AMQP port: the first step of each client's handshake, taken here.

The follower answers the protocol header with connection.start, as the broker would, and
reads the client's start-ok: a client that asks to read here (the client property
`read_from_follower: true`) while this node may serve reads gets a read session of this
node (lavin.clustering.read_session); any other is passed through to the leader, its
start-ok forwarded unchanged (lavin.clustering.proxy)."""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass
from typing import Final, Protocol, cast

from lavin.amqp import codec
from lavin.amqp.handshake import HANDSHAKE_TIMEOUT, connection_start
from lavin.clustering.proxy import ClientSide, LeaderAmqp, ProxiedClient
from lavin.clustering.read_horizon import ReadHorizons
from lavin.clustering.read_session import ReadSession
from lavin.config import Config
from lavin.listeners.prebound import Attachment, PreboundSockets
from pamqp import commands

log = logging.getLogger(__name__)

READ_FROM_FOLLOWER: Final = "read_from_follower"  # the client property that asks for a read session
MAX_START_OK: Final = 64 * 1024  # a start-ok frame, whole


class FollowerReads(Protocol):
    """What the node tells its read sessions."""

    read_horizons: ReadHorizons

    def reads_allowed(self) -> bool:
        """Named in etcd's ISR, its data dir whole."""


@dataclass(frozen=True)
class FollowerPort:
    """What the follower's AMQP connections need of the node."""

    config: Config
    leader: LeaderAmqp
    reads: FollowerReads
    clients: set[ClientSide]


class StartGate(asyncio.Protocol):
    """A client connection until its start-ok is read; then the protocol that serves it."""

    def __init__(self, port: FollowerPort) -> None:
        self._port = port
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._started = False  # connection.start sent
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._port.clients.add(self)
        self._timer = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT, self.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()

    def close(self) -> None:
        self._stop()
        if self._transport is not None:
            self._transport.close()

    def _stop(self) -> None:
        self._port.clients.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._buffer += data
        if not self._started:
            if len(self._buffer) < len(codec.PROTOCOL_HEADER):
                return
            if self._buffer[: len(codec.PROTOCOL_HEADER)] != codec.PROTOCOL_HEADER:
                # A PROXY protocol header, another AMQP version, TLS: the leader answers it.
                self._stop()
                self._pass_through(self._transport, bytes(self._buffer), answered=False)
                return
            start = connection_start(self._port.config.bind, tls=False)
            self._transport.write(codec.method_frame(0, start))
            self._started = True
        frames = self._buffer[len(codec.PROTOCOL_HEADER) :]
        end = codec.frame_end(frames)
        if end > MAX_START_OK or len(frames) > MAX_START_OK + len(codec.PROTOCOL_HEADER):
            self._refuse("a start-ok larger than 64 KiB")
            return
        if end == 0 or len(frames) < end:
            return
        start_ok = self._start_ok(bytes(frames[:end]))
        if start_ok is not None:
            self._hand_over(start_ok, bytes(frames[:end]), bytes(frames[end:]))

    def _start_ok(self, frame: bytes) -> commands.Connection.StartOk | None:
        kind, channel, _ = codec.FRAME_HEAD.unpack_from(frame, 0)
        if kind != codec.FRAME_METHOD or channel != 0 or frame[-1] != codec.FRAME_END_BYTE:
            self._refuse("not a method frame on channel 0")
            return None
        try:
            method = codec.decode_method(frame[7:-1])
        except (KeyError, ValueError, UnicodeDecodeError, struct.error):
            self._refuse("a malformed method frame")
            return None
        if not isinstance(method, commands.Connection.StartOk):
            self._refuse(f"'{method.name}' instead of connection.start-ok")
            return None
        return method

    def _refuse(self, why: str) -> None:
        transport = self._transport
        peer = None if transport is None else transport.get_extra_info("peername")
        log.warning("AMQP client %s sent %s during the handshake: closed", peer, why)
        self.close()

    def _hand_over(self, start_ok: commands.Connection.StartOk, frame: bytes, rest: bytes) -> None:
        """Serve the connection from now on with a read session or the pass-through."""
        transport = self._transport
        assert transport is not None
        self._stop()
        served: asyncio.Protocol
        port = self._port
        if (start_ok.client_properties or {}).get(READ_FROM_FOLLOWER) is True and port.reads.reads_allowed():
            served = ReadSession(port.config, port.leader, port.clients, start_ok, port.reads.read_horizons)
        else:
            self._pass_through(transport, codec.PROTOCOL_HEADER + frame + rest, answered=True)
            return
        transport.set_protocol(served)
        served.connection_made(transport)
        if rest:
            served.data_received(rest)

    def _pass_through(self, transport: asyncio.Transport, early: bytes, *, answered: bool) -> None:
        """Hand the connection to the leader, with what the client sent so far."""
        target = self._port.leader()
        if target is None:
            transport.close()  # no leader to pass it to: the client tries again, or another node
            return
        served = ProxiedClient(target, self._port.clients, early, answered=answered)
        transport.set_protocol(served)
        served.connection_made(transport)


class FollowerAmqp:
    """The follower's side of the node's AMQP listener."""

    def __init__(self, port: FollowerPort) -> None:
        self._port = port
        self._attachment: Attachment | None = None

    def start(self, listeners: PreboundSockets) -> None:
        self._attachment = listeners.attach("amqp", lambda: StartGate(self._port))

    def stop(self) -> None:
        """Stop serving the port, and close every connection it serves: their leader is gone
        or is this node now."""
        if self._attachment is not None:
            self._attachment.close()
            self._attachment = None
        for client in list(self._port.clients):
            client.close()
