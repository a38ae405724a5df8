"""A small blocking AMQP 0-9-1 client over one socket: plain TCP, TLS, or a WebSocket.

It serves the places that talk AMQP without a client library: the Spark connector's
executors (consume a stream queue), `lavin-perf` (pre-encoded publishes, frames scanned
in place) and the protocol tests (bytes that well-behaved clients never send). Methods
and tables go through pamqp; deliveries, acks and frame splitting, which come in bulk,
are done by hand.

A client, not part of the broker: it needs only the standard library and pamqp
(`lavin.client.websocket`, its WebSocket transport, is standard library too).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import NamedTuple, NoReturn, Protocol, Self, TypeVar
from urllib.parse import unquote, urlsplit

from lavin.client.websocket import WebSocket
from pamqp import commands, encode
from pamqp import frame as pamqp_frame
from pamqp.base import Frame as Method
from pamqp.common import FieldTable
from pamqp.header import ContentHeader, ProtocolHeader

Properties = commands.Basic.Properties
AnyFrame = pamqp_frame.FrameTypes
M = TypeVar("M", bound=Method)

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
FRAME_OVERHEAD = 8  # 7-byte head + frame-end octet
METHOD_ID = struct.Struct(">I")  # class id << 16 | method id: the payload's first field
DELIVERY_TAG = struct.Struct(">Q")
ACK_FRAME = struct.Struct(">BHIIQBB")  # a whole basic.ack frame
BASIC_DELIVER = commands.Basic.Deliver.index
BASIC_ACK = commands.Basic.Ack.index
BASIC_NACK = commands.Basic.Nack.index
# Traffic that may arrive ahead of any reply; waiting for a reply skips it.
ASYNCHRONOUS = frozenset((BASIC_DELIVER, BASIC_ACK, BASIC_NACK))
CLOSING = (commands.Connection.Close, commands.Channel.Close, commands.Basic.Cancel)

PROTOCOL_HEADER = ProtocolHeader().marshal()  # b"AMQP\x00\x00\x09\x01"
AMQPS_PORT = 5671
FRAME_MAX = 131072  # used when the broker sets no limit
RECEIVE_SIZE = 256 * 1024
DEFAULT_TIMEOUT = 30.0
CLOSE_TIMEOUT = 2.0
CHANNEL = 1  # the channel `connect` opens and the message methods use
# What pika and the RabbitMQ Java client announce; with authentication_failure_close a
# failed login gets a connection.close instead of a dropped socket.
CAPABILITIES: Mapping[str, bool] = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
}


class AmqpError(RuntimeError):
    """The broker refused something, closed the connection or broke the protocol."""


class UnroutableError(AmqpError):
    """A mandatory message came back: nothing receives that routing key."""


@dataclass(frozen=True)
class Address:
    host: str = "localhost"
    port: int = 5672
    username: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    tls: ssl.SSLContext | None = field(default=None, compare=False)  # TLS, checking the broker as it says
    websocket_path: str | None = None  # AMQP over a WebSocket to this HTTP path (subprotocol "amqp")

    @classmethod
    def from_uri(cls, uri: str) -> Address:
        """`amqp://user:password@host:port/vhost`, with RabbitMQ's defaults for missing parts;
        `amqps://` for TLS (port 5671), checking the broker's certificate against the system's CAs."""
        parts = urlsplit(uri)
        if parts.scheme not in ("amqp", "amqps"):
            raise ValueError(f"only amqp:// and amqps:// URIs are supported, not {uri!r}")
        tls = parts.scheme == "amqps"
        vhost = parts.path.removeprefix("/")
        return cls(
            host=parts.hostname or cls.host,
            port=parts.port or (AMQPS_PORT if tls else cls.port),
            username=unquote(parts.username or cls.username),
            password=unquote(parts.password or cls.password),
            vhost=unquote(vhost) if vhost else cls.vhost,
            tls=ssl.create_default_context() if tls else None,
        )


class Stream(Protocol):
    """What AMQP bytes go through: a socket (plain or TLS) or a `WebSocket`."""

    def sendall(self, data: bytes | bytearray, /) -> None: ...

    def recv(self, size: int, /) -> bytes: ...

    def settimeout(self, timeout: float | None, /) -> None: ...

    def gettimeout(self) -> float | None: ...

    def close(self) -> None: ...


def open_socket(address: Address, timeout: float) -> socket.socket:
    """A TCP connection to the broker, through the TLS handshake when the address asks for TLS."""
    sock = socket.create_connection((address.host, address.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if address.tls is None:
        return sock
    try:
        return address.tls.wrap_socket(sock, server_hostname=address.host)
    except BaseException:
        sock.close()
        raise


# ------------------------------------------------------------------------------------
# Frames as bytes, including broken ones


def raw_frame(frame_type: int, channel: int, payload: bytes, frame_end: int = FRAME_END) -> bytes:
    """One frame with any type, payload and end octet, valid or not."""
    return FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + bytes((frame_end,))


def method_frame(channel: int, method: Method) -> bytes:
    return pamqp_frame.marshal(method, channel)


def content_header_frame(channel: int, body_size: int, properties: Properties | None = None) -> bytes:
    return pamqp_frame.marshal(ContentHeader(0, body_size, properties), channel)


def content_body_frame(channel: int, data: bytes) -> bytes:
    return raw_frame(FRAME_BODY, channel, data)


def heartbeat_frame(channel: int = 0) -> bytes:
    return raw_frame(FRAME_HEARTBEAT, channel, b"")


def ack_frame(channel: int, delivery_tag: int, multiple: bool = False) -> bytes:
    return ACK_FRAME.pack(FRAME_METHOD, channel, 13, BASIC_ACK, delivery_tag, multiple, FRAME_END)


def content_frames(channel: int, body: bytes, properties: Properties | None, frame_max: int) -> list[bytes]:
    """The content header frame, then the body cut into frames that fit `frame_max`."""
    step = frame_max - FRAME_OVERHEAD
    bodies = [content_body_frame(channel, body[start : start + step]) for start in range(0, len(body), step)]
    return [content_header_frame(channel, len(body), properties), *bodies]


class EncodedMessage(NamedTuple):
    data: bytes  # basic.publish, content header and body frames
    body_offset: int  # where the body's first byte sits in `data`


def encode_publish(
    channel: int,
    exchange: str,
    routing_key: str,
    body: bytes,
    properties: Properties | None = None,
    frame_max: int = FRAME_MAX,
) -> EncodedMessage:
    """A whole publish, encoded once so that a load generator can write it again and again."""
    method = method_frame(channel, commands.Basic.Publish(exchange=exchange, routing_key=routing_key))
    header, *bodies = content_frames(channel, body, properties, frame_max)
    return EncodedMessage(b"".join((method, header, *bodies)), len(method) + len(header) + 7)


# ------------------------------------------------------------------------------------
# Frames from bytes


def decode_method(payload: bytes) -> Method:
    """A method frame's payload (method id, arguments) as a pamqp object."""
    index = METHOD_ID.unpack_from(payload)[0]
    method_class = commands.INDEX_MAPPING.get(index)
    if method_class is None:
        raise AmqpError(f"unknown method {index >> 16}.{index & 0xFFFF} from the broker")
    method: Method = method_class()
    method.unmarshal(payload[4:])
    return method


