"""Raw sockets held open against a broker's listeners, for the tests of what idle, slow and
silent clients may hold."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def seconds_until_closed(sock: socket.socket, limit: float) -> float:
    """How long the broker took to close `sock` (reading and dropping anything it sends)."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"still open after {limit}s")
    return time.monotonic() - started


@contextlib.contextmanager
def held_sockets(port: int, count: int) -> Iterator[list[socket.socket]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(connect(port)) for _ in range(count)]
