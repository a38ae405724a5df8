"""The shovel rows of bench/compare: how fast a broker's own dynamic shovel moves a backlog.

A source queue is filled with `count` transient messages first; then a shovel is defined on
the source broker (`amqp://`, the broker itself, to a queue on the same broker, or to the same
queue name on a second broker of the same kind) with the keys both Lavin and RabbitMQ read:
`ack-mode` on-confirm and `src-prefetch-count` 1000, queues declared durable as both shovels
declare them. The destination queue's depth is polled from the moment the shovel is asked
for, and the window runs from the last poll that saw it empty to the first that saw it hold
every message: setting the parameter (rabbitmqctl's start-up) and the links' connecting stay
outside, at most one poll interval of start-up inside. Broker CPU over the window is read
from /proc for every broker involved, and added up.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lavin.bench.brokers import Broker, Shovels
from lavin.bench.load import run_load
from lavin.bench.measure import process_cpu_seconds
from lavin.bench.workers import LoadSpec, Stamp
from lavin.client.wire import CHANNEL, Address, Connection, connect
from pamqp import commands

SHOVEL_NAME = "lavin-compare-shovel"
SOURCE_QUEUE = "lavin-compare-shovel-source"
DESTINATION_QUEUE = "lavin-compare-shovel-destination"
PREFETCH = 1000  # RabbitMQ's default, and Lavin's
POLL_INTERVAL = 0.01  # seconds between looks at the destination's depth
PRELOAD_TIMEOUT = 60.0  # for the source queue to show every published message
MOVE_TIMEOUT = 600.0  # for the shovel to move them all


@dataclass(frozen=True)
class Sample:
    """One look at the destination: when, how many messages it held, the brokers' CPU seconds."""

    at: float
    depth: int
    cpu_seconds: float | None


@dataclass(frozen=True)
class ShovelFigures:
    rate: float  # msg/s
    cpu_us_per_message: float | None


def shovel_definition(destination_uri: str) -> dict[str, Any]:
    """From the broker's own source queue to `destination_uri` (`amqp://`: the same broker)."""
    return {
        "src-uri": "amqp://",
        "src-queue": SOURCE_QUEUE,
        "src-prefetch-count": PREFETCH,
        "dest-uri": destination_uri,
        "dest-queue": DESTINATION_QUEUE,
        "ack-mode": "on-confirm",
    }


def moving_window(samples: Sequence[Sample], count: int) -> tuple[Sample, Sample] | None:
    """The last sample that saw an empty destination before the first that saw all `count`
    messages, and that one; None until every message is there."""
    for index, sample in enumerate(samples):
        if sample.depth >= count:
            empty = [earlier for earlier in samples[:index] if earlier.depth == 0]
            return (empty[-1], sample) if empty else None
    return None


def figures(first: Sample, last: Sample, count: int) -> ShovelFigures:
    """Messages per second and broker CPU µs per message over the window."""
    elapsed = last.at - first.at
    cpu = None
    if first.cpu_seconds is not None and last.cpu_seconds is not None:
        cpu = (last.cpu_seconds - first.cpu_seconds) * 1e6 / count
    return ShovelFigures(count / elapsed, cpu)


def _queue_depth(connection: Connection, queue: str) -> int:
    reply = connection.call(commands.Queue.Declare(queue=queue, passive=True), commands.Queue.DeclareOk, CHANNEL)
    return int(reply.message_count or 0)


def _fresh_queue(address: Address, queue: str) -> None:
    with connect(address) as connection:
        connection.call(commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk, CHANNEL)
        connection.call(commands.Queue.Purge(queue=queue), commands.Queue.PurgeOk, CHANNEL)


def _delete_queue(address: Address, queue: str) -> None:
    with connect(address) as connection:
        connection.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk, CHANNEL)


def _preload(address: Address, count: int, size: int) -> None:
    spec = LoadSpec(address=address, queue=SOURCE_QUEUE, exchange="", routing_key=SOURCE_QUEUE, size=size,
                    persistent=False, confirm=PREFETCH, rate=0.0, count=count, autoack=True, prefetch=0,
                    stamp=Stamp.NONE)  # fmt: skip
    run_load(spec, 1, 0, duration=0, drain=False)
    deadline = time.monotonic() + PRELOAD_TIMEOUT
    with connect(address) as connection:
        while (depth := _queue_depth(connection, SOURCE_QUEUE)) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the source queue holds {depth} of the {count} messages published")
            time.sleep(POLL_INTERVAL)


def _cpu_seconds(pids: Sequence[int | None]) -> float | None:
    if any(pid is None for pid in pids):
        return None
    return sum(process_cpu_seconds(pid) for pid in pids if pid is not None)


def _watch(
    destination: Address, pids: Sequence[int | None], count: int, start: Callable[[], None]
) -> tuple[Sample, Sample]:
    """Call `start` in a thread while polling the destination until it holds `count`."""
    failure: list[BaseException] = []

    def starting() -> None:
        try:
            start()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # reported once the watch ends
            failure.append(exc)

    samples: list[Sample] = []
    with connect(destination) as connection:
        setter = threading.Thread(target=starting, name="shovel-set", daemon=True)
        setter.start()
        deadline = time.monotonic() + MOVE_TIMEOUT
        while (window := moving_window(samples, count)) is None:
            if failure:
                raise RuntimeError(f"setting the shovel failed: {failure[0]}")
            if time.monotonic() > deadline or (samples and samples[-1].depth >= count):
                raise RuntimeError(f"{samples[-1].depth if samples else 0} of {count} messages moved, no window")
            depth = _queue_depth(connection, DESTINATION_QUEUE)
            samples.append(Sample(time.monotonic(), depth, _cpu_seconds(pids)))
            time.sleep(POLL_INTERVAL)
        setter.join(timeout=60.0)
    if failure:
        raise RuntimeError(f"setting the shovel failed: {failure[0]}")
    return window


def run_shovel(source: Broker, destination: Broker | None, count: int, size: int) -> ShovelFigures:
    """Move `count` messages of `size` bytes with `source`'s shovel, to a queue on `destination`
    (None: on `source` itself). The queues and the shovel are removed afterwards."""
    shovels: Shovels | None = source.shovels
    if shovels is None:
        raise RuntimeError(f"no way to set a shovel on {source.name}")
    far = destination or source
    source_address, far_address = Address.from_uri(source.uri), Address.from_uri(far.uri)
    _fresh_queue(source_address, SOURCE_QUEUE)
    _fresh_queue(far_address, DESTINATION_QUEUE)
    try:
        _preload(source_address, count, size)
        pids = [source.pid] if destination is None else [source.pid, destination.pid]
        definition = shovel_definition("amqp://" if destination is None else destination.uri)
        defined = threading.Event()

        def define() -> None:
            shovels.set(SHOVEL_NAME, definition)
            defined.set()

        try:
            first, last = _watch(far_address, pids, count, define)
        finally:
            if defined.is_set():  # a refused definition left nothing to remove
                shovels.clear(SHOVEL_NAME)
        return figures(first, last, count)
    finally:
        _delete_queue(source_address, SOURCE_QUEUE)
        _delete_queue(far_address, DESTINATION_QUEUE)
