"""Shared helpers for the protocol tests: client sessions, consumers, reply assertions and a
bare socket client for the frames that client libraries will not send.

Every helper talks to a real broker; nothing here fakes a reply.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import pika
import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp import header as pamqp_header
from pamqp.base import Frame as MethodFrame
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import AMQPError, ChannelClosedByBroker, ConnectionClosedByBroker
from pika.spec import BasicProperties

DEFAULT_TIMEOUT = 5.0
# How long to keep reading when checking that something does NOT arrive.
QUIET_PERIOD = 0.3
VHOST = "/"

Kind = Literal["queue", "exchange"]
MethodT = TypeVar("MethodT", bound=MethodFrame)
T = TypeVar("T")


# --------------------------------------------------------------------------- names and texts


def unique_name(prefix: str) -> str:
    """A queue or exchange name no other test uses on the shared broker."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def resource(kind: Kind, name: str) -> str:
    """How RabbitMQ names a resource in reply texts: `queue 'q' in vhost '/'`."""
    return f"{kind} '{name}' in vhost '{VHOST}'"


def not_found_text(kind: Kind, name: str) -> str:
    return f"NOT_FOUND - no {resource(kind, name)}"


def locked_queue_text(name: str) -> str:
    return (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked {resource('queue', name)}."
        " It could be originally declared on another connection or the exclusive property"
        " value does not match that of the original declaration."
    )


def inequivalent_text(kind: Kind, name: str, arg: str, received: str, current: str) -> str:
    """`received`/`current` are already formatted, e.g. "'true'" or
    "the value '10' of type 'signedint'" or "none"."""
    return (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for {resource(kind, name)}:"
        f" received {received} but current is {current}"
    )


DEFAULT_EXCHANGE_REFUSED = "ACCESS_REFUSED - operation not permitted on the default exchange"


# --------------------------------------------------------------------------- reply assertions


def _check_reply(kind: str, code: int, text: str, expected_code: int, expected_text: str, exact: bool) -> None:
    matches = text == expected_text if exact else text.startswith(expected_text)
    assert code == expected_code and matches, (
        f"{kind} closed with {code} {text!r}, expected {expected_code} "
        f"{'' if exact else 'starting with '}{expected_text!r}"
    )


@contextmanager
def closes_channel(code: int, text: str, *, exact: bool = True) -> Iterator[None]:
    """Expect the block to end with the broker closing the channel with this code and text."""
    with pytest.raises(ChannelClosedByBroker) as info:
        yield
    _check_reply("channel", info.value.reply_code, info.value.reply_text, code, text, exact)


@contextmanager
def closes_connection(code: int, text: str, *, exact: bool = True) -> Iterator[None]:
    """Expect the block to end with the broker closing the whole connection."""
    with pytest.raises(ConnectionClosedByBroker) as info:
        yield
    _check_reply("connection", info.value.reply_code, info.value.reply_text, code, text, exact)


def round_trip(channel: BlockingChannel) -> None:
    """One synchronous request, so that every asynchronous method sent before it (publish,
    ack, reject) has been handled by the broker, and any error it caused has been raised."""
    channel.exchange_declare("amq.direct", passive=True)


# --------------------------------------------------------------------------- waiting


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Poll until `predicate()` holds; fail with `what` if it never does."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting until {what}")
        time.sleep(0.02)


def eventually(check: Callable[[], T], timeout: float = 10.0) -> T:
    """`check()` once it is truthy: the broker applies some changes (a policy, a close, a
    statistics sample) a moment after it answers."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s")
        time.sleep(0.1)
    return result


def process_until(
    connection: BlockingConnection, predicate: Callable[[], bool], what: str, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """Let pika read and dispatch frames until `predicate()` holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting until {what}")
        connection.process_data_events(time_limit=0.02)