def describe(value: AnyFrame) -> str:
    """A readable one-liner for error messages."""
    if isinstance(value, commands.Connection.Close | commands.Channel.Close):
        about = f"method {value.class_id}.{value.method_id}"
        return f"{value.name} {value.reply_code} {value.reply_text!r} (about {about})"
    if isinstance(value, commands.Basic.Cancel):
        return f"{value.name} of consumer {value.consumer_tag!r}"
    return getattr(value, "name", type(value).__name__)


def raise_if_closing(method: Method) -> None:
    """Raise AmqpError when `method` ends what the caller relies on: a close or a cancel."""
    if isinstance(method, CLOSING):
        raise AmqpError(f"the broker sent {describe(method)}")


class Received(NamedTuple):
    channel: int
    frame: AnyFrame


@dataclass(slots=True)
class Delivery:
    delivery_tag: int
    exchange: str
    routing_key: str
    properties: Properties
    body: bytes


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


# ------------------------------------------------------------------------------------
# A connection


class Connection:
    """One AMQP connection over a blocking socket; `connect` opens it fully.

    The socket's timeout bounds every wait unless a call gives its own. Hot loops may take
    `stream` and `buffer` (bytes received but not parsed yet) and read frames themselves.
    """

    def __init__(self, address: Address | str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = Address.from_uri(address) if isinstance(address, str) else address
        self.sock = open_socket(self.address, timeout)  # TCP, or TLS over it
        self.websocket: WebSocket | None = None
        if self.address.websocket_path is not None:
            try:
                self.websocket = WebSocket(self.sock, self.address.host, self.address.port, self.address.websocket_path)
            except BaseException:
                self.sock.close()
                raise
        self.buffer = bytearray()
        self.frame_max = FRAME_MAX

    @property
    def stream(self) -> Stream:
        """What the AMQP bytes go through: the WebSocket if there is one, else the socket."""
        return self.websocket if self.websocket is not None else self.sock

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # -- handshake ----------------------------------------------------------------

    def handshake_steps(
        self,
        *,
        mechanism: str = "PLAIN",
        frame_max: int | None = None,
        channel_max: int | None = None,
        heartbeat: int = 0,
        client_properties: FieldTable | None = None,
    ) -> tuple[Callable[[], object], ...]:
        """The handshake as steps that each wait for at most one reply before they send, so
        that many connections can take each step in turn and overlap their round trips."""
        return (
            lambda: self.send_raw(PROTOCOL_HEADER),
            lambda: self.start_ok(mechanism, client_properties=client_properties),
            lambda: self.tune_ok(frame_max, channel_max, heartbeat, vhost=self.address.vhost),
            lambda: self.expect(commands.Connection.OpenOk),
        )

    def start_ok(
        self,
        mechanism: str = "PLAIN",
        capabilities: Mapping[str, bool] = CAPABILITIES,
        *,
        client_properties: FieldTable | None = None,
    ) -> commands.Connection.Start:
        """Wait for connection.start and log in with the address's credentials."""
        start = self.expect(commands.Connection.Start)
        username, password = self.address.username, self.address.password
        if mechanism == "AMQPLAIN":  # a field table without its length prefix
            response = encode.field_table({"LOGIN": username, "PASSWORD": password})[4:].decode("latin-1")
        else:
            response = f"\0{username}\0{password}"
        properties: FieldTable = {
            **(client_properties or {}),
            "product": "lavin.client.wire",
            "capabilities": dict(capabilities),
        }
        self.send(commands.Connection.StartOk(client_properties=properties, mechanism=mechanism, response=response))
        return start

    def tune_ok(
        self,
        frame_max: int | None = None,
        channel_max: int | None = None,
        heartbeat: int = 0,
        *,
        vhost: str | None = None,
    ) -> commands.Connection.Tune:
        """Wait for connection.tune, accept the broker's limits unless told otherwise, and
        open `vhost` if given, in the same write (one segment, as client libraries send).

        Heartbeats are off by default: every wait has a timeout instead, and idle
        connections (lavin-perf's `connections` scenario) must stay open.
        """
        tune = self.expect(commands.Connection.Tune)
        self.frame_max = frame_max or tune.frame_max or FRAME_MAX
        if self.websocket is not None:  # the broker takes a WebSocket message of one frame
            self.websocket.max_send = self.frame_max
        channel_max = tune.channel_max if channel_max is None else channel_max
        data = method_frame(0, commands.Connection.TuneOk(channel_max, self.frame_max, heartbeat))
        if vhost is not None:
            data += method_frame(0, commands.Connection.Open(virtual_host=vhost))
        self.stream.sendall(data)
        return tune

    def open_channel(self, channel: int) -> None:
        self.call(commands.Channel.Open(), commands.Channel.OpenOk, channel)

    # -- sending --------------------------------------------------------------------

    def send_raw(self, data: bytes | bytearray) -> None:
        self.stream.sendall(data)

    def send(self, method: Method, channel: int = 0) -> None:
        self.stream.sendall(method_frame(channel, method))

    def call(self, method: Method, reply: type[M], channel: int = 0) -> M:
        self.send(method, channel)
        return self.expect(reply, channel)

    def qos(self, prefetch_count: int, channel: int = CHANNEL) -> None:
        self.call(commands.Basic.Qos(prefetch_count=prefetch_count), commands.Basic.QosOk, channel)

    def consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        arguments: FieldTable | None = None,
        consumer_tag: str = "",
        channel: int = CHANNEL,
    ) -> None:
        consume = commands.Basic.Consume(queue=queue, consumer_tag=consumer_tag, no_ack=no_ack, arguments=arguments)
        self.call(consume, commands.Basic.ConsumeOk, channel)

    def publish(
        self,
        routing_key: str,
        bodies: Iterable[bytes],
        properties: Properties | None = None,
        *,
        exchange: str = "",
        mandatory: bool = False,
        channel: int = CHANNEL,
    ) -> None:
        """Publish each of `bodies`, many messages per socket write."""
        publish = commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory)
        method = method_frame(channel, publish)
        pending = bytearray()
        for body in bodies:
            pending += method
            for frame in content_frames(channel, body, properties, self.frame_max):
                pending += frame
            if len(pending) >= RECEIVE_SIZE:
                self.stream.sendall(pending)
                pending.clear()
        self.stream.sendall(pending)

    def ack(self, delivery_tag: int, *, multiple: bool = False, channel: int = CHANNEL) -> None:
        self.stream.sendall(ack_frame(channel, delivery_tag, multiple))

    # -- receiving ------------------------------------------------------------------

    def expect(self, kind: type[M], channel: int = 0, timeout: float | None = None) -> M:
        """Wait for a `kind` on `channel`. Heartbeats, deliveries and confirms before it are
        skipped; any other method is an error (a close is answered first)."""
        channel_id, payload = self._next_method(_deadline(timeout), kind)
        method = decode_method(payload)
        if not isinstance(method, kind) or channel_id != channel:
            self._refuse(channel_id, method, f"{kind.name} on channel {channel}")
        return method

    def next_delivery(self) -> Delivery:
        """Wait for the next message; a mandatory message that comes back raises UnroutableError."""
        channel, payload = self._next_method(None, commands.Basic.Deliver)
        method_id = METHOD_ID.unpack_from(payload)[0]
        if method_id == BASIC_DELIVER:
            # After the method id: consumer tag, delivery tag, redelivered, exchange, routing key.
            position = 5 + payload[4]
            delivery_tag = DELIVERY_TAG.unpack_from(payload, position)[0]
            position += 9
            exchange_end = position + 1 + payload[position]
            exchange = payload[position + 1 : exchange_end].decode()
            routing_key = payload[exchange_end + 1 : exchange_end + 1 + payload[exchange_end]].decode()
            return self._read_content(delivery_tag, exchange, routing_key)
        method = decode_method(payload)
        if isinstance(method, commands.Basic.Return):
            returned = self._read_content(0, "", "")
            raise UnroutableError(
                f"{method.reply_code} {method.reply_text}: nothing receives routing key"
                f" {method.routing_key!r} (body {returned.body[:80]!r})"
            )
        self._refuse(channel, method, "Basic.Deliver")

    def recv_frame(self, timeout: float | None = None) -> Received | None:
        """The next frame of any kind, decoded; None once the broker closed the socket."""
        return self._next_frame(_deadline(timeout))

    def expect_connection_close(self, timeout: float | None = None) -> commands.Connection.Close:
        """Wait for the broker's connection.close, skipping anything before it; answer it."""
        deadline = _deadline(timeout)
        skipped: list[str] = []  # heartbeats, replies to pipelined methods, ...
        try:
            while (received := self._next_frame(deadline)) is not None:
                if isinstance(received.frame, commands.Connection.Close):
                    self._answer_close()
                    return received.frame
                skipped.append(f"{describe(received.frame)} on channel {received.channel}")
        except TimeoutError as error:
            raise TimeoutError(f"{error}; no connection.close after {skipped}") from None
        raise AmqpError(f"the broker closed the socket without connection.close after {skipped}")

    def frames_until_eof(self, timeout: float | None = None) -> list[Received]:
        """Every frame until the broker closes the socket; a connection.close is answered."""
        deadline = _deadline(timeout)
        frames: list[Received] = []
        while (received := self._next_frame(deadline)) is not None:
            frames.append(received)
            if isinstance(received.frame, commands.Connection.Close):
                self._answer_close()
        return frames

    def read_until_eof(self, timeout: float | None = None) -> bytes:
        """Every byte the broker sends until it closes the socket, frames or not."""
        deadline = _deadline(timeout)
        while self._receive(deadline):
            pass
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def close(self) -> None:
        """Close politely when the broker answers in time; always release the socket."""
        close_all([self])

    def _next_method(self, deadline: float | None, wanted: type[Method]) -> tuple[int, bytes]:
        """The channel and payload of the next method frame other than asynchronous traffic
        (unless that is what is `wanted`)."""
        while True:
            frame = self._read_frame(deadline)
            if frame is None:
                raise AmqpError(f"the broker closed the connection while {wanted.name} was due")
            frame_type, channel, payload = frame
            if frame_type == FRAME_METHOD:
                method_id = METHOD_ID.unpack_from(payload)[0]
                if method_id not in ASYNCHRONOUS or method_id == wanted.index:
                    return channel, payload

    def _refuse(self, channel: int, method: Method, expected: str) -> NoReturn:
        if isinstance(method, commands.Connection.Close):
            self._answer_close()
        elif isinstance(method, commands.Channel.Close):
            self.send(commands.Channel.CloseOk(), channel)
        raise_if_closing(method)
        raise AmqpError(f"expected {expected}, got {describe(method)} on channel {channel}")

    def _answer_close(self) -> None:
        with contextlib.suppress(OSError):  # the broker may already have closed its end
            self.send(commands.Connection.CloseOk())

    def _read_content(self, delivery_tag: int, exchange: str, routing_key: str) -> Delivery:
        header = ContentHeader()
        header.unmarshal(self._content_frame(FRAME_HEADER))
        parts = []
        received = 0
        while received < header.body_size:
            parts.append(self._content_frame(FRAME_BODY))
            received += len(parts[-1])
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return Delivery(delivery_tag, exchange, routing_key, header.properties, body)

    def _content_frame(self, frame_type: int) -> bytes:
        frame = self._read_frame(None)
        if frame is None or frame[0] != frame_type:
            raise AmqpError(f"expected a frame of type {frame_type}, got {frame and frame[0]}")
        return frame[2]

    def _next_frame(self, deadline: float | None) -> Received | None:
        frame = self._read_frame(deadline)
        if frame is None:
            return None
        frame_type, channel, payload = frame
        # pamqp decodes whole frames only; this path is for tests, not for bulk traffic.
        return Received(channel, pamqp_frame.unmarshal(raw_frame(frame_type, channel, payload))[2])

    def _read_frame(self, deadline: float | None) -> tuple[int, int, bytes] | None:
        """The next frame's type, channel and payload; None once the broker closed the socket."""
        buffer = self.buffer
        while True:
            if len(buffer) >= FRAME_OVERHEAD:
                frame_type, channel, size = FRAME_HEAD.unpack_from(buffer)
                end = 7 + size
                if len(buffer) > end:
                    if buffer[end] != FRAME_END:
                        raise AmqpError(f"bad frame end {buffer[end]:#x} from the broker")
                    payload = bytes(buffer[7:end])
                    del buffer[: end + 1]  # cheap: CPython drops a bytearray's head in place
                    return frame_type, channel, payload
            if not self._receive(deadline):
                return None

    def _receive(self, deadline: float | None) -> bool:
        """Append the socket's next bytes to `buffer`; False at the end of the stream."""
        stream = self.stream
        timeout = stream.gettimeout()
        if deadline is not None:
            stream.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            data = stream.recv(RECEIVE_SIZE)
        except TimeoutError:
            raise TimeoutError(f"the broker sent nothing for {stream.gettimeout():.3g} s") from None
        except ConnectionResetError:  # the broker closed with bytes of ours unread
            data = b""
        finally:
            if deadline is not None:
                stream.settimeout(timeout)
        self.buffer += data
        return bool(data)


