"""Worker processes that each drive many connections: fan-out, routing, many queues, many clients.

A fleet consumer holds its connections in one `selectors` loop: each connection has one
channel with a consumer per queue it was given, and acks with one `multiple` ack whenever
half the prefetch is unacknowledged.
A fleet producer paces every connection at `spec.rate` msg/s, writing each connection's due
publishes in one `sendall` per round, so a thousand clients cost a thousand writes a round,
not one per message. Plain TCP only: TLS and WebSocket streams hide buffered bytes from select.
"""

from __future__ import annotations

import math
import resource
import selectors
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from lavin.bench.load import Worker
from lavin.bench.measure import own_cpu_seconds
from lavin.bench.scan import ConfirmTracker, DeliveryScanner, LatencyRecorder, SequenceCheck
from lavin.bench.workers import STOP_POLL_SECONDS, LoadSpec, Signals, Stamp, publish_batches, run_worker, stream_counts
from lavin.client.wire import CHANNEL, RECEIVE_SIZE, Address, Connection, ack_frame, close_all, method_frame
from pamqp import commands
from pamqp.base import Frame as Method

CONNECT_BATCH = 100  # connections whose handshakes advance together
PIPELINE = 500  # methods sent before their replies are read
ROUND_SECONDS = 0.05  # a paced fleet producer writes each connection's due publishes this often


@dataclass(frozen=True)
class Link:
    """One connection of a fleet: the queues it consumes, or the routing keys it publishes to
    in turn (stamped as streams `first_stream`, `first_stream + 1`, ...)."""

    names: tuple[str, ...]
    first_stream: int


def spread(names: Sequence[str], connections: int, processes: int) -> list[list[Link]]:
    """Deal `names` over `connections` links and the links over `processes` workers."""
    width = math.ceil(len(names) / connections)
    links = [Link(tuple(names[index::connections]), index * width) for index in range(connections)]
    return [links[index::processes] for index in range(processes)]


def fleet_producer(layout: list[list[Link]]) -> Worker:
    return partial(_fleet_worker, "producer", _produce_fleet, layout)


def fleet_consumer(layout: list[list[Link]]) -> Worker:
    return partial(_fleet_worker, "consumer", _consume_fleet, layout)


FleetWork = Callable[[LoadSpec, list[Link], int, Signals, Callable[[], None]], dict[str, Any]]


def _fleet_worker(
    role: str, work: FleetWork, layout: list[list[Link]], spec: LoadSpec, index: int, slot: int, signals: Signals
) -> None:
    run_worker(role, index, signals, lambda ready: work(spec, layout[index], slot, signals, ready))


def raise_file_limit(needed: int) -> None:
    """Take every descriptor the hard limit allows, as the broker does at its start: thousands
    of connections each hold one. An unlimited hard limit is capped by the kernel (fs.nr_open),
    so then only what is `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        ceiling = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def open_idle_connections(address: Address, count: int, opened: list[Connection]) -> None:
    """Open `count` connections with one channel each, heartbeats off, into `opened` (which
    holds every socket opened so far if a handshake fails)."""
    raise_file_limit(len(opened) + count + 64)
    for first in range(0, count, CONNECT_BATCH):
        group = [Connection(address) for _ in range(min(CONNECT_BATCH, count - first))]
        opened += group
        steps = [
            (
                *connection.handshake_steps(),
                partial(connection.send, commands.Channel.Open(), CHANNEL),
                partial(connection.expect, commands.Channel.OpenOk, CHANNEL),
            )
            for connection in group
        ]
        for stage in zip(*steps, strict=True):
            for step in stage:
                step()


def pipelined(connection: Connection, methods: Sequence[Method], reply: type[Method], channel: int = CHANNEL) -> None:
    """Send `methods`, PIPELINE at a time, and wait for each one's `reply`."""
    for first in range(0, len(methods), PIPELINE):
        group = methods[first : first + PIPELINE]
        connection.send_raw(b"".join(method_frame(channel, method) for method in group))
        for _ in group:
            connection.expect(reply, channel)


