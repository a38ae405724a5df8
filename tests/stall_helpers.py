"""How long another client waits for the broker while something runs: the measure of a
stalled event loop."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from broker_process import BrokerProcess

T = TypeVar("T")
TIMEOUT = 10
# What another client may wait for its answer while a pattern is matched.
MAX_STALL = 0.05


def amqp_round_trip(broker: BrokerProcess) -> float:
    """Seconds from a new connection's protocol header to the broker's connection.start:
    one pass of the broker's event loop, seen from another client."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", broker.port), timeout=2) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        assert sock.recv(1)  # connection.start's first byte; a stalled loop times out here
    return time.perf_counter() - started


def stalls_during(broker: BrokerProcess, action: Callable[[], T]) -> tuple[list[float], T]:
    """The round trips, fastest first, of another client while `action` runs in a thread (a few are
    measured even if it is done at once), and what `action` returned."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        done = pool.submit(action)
        stalls = [amqp_round_trip(broker) for _ in range(3)]
        while not done.done():
            stalls.append(amqp_round_trip(broker))
        return sorted(stalls), done.result(timeout=TIMEOUT)


def worst_stall_during(broker: BrokerProcess, action: Callable[[], T]) -> tuple[float, T]:
    """The slowest round trip of another client while `action` runs, and what it returned."""
    stalls, result = stalls_during(broker, action)
    return stalls[-1], result
