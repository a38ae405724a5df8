"""AMQP 0-9-1 spoken by hand over a plain socket, for tests of what the broker does with
bytes that well-behaved client libraries never send.

Frames are built and parsed with pamqp; everything else (framing errors, handshake
steps, waiting for the broker's `connection.close`) lives here so the tests read as
"send this, expect that".
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from pamqp import body, commands, constants, encode, frame, header, heartbeat
from pamqp.base import Frame
from pamqp.common import FieldTable

PROTOCOL_HEADER_0_9_1 = header.ProtocolHeader().marshal()  # b"AMQP\x00\x00\x09\x01"
FRAME_END = constants.FRAME_END
FRAME_METHOD = constants.FRAME_METHOD
FRAME_BODY = constants.FRAME_BODY
FRAME_HEARTBEAT = constants.FRAME_HEARTBEAT
FRAME_HEADER_SIZE = constants.FRAME_HEADER_SIZE  # type, channel, size: 7 octets
DEFAULT_TIMEOUT = 5.0

# What pika and the RabbitMQ Java client announce; the broker adapts its behaviour to it
# (authentication_failure_close decides whether a failed login gets a connection.close).
CLIENT_CAPABILITIES: FieldTable = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
}

AnyFrame = frame.FrameTypes


class ConnectionEnded(AssertionError):
    """The broker closed the socket while the test still expected a frame."""


def describe(value: AnyFrame) -> str:
    """A readable one-liner for assertion messages."""
    if isinstance(value, commands.Connection.Close | commands.Channel.Close):
        return (
            f"{value.name}(reply_code={value.reply_code}, "
            f"reply_text={value.reply_text!r}, "
            f"class_id={value.class_id}, method_id={value.method_id})"
        )
    return getattr(value, "name", type(value).__name__)


# ------------------------------------------------------------------------------------
# Building frames, including broken ones


def raw_frame(
    frame_type: int, channel: int, payload: bytes, frame_end: int = FRAME_END
) -> bytes:
    """One frame with any type, payload and end octet, valid or not."""
    return (
        struct.pack(">BHI", frame_type, channel, len(payload))
        + payload
        + bytes([frame_end])
    )


def method_payload(method: Frame) -> bytes:
    """The payload of a method frame: class id, method id, arguments."""
    return frame.marshal(method, 0)[FRAME_HEADER_SIZE:-1]


def method_frame(channel: int, method: Frame) -> bytes:
    return frame.marshal(method, channel)


def content_header_frame(
    channel: int, body_size: int, properties: commands.Basic.Properties | None = None
) -> bytes:
    return frame.marshal(header.ContentHeader(0, body_size, properties), channel)


def content_body_frame(channel: int, content: bytes) -> bytes:
    return frame.marshal(body.ContentBody(content), channel)


def heartbeat_frame(channel: int = 0) -> bytes:
    return raw_frame(FRAME_HEARTBEAT, channel, b"")


def plain_response(username: str, password: str) -> str:
    return f"\0{username}\0{password}"


def amqplain_response(username: str, password: str) -> str:
    """AMQPLAIN: a field table without its length prefix (ASCII credentials only)."""
    table = encode.field_table({"LOGIN": username, "PASSWORD": password})
    return table[4:].decode("latin-1")


# ------------------------------------------------------------------------------------
# A connection


@dataclass(frozen=True)
class Received:
    channel: int
    frame: AnyFrame


class WireConnection:
    """A TCP connection to the broker on which the test writes every byte itself."""

    def __init__(self, port: int, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._eof = False
        self.start: commands.Connection.Start | None = None
        self.tune: commands.Connection.Tune | None = None
        self.frame_max = 0
        self.channel_max = 0

    # -- bytes ------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, method: Frame, channel: int = 0) -> None:
        self.send_raw(method_frame(channel, method))

    def _fill(self, deadline: float) -> bool:
        """Read more bytes into the buffer; False at end of stream."""
        if self._eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no data from the broker in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError("no data from the broker in time") from None
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self._eof = True
            return False
        self._buffer += data
        return True

    def read_until_eof(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """Everything the broker sends until it closes the socket."""
        deadline = time.monotonic() + timeout
        while self._fill(deadline):
            pass
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    # -- frames -----------------------------------------------------------------

    def recv_frame(self, timeout: float = DEFAULT_TIMEOUT) -> Received | None:
        """The next frame (heartbeats too); None once the broker closed the socket."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self._buffer) >= FRAME_HEADER_SIZE:
                _, _, size = struct.unpack_from(">BHI", self._buffer)
                if len(self._buffer) >= FRAME_HEADER_SIZE + size + 1:
                    consumed, channel, value = frame.unmarshal(bytes(self._buffer))
                    del self._buffer[:consumed]
                    return Received(channel, value)
            if not self._fill(deadline):
                return None

    def frames_until_eof(self, timeout: float = DEFAULT_TIMEOUT) -> list[Received]:
        """Every frame until the broker closes the socket; answers connection.close."""
        deadline = time.monotonic() + timeout
        frames: list[Received] = []
        while (received := self.recv_frame(deadline - time.monotonic())) is not None:
            frames.append(received)
            if isinstance(received.frame, commands.Connection.Close):
                self._answer_close()
        return frames

    def expect(
        self,
        kind: type[Frame],
        channel: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Frame:
        """The next frame other than a heartbeat; it must be a `kind` (on `channel`)."""
        deadline = time.monotonic() + timeout
        while True:
            received = self.recv_frame(deadline - time.monotonic())
            if received is None:
                raise ConnectionEnded(
                    f"broker closed the socket while the test expected {kind.name}"
                )
            if isinstance(received.frame, heartbeat.Heartbeat):
                continue
            if not isinstance(received.frame, kind) or (
                channel is not None and received.channel != channel
            ):
                raise AssertionError(
                    f"expected {kind.name} on channel {channel}, got "
                    f"{describe(received.frame)} on channel {received.channel}"
                )
            return received.frame

    def expect_connection_close(
        self, timeout: float = DEFAULT_TIMEOUT
    ) -> commands.Connection.Close:
        """Wait for the broker's connection.close, answer close-ok and return it."""
        deadline = time.monotonic() + timeout
        skipped: list[str] = []  # heartbeats, replies to pipelined methods, ...
        while True:
            try:
                received = self.recv_frame(deadline - time.monotonic())
            except TimeoutError:
                raise AssertionError(
                    f"no connection.close within {timeout}s; received {skipped}"
                ) from None
            if received is None:
                raise ConnectionEnded(
                    "broker closed the socket without sending connection.close; "
                    f"received {skipped}"
                )
            if isinstance(received.frame, commands.Connection.Close):
                self._answer_close()
                return received.frame
            skipped.append(f"{describe(received.frame)} on channel {received.channel}")

    def expect_channel_close(
        self, channel: int, timeout: float = DEFAULT_TIMEOUT
    ) -> commands.Channel.Close:
        close = self.expect(commands.Channel.Close, channel=channel, timeout=timeout)
        assert isinstance(close, commands.Channel.Close)
        self.send(commands.Channel.CloseOk(), channel)
        return close

    def _answer_close(self) -> None:
        with contextlib.suppress(
            OSError
        ):  # The broker may already have closed its end.
            self.send(commands.Connection.CloseOk())

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- handshake steps --------------------------------------------------------

    def begin(self) -> commands.Connection.Start:
        """Send the 0-9-1 protocol header and return the broker's connection.start."""
        self.send_raw(PROTOCOL_HEADER_0_9_1)
        start = self.expect(commands.Connection.Start, channel=0)
        assert isinstance(start, commands.Connection.Start)
        self.start = start
        return start

    def login(
        self,
        username: str = "guest",
        password: str = "guest",
        mechanism: str = "PLAIN",
        capabilities: Mapping[str, bool] = CLIENT_CAPABILITIES,
    ) -> None:
        """Send connection.start-ok; the broker answers with tune (or refuses)."""
        response = (
            amqplain_response(username, password)
            if mechanism == "AMQPLAIN"
            else plain_response(username, password)
        )
        properties: FieldTable = {
            "product": "lavin-tests",
            "platform": "Python",
            "capabilities": dict(capabilities),
        }
        self.send(
            commands.Connection.StartOk(
                client_properties=properties, mechanism=mechanism, response=response
            )
        )

    def expect_tune(self) -> commands.Connection.Tune:
        tune = self.expect(commands.Connection.Tune, channel=0)
        assert isinstance(tune, commands.Connection.Tune)
        self.tune = tune
        return tune

    def tune_ok(
        self, channel_max: int, frame_max: int, heartbeat_interval: int
    ) -> None:
        self.channel_max, self.frame_max = channel_max, frame_max
        self.send(
            commands.Connection.TuneOk(channel_max, frame_max, heartbeat_interval)
        )

    def open_vhost(self, vhost: str = "/") -> None:
        self.send(commands.Connection.Open(virtual_host=vhost))

    def open_channel(self, channel: int) -> None:
        self.send(commands.Channel.Open(), channel)
        self.expect(commands.Channel.OpenOk, channel=channel)


def connect(
    port: int,
    *,
    mechanism: str = "PLAIN",
    vhost: str = "/",
    frame_max: int | None = None,
    channel_max: int | None = None,
    heartbeat_interval: int = 0,
    channels: tuple[int, ...] = (),
) -> WireConnection:
    """A fully opened connection (header, start-ok, tune-ok, open) with `channels` open.

    frame_max and channel_max default to what the broker proposes.
    """
    conn = WireConnection(port)
    try:
        conn.begin()
        conn.login(mechanism=mechanism)
        tune = conn.expect_tune()
        conn.tune_ok(
            tune.channel_max if channel_max is None else channel_max,
            tune.frame_max if frame_max is None else frame_max,
            heartbeat_interval,
        )
        conn.open_vhost(vhost)
        conn.expect(commands.Connection.OpenOk, channel=0)
        for channel in channels:
            conn.open_channel(channel)
    except BaseException:
        conn.close()
        raise
    return conn