def process_for(connection: BlockingConnection, seconds: float = QUIET_PERIOD) -> None:
    """Read and dispatch frames for a while: gives unwanted deliveries the chance to show."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        connection.process_data_events(time_limit=remaining)


# --------------------------------------------------------------------------- pika sessions


def connect(url: str) -> BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


class Session:
    """A pika connection with a current channel. Queues and exchanges declared through it are
    deleted when the session closes, so the shared broker does not fill up."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connection = connect(url)
        self.channel = self.connection.channel()
        self._queues: list[str] = []
        self._exchanges: list[str] = []

    def new_channel(self) -> BlockingChannel:
        """Open another channel and make it the current one (after the broker closed one)."""
        self.channel = self.connection.channel()
        return self.channel

    def track_queue(self, name: str) -> str:
        self._queues.append(name)
        return name

    def track_exchange(self, name: str) -> str:
        self._exchanges.append(name)
        return name

    def declare_queue(self, prefix: str = "q", **options: Any) -> str:
        """Declare a uniquely named queue on the current channel and return its name."""
        name = self.track_queue(unique_name(prefix))
        self.channel.queue_declare(name, **options)
        return name

    def declare_exchange(self, exchange_type: str = "direct", prefix: str = "x", **options: Any) -> str:
        name = self.track_exchange(unique_name(prefix))
        self.channel.exchange_declare(name, exchange_type, **options)
        return name

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()
        if self._queues or self._exchanges:
            _delete_quietly(self.url, self._queues, self._exchanges)


def _delete_quietly(url: str, queues: Sequence[str], exchanges: Sequence[str]) -> None:
    """Best-effort clean-up; a failure here must not hide the test's own outcome."""
    try:
        connection = connect(url)
    except AMQPError:
        return
    try:
        channel = connection.channel()
        for kind, names in (("queue", queues), ("exchange", exchanges)):
            for name in names:
                try:
                    if kind == "queue":
                        channel.queue_delete(name)
                    else:
                        channel.exchange_delete(name)
                except ChannelClosedByBroker:
                    channel = connection.channel()
    except AMQPError:
        pass
    finally:
        if connection.is_open:
            connection.close()


@contextmanager
def open_session(url: str) -> Iterator[Session]:
    session = Session(url)
    try:
        yield session
    finally:
        session.close()


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class Message:
    """A message as a client saw it, from basic.get or basic.deliver."""

    body: bytes
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: BasicProperties
    consumer_tag: str | None = None
    message_count: int | None = None


def bodies(messages: Iterable[Message]) -> list[bytes]:
    return [message.body for message in messages]


def publish_all(
    channel: BlockingChannel,
    routing_key: str,
    payloads: Iterable[bytes],
    exchange: str = "",
    properties: BasicProperties | None = None,
) -> None:
    for payload in payloads:
        channel.basic_publish(exchange, routing_key, payload, properties)


def numbered(prefix: str, count: int) -> list[bytes]:
    """Distinct bodies b"prefix-1" ... b"prefix-N", so order is visible."""
    return [f"{prefix}-{index}".encode() for index in range(1, count + 1)]


def get_message(channel: BlockingChannel, queue: str, *, auto_ack: bool = False) -> Message | None:
    method, properties, body = channel.basic_get(queue, auto_ack=auto_ack)
    if method is None:
        return None
    assert properties is not None
    return Message(
        body=body or b"",
        delivery_tag=method.delivery_tag,
        redelivered=method.redelivered,
        exchange=method.exchange,
        routing_key=method.routing_key,
        properties=properties,
        message_count=method.message_count,
    )


def await_message(channel: BlockingChannel, queue: str, what: str) -> Message:
    """Poll `queue` with basic.get (auto-ack) until a message is there; fail with `what` if
    none comes."""
    found: list[Message] = []

    def arrived() -> bool:
        message = get_message(channel, queue, auto_ack=True)
        if message is not None:
            found.append(message)
        return bool(found)

    wait_until(arrived, what)
    return found[0]


def get_messages(channel: BlockingChannel, queue: str, count: int, *, auto_ack: bool = False) -> list[Message]:
    """Exactly `count` messages by basic.get; fails if the queue runs dry first."""
    messages = []
    for index in range(count):
        message = get_message(channel, queue, auto_ack=auto_ack)
        assert message is not None, f"queue {queue!r} was empty after {index} of {count} gets"
        messages.append(message)
    return messages


def drain(channel: BlockingChannel, queue: str) -> list[Message]:
    """Everything ready in the queue, by basic.get with auto-ack, in order."""
    messages = []
    while (message := get_message(channel, queue, auto_ack=True)) is not None:
        messages.append(message)
    return messages


def declare_ok(channel: BlockingChannel, queue: str) -> tuple[int, int]:
    """(message_count, consumer_count) from a passive queue.declare."""
    method = channel.queue_declare(queue, passive=True).method
    return method.message_count, method.consumer_count


