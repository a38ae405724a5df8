"""The WebSocket transport of `lavin.client.wire`: a small RFC 6455 client over a blocking socket.

AMQP over WebSocket (LavinMQ's and RabbitMQ Web-AMQP's `amqp` subprotocol) carries the
AMQP byte stream in binary messages whose boundaries mean nothing, so `WebSocket` offers
`sendall` and `recv` like a socket's: `sendall` sends masked binary messages of at most
`max_send` bytes, and `recv` returns the payloads of data frames (continuations included) as
one stream, answering pings on the way. A close frame from the server reads as the end of
the stream.

Like the rest of the wire client it needs only the standard library.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import struct

SUBPROTOCOL = "amqp"
ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
FIN = 0x80
MASKED = 0x80
CLOSE_NORMAL = struct.pack(">H", 1000)
MAX_RESPONSE_HEAD = 16 * 1024
RECEIVE_SIZE = 256 * 1024
# Bytes per message sent until the AMQP client raises it to the negotiated frame_max: a server
# takes a message of one frame (Lavin: frame_max plus framing), and 4096 is AMQP's
# frame-min-size, a frame every server takes before connection.tune.
FIRST_MAX_SEND = 4096
SIZE_16, SIZE_64 = struct.Struct(">H"), struct.Struct(">Q")


class WebSocketError(ConnectionError):
    """The upgrade was refused or the server broke the WebSocket protocol."""


def mask(payload: bytes | bytearray | memoryview, key: bytes) -> bytes:
    """`payload` XOR the repeated 4-byte key, as one big-integer operation: in pure Python
    that is far faster than a loop over the bytes."""
    size = len(payload)
    if not size:
        return b""
    repeated = key * (size // 4) + key[: size % 4]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(size, "big")


def client_frame(opcode: int, payload: bytes | bytearray | memoryview) -> bytes:
    """One final frame as a client must send it: masked with a fresh random key."""
    size = len(payload)
    if size < 126:
        head = bytes((FIN | opcode, MASKED | size))
    elif size < 0x10000:
        head = bytes((FIN | opcode, MASKED | 126)) + SIZE_16.pack(size)
    else:
        head = bytes((FIN | opcode, MASKED | 127)) + SIZE_64.pack(size)
    key = os.urandom(4)
    return head + key + mask(payload, key)


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + ACCEPT_GUID).digest()).decode()


class WebSocket:
    """One WebSocket connection over `sock`, opened by the upgrade handshake in the constructor.

    Timeouts are the socket's: a `recv` that times out (or finds nothing on a non-blocking
    socket) keeps any partial frame for the next call.
    """

    def __init__(self, sock: socket.socket, host: str, port: int, path: str, subprotocol: str = SUBPROTOCOL) -> None:
        self.sock = sock
        self._raw = bytearray()  # received, not yet parsed into frames
        self._data = bytearray()  # payloads parsed, not yet returned by recv
        self._in_message = False  # a binary message awaits its continuation frames
        self._close_sent = False
        self._end = False  # the server sent a close frame or closed the socket
        self.max_send = FIRST_MAX_SEND
        self._upgrade(f"[{host}]" if ":" in host else host, port, path, subprotocol)

    def _upgrade(self, host: str, port: int, path: str, subprotocol: str) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {subprotocol}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        while (end := self._raw.find(b"\r\n\r\n")) < 0:
            if len(self._raw) > MAX_RESPONSE_HEAD:
                raise WebSocketError("no end to the HTTP response head of the WebSocket upgrade")
            data = self.sock.recv(4096)
            if not data:
                raise WebSocketError("the server closed the connection during the WebSocket upgrade")
            self._raw += data
        status, *lines = self._raw[:end].decode("latin-1").split("\r\n")
        del self._raw[: end + 4]  # what follows is already WebSocket frames
        if status.split(" ", 2)[1:2] != ["101"]:
            raise WebSocketError(f"WebSocket upgrade of {path} refused: {status}")
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        if headers.get("sec-websocket-accept") != accept_key(key):
            raise WebSocketError("wrong Sec-WebSocket-Accept in the upgrade response")
        if headers.get("sec-websocket-protocol") != subprotocol:
            raise WebSocketError(f"the server did not take subprotocol {subprotocol!r}")

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        max_send = self.max_send
        if len(data) <= max_send:
            self.sock.sendall(client_frame(OP_BINARY, data))
            return
        view = memoryview(data)
        for start in range(0, len(view), max_send):
            self.sock.sendall(client_frame(OP_BINARY, view[start : start + max_send]))

    def recv(self, size: int) -> bytes:
        """At most `size` bytes of the stream; b"" once the server closed it."""
        while not self._data:
            self._parse_frames()
            if self._data or self._end:
                break
            received = self.sock.recv(max(size, RECEIVE_SIZE))
            if not received:
                self._end = True
            self._raw += received
        if len(self._data) <= size:
            data = bytes(self._data)
            self._data.clear()
        else:
            data = bytes(self._data[:size])
            del self._data[:size]
        return data

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def close(self) -> None:
        """Say goodbye with a close frame when the socket still takes one, then close it."""
        if not self._close_sent and not self._end:
            with contextlib.suppress(OSError):
                self._send_close(CLOSE_NORMAL)
        self.sock.close()

    def _send_close(self, payload: bytes | bytearray) -> None:
        self._close_sent = True
        self.sock.sendall(client_frame(OP_CLOSE, payload))

    def _parse_frames(self) -> None:
        """Take every complete frame out of `_raw`."""
        raw = self._raw
        offset = 0
        while not self._end and len(raw) - offset >= 2:
            first, second = raw[offset], raw[offset + 1]
            if first & 0x70:
                raise WebSocketError("a frame with reserved bits set: no extension was agreed")
            if second & MASKED:
                raise WebSocketError("a masked frame from the server")
            start, size = offset + 2, second & 0x7F
            if size == 126:
                if len(raw) < start + 2:
                    break
                size, start = SIZE_16.unpack_from(raw, start)[0], start + 2
            elif size == 127:
                if len(raw) < start + 8:
                    break
                size, start = SIZE_64.unpack_from(raw, start)[0], start + 8
            end = start + size
            if end > len(raw):
                break
            self._on_frame(first & 0x0F, bool(first & FIN), raw[start:end])
            offset = end
        del raw[:offset]

    def _on_frame(self, opcode: int, final: bool, payload: bytearray) -> None:
        if opcode in (OP_BINARY, OP_CONTINUATION):
            if opcode == OP_CONTINUATION and not self._in_message:
                raise WebSocketError("a continuation frame with no message to continue")
            if opcode == OP_BINARY and self._in_message:
                raise WebSocketError("a new message before the last one was finished")
            self._data += payload
            self._in_message = not final
        elif opcode == OP_PING:
            self.sock.sendall(client_frame(OP_PONG, payload))
        elif opcode == OP_CLOSE:
            self._end = True
            if not self._close_sent:
                with contextlib.suppress(OSError):  # the server may close the socket right away
                    self._send_close(payload[:2])
        elif opcode == OP_TEXT:
            raise WebSocketError("a text frame: AMQP travels in binary frames")
        elif opcode != OP_PONG:
            raise WebSocketError(f"a frame with unknown opcode {opcode}")
