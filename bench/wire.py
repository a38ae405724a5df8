"""A small blocking AMQP 0-9-1 client: the handshake and control methods through pamqp.

The hot paths of the load generator (publish, deliver, ack, confirm) never go through
this module's decoder: they write pre-encoded bytes and scan raw frames (`lavin.bench.scan`).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar
from urllib.parse import unquote, urlsplit

from pamqp import body as pamqp_body
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp import header as pamqp_header
from pamqp.base import Frame as Method
from pamqp.common import FieldTable

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
CONTROL_TIMEOUT = 30.0
CLOSE_TIMEOUT = 2.0
RECEIVE_SIZE = 256 * 1024

FRAME_METHOD = 1
FRAME_BODY = 3
FRAME_END = 0xCE
FRAME_OVERHEAD = 8  # 7-byte head + frame-end octet
FRAME_HEAD = struct.Struct(">BHI")
METHOD_ID = struct.Struct(">I")
ACK_FRAME = struct.Struct(">BHIIQBB")  # a whole basic.ack frame

BASIC_DELIVER = 60 << 16 | 60
BASIC_ACK = 60 << 16 | 80
BASIC_NACK = 60 << 16 | 120

ReplyT = TypeVar("ReplyT", bound=Method)


class ServerClosed(Exception):
    """The broker closed the channel or the connection; the message is its reply text."""


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    username: str
    password: str
    vhost: str

    @classmethod
    def from_uri(cls, uri: str) -> BrokerAddress:
        parts = urlsplit(uri)
        if parts.scheme != "amqp":
            raise ValueError(f"only amqp:// URIs are supported, not {uri!r}")
        path = parts.path.removeprefix("/")
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            username=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=unquote(path) if path else "/",
        )


class EncodedMessage(NamedTuple):
    data: bytes  # basic.publish, content header and body frames
    body_offset: int  # where the body's first byte sits in `data`


def encode_publish(
    channel: int, exchange: str, routing_key: str, body: bytes, persistent: bool, frame_max: int
) -> EncodedMessage:
    method = pamqp_frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
    properties = commands.Basic.Properties(delivery_mode=2 if persistent else None)
    content_header = pamqp_frame.marshal(pamqp_header.ContentHeader(0, len(body), properties), channel)
    chunk = frame_max - FRAME_OVERHEAD
    bodies = [
        pamqp_frame.marshal(pamqp_body.ContentBody(body[start : start + chunk]), channel)
        for start in range(0, len(body), chunk)
    ]
    data = b"".join([method, content_header, *bodies])
    return EncodedMessage(data, len(method) + len(content_header) + 7)


def ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    return ACK_FRAME.pack(FRAME_METHOD, channel, 13, BASIC_ACK, delivery_tag, multiple, FRAME_END)


def decode_method(payload: bytes) -> Method:
    (index,) = METHOD_ID.unpack_from(payload, 0)
    method: Method = commands.INDEX_MAPPING[index]()
    method.unmarshal(payload[4:])
    return method


def closing_reason(method: Method) -> str | None:
    """Why the broker is ending what a load loop relies on, or None for a harmless method."""
    if isinstance(method, commands.Connection.Close | commands.Channel.Close):
        return f"{method.name}: {method.reply_code} {method.reply_text}"
    if isinstance(method, commands.Basic.Cancel):
        return f"the broker cancelled consumer {method.consumer_tag}"
    return None


class AmqpSocket:
    """One AMQP connection over a plain socket.

    The control path (`call`, `expect`) blocks with a timeout; hot loops take `sock` and
    `buffer` (bytes already received but not yet parsed) and do their own reading.
    """

    def __init__(self, address: BrokerAddress, timeout: float = CONTROL_TIMEOUT) -> None:
        self.address = address
        self.sock = socket.create_connection((address.host, address.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        self.frame_max = 131072

    @classmethod
    def open(cls, address: BrokerAddress, timeout: float = CONTROL_TIMEOUT) -> AmqpSocket:
        connection = cls(address, timeout)
        try:
            for step in connection.handshake_steps():
                step()
        except BaseException:
            connection.sock.close()
            raise
        return connection

    def handshake_steps(self) -> tuple[Callable[[], None], ...]:
        """The handshake as steps that each wait for at most one reply, so that many
        connections can take each step in turn and overlap their round trips."""
        return (self._send_protocol_header, self._answer_start, self._answer_tune, self._await_open)

    def _send_protocol_header(self) -> None:
        self.sock.sendall(pamqp_header.ProtocolHeader().marshal())

    def _answer_start(self) -> None:
        self.expect(0, commands.Connection.Start)
        response = f"\0{self.address.username}\0{self.address.password}"
        client_properties: FieldTable = {
            "product": "lavin-perf",
            "capabilities": {"publisher_confirms": True, "consumer_cancel_notify": True,
                             "authentication_failure_close": True, "basic.nack": True},
        }  # fmt: skip
        self.send_method(
            0, commands.Connection.StartOk(client_properties=client_properties, mechanism="PLAIN", response=response)
        )

    def _answer_tune(self) -> None:
        tune = self.expect(0, commands.Connection.Tune)
        self.frame_max = tune.frame_max or self.frame_max
        # Heartbeats off: idle connections in the `connections` scenario must stay open.
        tune_ok = commands.Connection.TuneOk(channel_max=tune.channel_max, frame_max=self.frame_max, heartbeat=0)
        self.sock.sendall(
            pamqp_frame.marshal(tune_ok, 0)
            + pamqp_frame.marshal(commands.Connection.Open(virtual_host=self.address.vhost), 0)
        )

    def _await_open(self) -> None:
        self.expect(0, commands.Connection.OpenOk)

    def open_channel(self, channel: int) -> None:
        self.call(channel, commands.Channel.Open(), commands.Channel.OpenOk)

    def send_method(self, channel: int, method: Method) -> None:
        self.sock.sendall(pamqp_frame.marshal(method, channel))

    def call(self, channel: int, method: Method, reply_type: type[ReplyT]) -> ReplyT:
        self.send_method(channel, method)
        return self.expect(channel, reply_type)

    def expect(self, channel: int, reply_type: type[ReplyT]) -> ReplyT:
        """Read until `reply_type` arrives on `channel`, skipping anything else (confirms,
        deliveries, heartbeats); raise ServerClosed if the broker closes instead."""
        while True:
            frame_type, channel_id, payload = self.read_frame()
            if frame_type != FRAME_METHOD:
                continue
            method = decode_method(payload)
            if channel_id == channel and isinstance(method, reply_type):
                return method
            reason = closing_reason(method)
            if reason is not None:
                if isinstance(method, commands.Connection.Close):
                    self.send_method(0, commands.Connection.CloseOk())
                elif isinstance(method, commands.Channel.Close):
                    self.send_method(channel_id, commands.Channel.CloseOk())
                raise ServerClosed(reason)

    def read_frame(self) -> tuple[int, int, bytes]:
        buffer = self.buffer
        while True:
            if len(buffer) >= 7:
                frame_type, channel_id, size = FRAME_HEAD.unpack_from(buffer, 0)
                end = 7 + size
                if len(buffer) > end:
                    if buffer[end] != FRAME_END:
                        raise ConnectionError(f"bad frame end {buffer[end]:#x} from the broker")
                    payload = bytes(buffer[7:end])
                    del buffer[: end + 1]
                    return frame_type, channel_id, payload
            self.receive()

    def receive(self) -> None:
        data = self.sock.recv(RECEIVE_SIZE)
        if not data:
            raise ConnectionError("the broker closed the socket")
        self.buffer += data

    def close(self) -> None:
        close_all([self])


def close_all(connections: Sequence[AmqpSocket]) -> None:
    """Close politely where the broker answers in time, abruptly otherwise.

    Every connection.close goes out before any close-ok is awaited, so the round trips overlap.
    """
    close = pamqp_frame.marshal(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
    for connection in connections:
        try:
            connection.sock.settimeout(CLOSE_TIMEOUT)
            connection.sock.sendall(close)
        except OSError:
            pass
    for connection in connections:
        try:
            connection.expect(0, commands.Connection.CloseOk)
        except (OSError, ServerClosed):
            pass
        finally:
            connection.sock.close()