def message_count(channel: BlockingChannel, queue: str) -> int:
    return declare_ok(channel, queue)[0]


def passive_reply_code(connection: BlockingConnection, kind: Kind, name: str) -> int:
    """200 when a passive declare succeeds, else the code the broker closed the channel with."""
    channel = connection.channel()
    try:
        if kind == "queue":
            channel.queue_declare(name, passive=True)
        else:
            channel.exchange_declare(name, passive=True)
    except ChannelClosedByBroker as error:
        return int(error.reply_code)
    channel.close()
    return 200


def exists(connection: BlockingConnection, kind: Kind, name: str) -> bool:
    code = passive_reply_code(connection, kind, name)
    assert code in (200, 404), f"passive declare of {kind} {name!r} got {code}"
    return code == 200


class Consumer:
    """A basic.consume subscription whose deliveries are collected in order."""

    def __init__(
        self,
        channel: BlockingChannel,
        queue: str,
        *,
        auto_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.channel = channel
        self.deliveries: list[Message] = []
        self.tag: str = channel.basic_consume(
            queue,
            self._on_message,
            auto_ack=auto_ack,
            exclusive=exclusive,
            consumer_tag=consumer_tag,
            arguments=arguments,
        )

    def _on_message(self, _channel: BlockingChannel, method: Any, properties: BasicProperties, body: bytes) -> None:
        self.deliveries.append(
            Message(
                body=body,
                delivery_tag=method.delivery_tag,
                redelivered=method.redelivered,
                exchange=method.exchange,
                routing_key=method.routing_key,
                properties=properties,
                consumer_tag=method.consumer_tag,
            )
        )

    @property
    def bodies(self) -> list[bytes]:
        return bodies(self.deliveries)

    def wait_for(self, count: int, timeout: float = DEFAULT_TIMEOUT) -> list[Message]:
        """Wait until at least `count` deliveries arrived; return all of them so far."""
        process_until(
            self.channel.connection,
            lambda: len(self.deliveries) >= count,
            f"{count} deliveries arrived (got {len(self.deliveries)})",
            timeout,
        )
        return self.deliveries

    def settle(self, seconds: float = QUIET_PERIOD) -> list[Message]:
        """Keep reading for a quiet period; return every delivery received."""
        process_for(self.channel.connection, seconds)
        return self.deliveries

    def cancel(self) -> None:
        self.channel.basic_cancel(self.tag)


# --------------------------------------------------------------------------- raw frames

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
BASIC_CLASS_ID = 60


def encode_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + FRAME_END


@dataclass(frozen=True)
class RawFrame:
    frame_type: int
    channel: int
    payload: bytes  # the bytes between the frame header and the frame-end octet
    value: Any  # what pamqp decoded the frame to


class RawClient:
    """A bare AMQP 0-9-1 client on a socket. Used for what client libraries do not send
    (nowait flags, a reused consumer tag) or do not show (exact property bytes, every
    confirm frame). It is strict: `expect` fails on any frame other than the one named."""

    def __init__(self, port: int, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._buffer = bytearray()
        self._closed = False
        self.frame_max = 131072
        self._handshake()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _handshake(self) -> None:
        self._sock.sendall(pamqp_frame.marshal(pamqp_header.ProtocolHeader(), 0))
        self.expect(0, commands.Connection.Start)
        capabilities = {
            "publisher_confirms": True,
            "consumer_cancel_notify": True,
            "basic.nack": True,
            "exchange_exchange_bindings": True,
        }
        self.send(
            0,
            commands.Connection.StartOk(
                client_properties={"product": "lavin-tests", "capabilities": capabilities},
                mechanism="PLAIN",
                response="\0guest\0guest",
                locale="en_US",
            ),
        )
        tune = self.expect(0, commands.Connection.Tune)
        if tune.frame_max:
            self.frame_max = tune.frame_max
        self.send(0, commands.Connection.TuneOk(channel_max=tune.channel_max, frame_max=self.frame_max, heartbeat=0))
        self.send(0, commands.Connection.Open(virtual_host=VHOST))
        self.expect(0, commands.Connection.OpenOk)

    # -- sending

    def send(self, channel: int, method: MethodFrame) -> None:
        self._sock.sendall(pamqp_frame.marshal(method, channel))

    def send_bytes(self, data: bytes) -> None:
        self._sock.sendall(data)

    def open_channel(self, channel: int = 1) -> int:
        self.send(channel, commands.Channel.Open())
        self.expect(channel, commands.Channel.OpenOk)
        return channel

    def call(self, channel: int, method: MethodFrame, reply: type[MethodT]) -> MethodT:
        """Send a synchronous method and expect its reply as the very next frame."""
        self.send(channel, method)
        return self.expect(channel, reply)

    @staticmethod
    def publish_bytes(
        channel: int,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        mandatory: bool = False,
        properties: bytes | None = None,
        frame_max: int = 131072,
    ) -> bytes:
        """The frames of one basic.publish. `properties` is the encoded property flags and
        property list; by default an empty property set."""
        encoded_properties = properties if properties is not None else commands.Basic.Properties().marshal()
        header = struct.pack(">HHQ", BASIC_CLASS_ID, 0, len(body)) + encoded_properties
        chunk = frame_max - 8
        return b"".join(
            [
                pamqp_frame.marshal(
                    commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory), channel
                ),
                encode_frame(FRAME_HEADER, channel, header),
                *(
                    encode_frame(FRAME_BODY, channel, body[start : start + chunk])
                    for start in range(0, len(body), chunk)
                ),
            ]
        )

    def publish(self, channel: int, body: bytes, **options: Any) -> None:
        self.send_bytes(self.publish_bytes(channel, body, frame_max=self.frame_max, **options))

    # -- receiving

    def read_frame(self) -> RawFrame:
        """The next frame that is not a heartbeat."""
        while True:
            if len(self._buffer) >= 7:
                frame_type, channel, size = struct.unpack_from(">BHI", self._buffer)
                end = 7 + size + 1
                if len(self._buffer) >= end:
                    raw = bytes(self._buffer[:end])
                    del self._buffer[:end]
                    if frame_type == FRAME_HEARTBEAT:
                        continue
                    # Only methods are decoded: content is checked as bytes.
                    value = pamqp_frame.unmarshal(raw)[2] if frame_type == FRAME_METHOD else None
                    return RawFrame(frame_type, channel, raw[7:-1], value)
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("the broker closed the socket")
            self._buffer += chunk

    def expect(self, channel: int, method_type: type[MethodT]) -> MethodT:
        """The next frame, which must be `method_type` on `channel`. An expected
        channel.close or connection.close is answered with its close-ok, as a client must."""
        frame = self.read_frame()
        if frame.channel != channel or not isinstance(frame.value, method_type):
            pytest.fail(f"expected {method_type.__name__} on channel {channel}, got {describe(frame)}")
        if isinstance(frame.value, commands.Channel.Close):
            self.send(channel, commands.Channel.CloseOk())
        elif isinstance(frame.value, commands.Connection.Close):
            self.send(0, commands.Connection.CloseOk())
            self._closed = True
        return frame.value  # type: ignore[no-any-return]

    def expect_content(self, channel: int) -> tuple[bytes, bytes]:
        """The content after a basic.deliver/get-ok/return: (encoded properties, body).
        The properties are the header frame's property flags and list, exactly as sent."""
        header = self.read_frame()
        if header.channel != channel or header.frame_type != FRAME_HEADER:
            pytest.fail(f"expected a content header on channel {channel}, got {describe(header)}")
        body_size = struct.unpack_from(">Q", header.payload, 4)[0]
        body = b""
        while len(body) < body_size:
            frame = self.read_frame()
            if frame.channel != channel or frame.frame_type != FRAME_BODY:
                pytest.fail(f"expected a content body on channel {channel}, got {describe(frame)}")
            body += frame.payload
        return header.payload[12:], body

    def close(self) -> None:
        if self._closed:
            self._sock.close()
            return
        self._closed = True
        try:
            self.send(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
            deadline = time.monotonic() + DEFAULT_TIMEOUT
            while time.monotonic() < deadline:
                if isinstance(self.read_frame().value, commands.Connection.CloseOk):
                    break
        except OSError:
            pass  # the broker may already have dropped the socket
        finally:
            self._sock.close()


def describe(frame: RawFrame) -> str:
    value = frame.value
    if isinstance(value, (commands.Channel.Close, commands.Connection.Close)):
        return f"{value.name} {value.reply_code} {value.reply_text!r} on channel {frame.channel}"
    return f"{getattr(value, 'name', type(value).__name__)} on channel {frame.channel}"
