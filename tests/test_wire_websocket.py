"""The wire client's WebSocket transport against a scripted RFC 6455 peer on a real socket:
the frames Lavin's endpoint never sends (fragments, pings, a text frame) are handled as the
RFC says. The transport against the broker itself is in test_perf_tool.py."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest
from lavin.client.websocket import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    WebSocket,
    WebSocketError,
    accept_key,
    mask,
)

TIMEOUT = 5.0


def server_frame(opcode: int, payload: bytes, final: bool = True) -> bytes:
    assert len(payload) < 126
    return bytes(((0x80 if final else 0) | opcode, len(payload))) + payload


def receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the client closed the connection"
        data += chunk
    return data


def read_client_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One frame from the client, which must be masked; its opcode and unmasked payload."""
    first, second = receive_exactly(sock, 2)
    assert second & 0x80, "client frames are masked"
    size = second & 0x7F
    if size == 126:
        size = struct.unpack(">H", receive_exactly(sock, 2))[0]
    elif size == 127:
        size = struct.unpack(">Q", receive_exactly(sock, 8))[0]
    key = receive_exactly(sock, 4)
    return first & 0x0F, mask(receive_exactly(sock, size), key)


Script = Callable[[socket.socket], None]


@pytest.fixture
def peer() -> Iterator[Callable[[Script], WebSocket]]:
    """Connects a WebSocket to a listener that answers the upgrade, then runs `script`."""
    listener = socket.create_server(("127.0.0.1", 0))
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    def serve(script: Script) -> None:
        sock, _ = listener.accept()
        with sock:
            sock.settimeout(TIMEOUT)
            request = b""
            while b"\r\n\r\n" not in request:
                request += sock.recv(4096)
            headers = dict(line.split(b": ", 1) for line in request.split(b"\r\n")[1:] if line)
            accept = accept_key(headers[b"Sec-WebSocket-Key"].decode()).encode()
            sock.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\nSec-WebSocket-Protocol: amqp\r\n\r\n"
            )
            try:
                script(sock)
            except BaseException as error:  # noqa: BLE001 - reported by the test
                errors.append(error)

    def connect(script: Script) -> WebSocket:
        thread = threading.Thread(target=serve, args=(script,), daemon=True)
        thread.start()
        threads.append(thread)
        port = listener.getsockname()[1]
        return WebSocket(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT), "127.0.0.1", port, "/ws/amqp")

    yield connect
    for thread in threads:
        thread.join(TIMEOUT)
    listener.close()
    assert not errors, errors


def read_to_end(websocket: WebSocket) -> bytes:
    received = b""
    while data := websocket.recv(65536):
        received += data
    return received


def test_the_accept_key_is_the_rfcs_example() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 section 1.3


def test_fragments_join_pings_are_answered_and_a_close_is_echoed(peer: Callable[[Script], WebSocket]) -> None:
    seen: list[tuple[int, bytes]] = []
    done = threading.Event()

    def script(sock: socket.socket) -> None:
        seen.append(read_client_frame(sock))  # the client's data, masked
        sock.sendall(
            server_frame(OP_BINARY, b"AMQP", final=False)
            + server_frame(OP_PING, b"are you there")  # between the fragments, as the RFC allows
            + server_frame(OP_CONTINUATION, b" over ", final=False)
            + server_frame(OP_CONTINUATION, b"WebSocket")
            + server_frame(OP_PONG, b"unasked")  # ignored
            + server_frame(OP_BINARY, b"!")
            + server_frame(OP_CLOSE, struct.pack(">H", 1000))
        )
        seen.append(read_client_frame(sock))
        seen.append(read_client_frame(sock))
        done.set()

    websocket = peer(script)
    websocket.sendall(b"x" * 300)  # a 16-bit length
    assert read_to_end(websocket) == b"AMQP over WebSocket!"
    websocket.close()
    assert done.wait(TIMEOUT)
    assert seen == [(OP_BINARY, b"x" * 300), (OP_PONG, b"are you there"), (OP_CLOSE, struct.pack(">H", 1000))]


def test_a_large_write_goes_as_messages_of_at_most_max_send(peer: Callable[[Script], WebSocket]) -> None:
    sizes: list[tuple[int, int]] = []
    done = threading.Event()

    def script(sock: socket.socket) -> None:
        for _ in range(2):
            opcode, payload = read_client_frame(sock)
            sizes.append((opcode, len(payload)))
        done.set()

    websocket = peer(script)
    websocket.max_send = 1000
    websocket.sendall(bytes(1010))
    assert done.wait(TIMEOUT)
    websocket.close()
    assert sizes == [(OP_BINARY, 1000), (OP_BINARY, 10)]


@pytest.mark.parametrize(
    ("frames", "error"),
    [
        (server_frame(OP_TEXT, b"AMQP"), "a text frame"),
        (server_frame(OP_CONTINUATION, b"AMQP"), "a continuation frame with no message to continue"),
        (server_frame(OP_BINARY, b"AM", final=False) + server_frame(OP_BINARY, b"QP"), "a new message before"),
        (bytes((0x80 | OP_BINARY, 0x80 | 1)) + b"\0\0\0\0A", "a masked frame from the server"),
    ],
)
def test_frames_against_the_rfc_are_errors(peer: Callable[[Script], WebSocket], frames: bytes, error: str) -> None:
    websocket = peer(lambda sock: sock.sendall(frames))
    with pytest.raises(WebSocketError, match=error):
        read_to_end(websocket)
    websocket.sock.close()


def test_a_refused_upgrade_is_an_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def refuse() -> None:
            sock, _ = listener.accept()
            with sock:
                sock.recv(4096)
                sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

        thread = threading.Thread(target=refuse, daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        with pytest.raises(WebSocketError, match=r"refused: HTTP/1\.1 404 Not Found"):
            WebSocket(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT), "127.0.0.1", port, "/ws/amqp")
        thread.join(TIMEOUT)
