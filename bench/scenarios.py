"""The `lavin-perf` scenarios. Each returns a flat-ish dict of results (also the JSON output)."""

from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import replace
from functools import partial
from typing import Any, TextIO

from lavin.bench.load import run_load
from lavin.bench.measure import BrokerCpu, own_cpu_seconds, process_rss_kib
from lavin.bench.workers import LoadSpec, Stamp
from lavin.wire_client import CHANNEL, Address, Connection, close_all, connect
from pamqp import commands

CONNECT_BATCH = 100  # connections whose handshakes advance together
SETTLE_SECONDS = 1.0  # after opening connections, before reading the broker's RSS


def _owns_exchange(spec: LoadSpec) -> bool:
    return bool(spec.exchange) and not spec.exchange.startswith("amq.")


def declare_queue(spec: LoadSpec) -> None:
    """Declare the run's queue (durable when messages are persistent), bind it, empty it."""
    with connect(spec.address) as connection:
        declare = commands.Queue.Declare(queue=spec.queue, durable=spec.persistent)
        connection.call(declare, commands.Queue.DeclareOk, CHANNEL)
        if _owns_exchange(spec):
            exchange = commands.Exchange.Declare(
                exchange=spec.exchange, exchange_type="direct", durable=spec.persistent
            )
            connection.call(exchange, commands.Exchange.DeclareOk, CHANNEL)
        if spec.exchange:
            bind = commands.Queue.Bind(queue=spec.queue, exchange=spec.exchange, routing_key=spec.routing_key)
            connection.call(bind, commands.Queue.BindOk, CHANNEL)
        connection.call(commands.Queue.Purge(queue=spec.queue), commands.Queue.PurgeOk, CHANNEL)


def delete_queue(spec: LoadSpec) -> None:
    """Remove what `declare_queue` made, so runs do not leave messages behind for the next."""
    with connect(spec.address) as connection:
        connection.call(commands.Queue.Delete(queue=spec.queue), commands.Queue.DeleteOk, CHANNEL)
        if _owns_exchange(spec):
            connection.call(commands.Exchange.Delete(exchange=spec.exchange), commands.Exchange.DeleteOk, CHANNEL)


def message_flow(
    spec: LoadSpec,
    producers: int,
    consumers: int,
    duration: float,
    broker_pid: int | None,
    progress: TextIO | None,
) -> dict[str, Any]:
    """throughput, publish-only and latency: publish for a while (or a count) and consume.

    Verification and counted runs wait for every message to arrive; timed runs stop both sides
    at the deadline.
    """
    declare_queue(spec)
    drain = spec.stamp is Stamp.SEQUENCE or spec.count > 0
    result = run_load(
        spec, producers, consumers, duration=duration, drain=drain, broker_pid=broker_pid, progress=progress
    )
    delete_queue(spec)
    return result


def consume_only(
    spec: LoadSpec, producers: int, consumers: int, preload: int, broker_pid: int | None, progress: TextIO | None
) -> dict[str, Any]:
    """Fill the queue with `preload` messages, then time how fast consumers drain it."""
    declare_queue(spec)
    per_producer = math.ceil(preload / producers)
    filled = run_load(
        replace(spec, count=per_producer, rate=0), producers, 0, duration=0, drain=False, progress=progress
    )
    result = run_load(
        spec,
        0,
        consumers,
        duration=0,
        drain=True,
        expected=filled["published"],
        broker_pid=broker_pid,
        progress=progress,
    )
    delete_queue(spec)
    return {"preloaded": filled["published"], "preload_rate": filled["publish_rate"], **result}


def raise_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        ceiling = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def open_idle_connections(address: Address, count: int, opened: list[Connection]) -> None:
    """Open `count` connections with one channel each, heartbeats off, into `opened` (which
    holds every socket opened so far if a handshake fails)."""
    raise_file_limit(count + 64)
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


def idle_connections(address: Address, count: int, broker_pid: int) -> dict[str, Any]:
    """Open `count` connections with one channel each; the broker's RSS growth per connection."""
    rss_before = process_rss_kib(broker_pid)
    broker_cpu = BrokerCpu(broker_pid)
    broker_cpu.start()
    cpu_before = own_cpu_seconds()
    started = time.monotonic()
    opened: list[Connection] = []
    try:
        open_idle_connections(address, count, opened)
        open_seconds = time.monotonic() - started
        generator_cpu = own_cpu_seconds() - cpu_before
        time.sleep(SETTLE_SECONDS)
        rss_after = process_rss_kib(broker_pid)
        broker_cpu.stop()
    finally:
        close_all(opened)
    return {
        "connections": count,
        "open_rate": count / open_seconds,
        "broker_rss_kib_before": rss_before,
        "broker_rss_kib_after": rss_after,
        "broker_rss_kib_per_connection": (rss_after - rss_before) / count,
        "broker_cpu_us_per_connection": broker_cpu.micros_per(count),
        "generator_cpu_s": generator_cpu,
    }


def queue_churn(address: Address, count: int, broker_pid: int | None) -> dict[str, Any]:
    """Declare and bind `count` non-durable queues one round trip at a time, then delete them."""
    names = [f"lavin-perf-churn-{os.getpid()}-{index}" for index in range(count)]
    broker_cpu = BrokerCpu(broker_pid)
    with connect(address) as connection:
        broker_cpu.start()
        cpu_before = own_cpu_seconds()
        started = time.monotonic()
        for name in names:
            connection.call(commands.Queue.Declare(queue=name), commands.Queue.DeclareOk, CHANNEL)
            bind = commands.Queue.Bind(queue=name, exchange="amq.direct", routing_key=name)
            connection.call(bind, commands.Queue.BindOk, CHANNEL)
        declared = time.monotonic()
        for name in names:
            connection.call(commands.Queue.Delete(queue=name), commands.Queue.DeleteOk, CHANNEL)
        deleted = time.monotonic()
        generator_cpu = own_cpu_seconds() - cpu_before
        broker_cpu.stop()
    result: dict[str, Any] = {
        "queues": count,
        "declare_bind_rate": count / (declared - started),
        "delete_rate": count / (deleted - declared),
        "generator_cpu_s": generator_cpu,
    }
    if broker_pid is not None:
        result["broker_cpu_us_per_queue"] = broker_cpu.micros_per(count)
    return result
