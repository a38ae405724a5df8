"""The `lavin-perf` scenarios. Each returns a flat-ish dict of results (also the JSON output)."""

from __future__ import annotations

import math
import os
import subprocess
import time
from dataclasses import replace
from typing import Any, TextIO

from lavin.bench.fleet import Link, fleet_consumer, fleet_producer, open_idle_connections
from lavin.bench.load import MB, Worker, run_load
from lavin.bench.measure import BrokerCpu, own_cpu_seconds, process_rss_kib, rss_growth_mb
from lavin.bench.topology import Topology, declare_topology, delete_topology
from lavin.bench.workers import LoadSpec, Stamp, produce
from lavin.client.wire import CHANNEL, Address, Connection, close_all, connect
from pamqp import commands

SETTLE_SECONDS = 1.0  # after opening connections, before reading the broker's RSS


def _owns_exchange(spec: LoadSpec) -> bool:
    return bool(spec.exchange) and not spec.exchange.startswith("amq.")


def declare_queue(spec: LoadSpec) -> None:
    """Declare the run's queue (durable when messages are persistent), bind it, empty it."""
    with connect(spec.address) as connection:
        arguments = {"x-queue-type": spec.queue_type} if spec.queue_type else {}
        declare = commands.Queue.Declare(queue=spec.queue, durable=spec.persistent, arguments=arguments)
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
        expected=dict.fromkeys(range(producers), per_producer),
        broker_pid=broker_pid,
        progress=progress,
    )
    delete_queue(spec)
    return {"preloaded": filled["published"], "preload_rate": filled["publish_rate"], **result}


def routed_flow(
    spec: LoadSpec,
    topology: Topology,
    consumers: list[list[Link]],
    producers: list[list[Link]] | int,
    duration: float,
    broker_pid: int | None,
    progress: TextIO | None,
) -> dict[str, Any]:
    """Messages through `topology` to fleets of consumers (`consumers`: per process, per
    connection, the queues it consumes). `producers` is a count of one-connection producers
    that cycle over the topology's keys, or a paced fleet (per process, per connection, the
    keys it publishes to)."""
    declare_topology(spec.address, topology, spec.persistent)
    spec = replace(spec, exchange=topology.exchange, queue=topology.queues[0], routing_keys=topology.publish_keys)
    producer: Worker = produce if isinstance(producers, int) else fleet_producer(producers)
    result = run_load(
        spec,
        producers if isinstance(producers, int) else len(producers),
        len(consumers),
        duration=duration,
        drain=spec.stamp is Stamp.SEQUENCE or spec.count > 0,
        broker_pid=broker_pid,
        progress=progress,
        producer=producer,
        consumer=fleet_consumer(consumers),
        copies=topology.copies,
    )
    delete_topology(spec.address, topology)
    connections = sum(len(process) for process in consumers)
    return {"queues": len(topology.queues), "bindings": len(topology.bindings), "consumer_connections": connections,
            **result}  # fmt: skip


def backlog(
    spec: LoadSpec, target_bytes: int, consumers: int, dd_dir: str | None, broker_pid: int | None,
    progress: TextIO | None,
) -> dict[str, Any]:  # fmt: skip
    """Persistent messages into a durable queue until `target_bytes` of bodies, then drained
    by `consumers`; with `dd_dir`, dd's rate of writing as much to that disk beside it."""
    result = consume_only(
        replace(spec, persistent=True), 1, consumers, math.ceil(target_bytes / spec.size), broker_pid, progress
    )
    result = {"backlog_bytes": result["preloaded"] * spec.size,
              "preload_mb_per_s": result["preload_rate"] * spec.size / MB, **result}  # fmt: skip
    if dd_dir is not None:
        result["dd"] = dd_write(dd_dir, target_bytes)
    return result


def dd_write(directory: str, size: int) -> dict[str, Any]:
    """The disk's own rate: dd writes `size` bytes (whole MiB) of zeros to a file there,
    bypassing the page cache (oflag=direct), or flushing at the end (conv=fdatasync) where the
    file system refuses O_DIRECT (tmpfs)."""
    path = os.path.join(directory, f"lavin-perf-dd-{os.getpid()}")
    mib = max(1, size // 2**20)
    try:
        for flag in ("oflag=direct", "conv=fdatasync"):
            command = ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", flag]
            started = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
            elapsed = time.monotonic() - started
            if done.returncode == 0:
                return {"command": " ".join(command), "write_mb_per_s": mib * 2**20 / elapsed / MB}
        raise OSError(f"dd failed: {done.stderr.strip()}")
    finally:
        if os.path.exists(path):
            os.remove(path)


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
        "broker_rss_growth_mb": rss_growth_mb(rss_before, rss_after),
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