def connect(
    address: Address | str,
    timeout: float = DEFAULT_TIMEOUT,
    *,
    channels: Sequence[int] = (CHANNEL,),
    mechanism: str = "PLAIN",
    frame_max: int | None = None,
    channel_max: int | None = None,
    heartbeat: int = 0,
    client_properties: FieldTable | None = None,
) -> Connection:
    """A connection through the handshake with `channels` open; `timeout` bounds each wait.
    `client_properties` go in start-ok besides the client's own (`read_from_follower`, say)."""
    connection = Connection(address, timeout)
    try:
        steps = connection.handshake_steps(
            mechanism=mechanism,
            frame_max=frame_max,
            channel_max=channel_max,
            heartbeat=heartbeat,
            client_properties=client_properties,
        )
        for step in steps:
            step()
        for channel in channels:
            connection.open_channel(channel)
    except BaseException:
        connection.stream.close()
        raise
    return connection


def close_all(connections: Sequence[Connection]) -> None:
    """Close politely where the broker answers in time, abruptly otherwise.

    Every connection.close goes out before any close-ok is awaited, so the round trips overlap.
    """
    close = method_frame(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    for connection in connections:
        with contextlib.suppress(OSError):
            connection.stream.settimeout(CLOSE_TIMEOUT)
            connection.stream.sendall(close)
    for connection in connections:
        try:
            connection.expect(commands.Connection.CloseOk)
        except (OSError, AmqpError):
            pass
        finally:
            connection.stream.close()
