"""A small blocking AMQP 0-9-1 client with just what reading a stream queue needs.

It runs inside Spark's Python workers, so it is pure Python over one socket, on one
channel. Methods go through pamqp (already a dependency of lavin); deliveries, the only
frames that arrive in bulk, are split by hand to keep the per-message cost low.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeVar
from urllib.parse import unquote, urlsplit

from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.base import Frame as Method
from pamqp.body import ContentBody
from pamqp.common import FieldTable
from pamqp.header import ContentHeader, ProtocolHeader

Properties = commands.Basic.Properties
M = TypeVar("M", bound=Method)

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_END = 0xCE
FRAME_HEAD = struct.Struct(">BHI")
FRAME_OVERHEAD = 8  # 7-byte head + frame-end octet
DELIVER_ID = b"\x00\x3c\x00\x3c"
DELIVERY_TAG = struct.Struct(">Q")
ACK_FRAME = struct.Struct(">BHIHHQBB")  # a whole basic.ack frame
BASIC_ACK_SIZE = 13
RECEIVE_SIZE = 1 << 18
FRAME_MAX = 1 << 17
CHANNEL = 1
DEFAULT_PORT = 5672
CLIENT_PROPERTIES: FieldTable = {
    "product": "pyspark_lavin",
    "capabilities": {"basic.nack": True, "consumer_cancel_notify": True},
}


class AmqpError(RuntimeError):
    """The broker refused something or the connection broke."""


class UnroutableError(AmqpError):
    """A mandatory message came back: nothing receives that routing key."""


@dataclass(frozen=True)
class ConnectionParameters:
    host: str
    port: int
    vhost: str
    username: str
    password: str


def parse_uri(uri: str) -> ConnectionParameters:
    """`amqp://user:password@host:port/vhost`, with RabbitMQ's defaults for missing parts."""
    parts = urlsplit(uri)
    if parts.scheme != "amqp":
        raise ValueError(f"only amqp:// URIs are supported, not {uri!r}")
    return ConnectionParameters(
        host=parts.hostname or "localhost",
        port=parts.port or DEFAULT_PORT,
        vhost=unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
        username=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
    )


@dataclass(slots=True)
class Delivery:
    delivery_tag: int
    exchange: str
    routing_key: str
    properties: Properties
    body: bytes