def _produce_fleet(
    spec: LoadSpec, links: list[Link], slot: int, signals: Signals, ready: Callable[[], None]
) -> dict[str, Any]:
    connections: list[Connection] = []
    try:
        open_idle_connections(spec.address, len(links), connections)
        batches = [
            publish_batches(spec, link.names, connection.frame_max, link.first_stream)
            for connection, link in zip(connections, links, strict=True)
        ]
        # Anything a producer is sent is a close (a missing queue or exchange): fail loudly.
        watch = selectors.DefaultSelector()
        for connection in connections:
            watch.register(connection.sock, selectors.EVENT_READ, connection)
        ready()
        cpu_before = own_cpu_seconds()
        started = time.monotonic()
        sent = 0  # per connection: they all keep the same pace
        while not signals.stop_producers.is_set() and not (spec.count and sent >= spec.count):
            due = int((time.monotonic() - started) * spec.rate) - sent
            if spec.count:
                due = min(due, spec.count - sent)
            if due > 0:
                for connection, batch in zip(connections, batches, strict=True):
                    for first in range(sent, sent + due, batch.size):
                        connection.sock.sendall(batch.take(first, min(batch.size, sent + due - first)))
                sent += due
                signals.progress[slot] = sent * len(connections)
            for key, _ in watch.select(0):
                _fail_on_close(key.data)
            time.sleep(ROUND_SECONDS)
        # One round trip behind the last publish on each connection: then the broker has them all.
        passive = commands.Queue.Declare(queue=spec.queue, passive=True)
        for connection in connections:
            connection.send(passive, CHANNEL)
        for connection in connections:
            connection.expect(commands.Queue.DeclareOk, CHANNEL)
        elapsed = time.monotonic() - started
        cpu = own_cpu_seconds() - cpu_before
    finally:
        close_all(connections)
    streams: dict[int, int] = {}
    for link in links:
        streams.update(stream_counts(link.first_stream, len(link.names), sent))
    return {"published": sent * len(links), "streams": streams, "nacked": 0, "elapsed": elapsed, "cpu": cpu}


def _fail_on_close(connection: Connection) -> None:
    data = connection.sock.recv(RECEIVE_SIZE)
    if not data:
        raise ConnectionError("the broker closed the socket")
    connection.buffer += data
    del connection.buffer[: ConfirmTracker().scan(connection.buffer)]


@dataclass
class _Consuming:
    """One connection of a fleet consumer and what it has seen."""

    connection: Connection
    scanner: DeliveryScanner
    check: SequenceCheck | None
    acked: int = 0


def _consume_fleet(
    spec: LoadSpec, links: list[Link], slot: int, signals: Signals, ready: Callable[[], None]
) -> dict[str, Any]:
    connections: list[Connection] = []
    latencies = LatencyRecorder() if spec.stamp is Stamp.CLOCK else None
    try:
        open_idle_connections(spec.address, len(links), connections)
        watch = selectors.DefaultSelector()
        consuming: list[_Consuming] = []
        for number, (connection, link) in enumerate(zip(connections, links, strict=True)):
            if not spec.autoack:
                connection.qos(spec.prefetch)
            consumes = [
                commands.Basic.Consume(queue=queue, consumer_tag=f"lavin-perf-{slot}-{number}-{index}",
                                       no_ack=spec.autoack)
                for index, queue in enumerate(link.names)
            ]  # fmt: skip
            pipelined(connection, consumes, commands.Basic.ConsumeOk)
            check = SequenceCheck() if spec.stamp is Stamp.SEQUENCE else None
            reader = check or latencies
            state = _Consuming(connection, DeliveryScanner(reader.on_body if reader is not None else None), check)
            consuming.append(state)
            watch.register(connection.sock, selectors.EVENT_READ, state)
        # Half the prefetch at a time keeps deliveries flowing with a fraction of the ack writes.
        ack_every = max(1, spec.prefetch // 2)
        ready()
        cpu_before = own_cpu_seconds()
        started = time.monotonic()
        first_ns = last_ns = 0
        count = 0
        while not signals.stop_consumers.is_set():
            for key, _ in watch.select(STOP_POLL_SECONDS):
                state = key.data
                connection = state.connection
                data = connection.sock.recv(RECEIVE_SIZE)
                if not data:
                    raise ConnectionError("the broker closed the socket")
                now = time.monotonic_ns()
                if latencies is not None:
                    latencies.now = now
                scanner = state.scanner
                counted = scanner.count
                buffer = connection.buffer
                buffer += data
                del buffer[: scanner.scan(buffer)]
                if scanner.count != counted:
                    count += scanner.count - counted
                    first_ns = first_ns or now
                    last_ns = now
                    signals.progress[slot] = count
                if not spec.autoack and scanner.last_tag - state.acked >= ack_every:
                    state.acked = scanner.last_tag
                    connection.sock.sendall(ack_frame(CHANNEL, state.acked, True))
        elapsed = time.monotonic() - started
        cpu = own_cpu_seconds() - cpu_before
    finally:
        close_all(connections)
    return {
        "consumed": count,
        "first_ns": first_ns,
        "last_ns": last_ns,
        "elapsed": elapsed,
        "cpu": cpu,
        "checks": [state.check for state in consuming if state.check is not None],
        "latencies_ns": latencies.samples_ns if latencies is not None else array("q"),
    }