class AmqpClient:
    """One connection with one open channel; use `connect()` to get one."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._position = 0
        self._frame_max = FRAME_MAX

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def handshake(self, parameters: ConnectionParameters) -> None:
        self._sock.sendall(ProtocolHeader().marshal())
        self._expect(commands.Connection.Start)
        response = f"\0{parameters.username}\0{parameters.password}"
        self._send_method(
            commands.Connection.StartOk(
                client_properties=CLIENT_PROPERTIES, mechanism="PLAIN", response=response
            ),
            channel=0,
        )
        tune = self._expect(commands.Connection.Tune)
        self._frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        # No heartbeats: every wait on the socket has its own timeout instead.
        self._send_method(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=self._frame_max, heartbeat=0
            ),
            channel=0,
        )
        self._send_method(commands.Connection.Open(virtual_host=parameters.vhost), channel=0)
        self._expect(commands.Connection.OpenOk)
        self._send_method(commands.Channel.Open())
        self._expect(commands.Channel.OpenOk)

    def qos(self, prefetch_count: int) -> None:
        self._send_method(commands.Basic.Qos(prefetch_count=prefetch_count))
        self._expect(commands.Basic.QosOk)

    def consume(
        self, queue: str, *, arguments: FieldTable | None = None, no_ack: bool = False
    ) -> None:
        self._send_method(commands.Basic.Consume(queue=queue, no_ack=no_ack, arguments=arguments))
        self._expect(commands.Basic.ConsumeOk)

    def publish(
        self,
        routing_key: str,
        bodies: Iterable[bytes],
        properties: Properties | None = None,
        *,
        mandatory: bool = False,
    ) -> None:
        """Publish to the default exchange, many messages per socket write."""
        method = pamqp_frame.marshal(
            commands.Basic.Publish(routing_key=routing_key, mandatory=mandatory), CHANNEL
        )
        properties = properties if properties is not None else Properties()
        pending = bytearray()
        for body in bodies:
            pending += method
            pending += pamqp_frame.marshal(ContentHeader(0, len(body), properties), CHANNEL)
            for start in range(0, len(body), self._frame_max - FRAME_OVERHEAD):
                chunk = body[start : start + self._frame_max - FRAME_OVERHEAD]
                pending += pamqp_frame.marshal(ContentBody(chunk), CHANNEL)
            if len(pending) >= RECEIVE_SIZE:
                self._sock.sendall(pending)
                pending.clear()
        self._sock.sendall(pending)

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        self._sock.sendall(
            ACK_FRAME.pack(
                FRAME_METHOD, CHANNEL, BASIC_ACK_SIZE, 60, 80, delivery_tag, multiple, FRAME_END
            )
        )

    def next_delivery(self) -> Delivery:
        """Block until the next message arrives (the socket timeout bounds the wait)."""
        while True:
            frame_type, channel, payload = self._read_frame()
            if frame_type != FRAME_METHOD:
                continue  # heartbeats
            if payload[:4] == DELIVER_ID:
                return self._read_delivery(payload)
            method = self._decode_method(frame_type, channel, payload)
            if isinstance(method, commands.Basic.Return):
                returned = self._read_content(0, "", "")
                raise UnroutableError(
                    f"{method.reply_code} {method.reply_text}: nothing receives routing key"
                    f" {method.routing_key!r} (body {returned.body[:80]!r})"
                )
            if isinstance(method, commands.Basic.Cancel):
                raise AmqpError("the broker cancelled the consumer: was the queue deleted?")

    def close(self) -> None:
        """Close politely when the connection still works; always release the socket."""
        try:
            self._send_method(
                commands.Connection.Close(
                    reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0
                ),
                channel=0,
            )
            self._expect(commands.Connection.CloseOk)
        except (OSError, AmqpError):
            pass
        finally:
            self._sock.close()

    def _send_method(self, method: Method, channel: int = CHANNEL) -> None:
        self._sock.sendall(pamqp_frame.marshal(method, channel))

    def _expect(self, method_class: type[M]) -> M:
        """Wait for a synchronous reply, dropping deliveries that arrive before it."""
        while True:
            frame_type, channel, payload = self._read_frame()
            if frame_type != FRAME_METHOD:
                continue
            if payload[:4] == DELIVER_ID:
                self._read_delivery(payload)
                continue
            method = self._decode_method(frame_type, channel, payload)
            if isinstance(method, method_class):
                return method

    def _decode_method(self, frame_type: int, channel: int, payload: bytes) -> Method:
        raw = FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + bytes((FRAME_END,))
        method = pamqp_frame.unmarshal(raw)[2]
        if isinstance(method, commands.Connection.Close):
            self._send_method(commands.Connection.CloseOk(), channel=0)
            raise AmqpError(
                f"broker closed the connection: {method.reply_code} {method.reply_text}"
            )
        if isinstance(method, commands.Channel.Close):
            self._send_method(commands.Channel.CloseOk())
            raise AmqpError(f"broker closed the channel: {method.reply_code} {method.reply_text}")
        if not isinstance(method, Method):
            raise AmqpError(f"unexpected frame: {method!r}")
        return method

    def _read_delivery(self, payload: bytes) -> Delivery:
        # consumer_tag, delivery_tag, redelivered, exchange, routing_key
        position = 5 + payload[4]
        delivery_tag = DELIVERY_TAG.unpack_from(payload, position)[0]
        position += 9
        exchange_end = position + 1 + payload[position]
        exchange = payload[position + 1 : exchange_end].decode()
        routing_key = payload[exchange_end + 1 : exchange_end + 1 + payload[exchange_end]].decode()
        return self._read_content(delivery_tag, exchange, routing_key)

    def _read_content(self, delivery_tag: int, exchange: str, routing_key: str) -> Delivery:
        frame_type, _, payload = self._read_frame()
        if frame_type != FRAME_HEADER:
            raise AmqpError(f"expected a content header, got frame type {frame_type}")
        header = ContentHeader()
        header.unmarshal(payload)
        parts = []
        received = 0
        while received < header.body_size:
            frame_type, _, chunk = self._read_frame()
            if frame_type != FRAME_BODY:
                raise AmqpError(f"expected a content body, got frame type {frame_type}")
            parts.append(chunk)
            received += len(chunk)
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return Delivery(delivery_tag, exchange, routing_key, header.properties, body)

    def _read_frame(self) -> tuple[int, int, bytes]:
        while True:
            buffer, start = self._buffer, self._position
            if len(buffer) - start >= FRAME_OVERHEAD:
                frame_type, channel, size = FRAME_HEAD.unpack_from(buffer, start)
                end = start + 7 + size
                if len(buffer) > end:
                    if buffer[end] != FRAME_END:
                        raise AmqpError("malformed frame from the broker")
                    self._position = end + 1
                    return frame_type, channel, bytes(buffer[start + 7 : end])
            self._receive()

    def _receive(self) -> None:
        del self._buffer[: self._position]
        self._position = 0
        try:
            chunk = self._sock.recv(RECEIVE_SIZE)
        except TimeoutError:
            raise TimeoutError(f"the broker sent nothing for {self._sock.gettimeout()} s") from None
        if not chunk:
            raise AmqpError("the broker closed the connection")
        self._buffer += chunk


def connect(uri: str, timeout: float) -> AmqpClient:
    """Open a connection and its channel; `timeout` bounds every wait on the socket."""
    parameters = parse_uri(uri)
    sock = socket.create_connection((parameters.host, parameters.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client = AmqpClient(sock)
    try:
        client.handshake(parameters)
    except BaseException:
        sock.close()
        raise
    return client
