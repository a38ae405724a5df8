"""lavin-perf's scale scenarios, after LavinMQ's published claims: many persistent messages
queued (`queued-messages`), many queues (`queue-count`) and many bindings (`bindings`).

Given the broker's pid, each reads the broker's CPU time over the measured part and its RSS
from /proc once the broker has settled (a second, then until it idles): before the load
(idle) and after it, so that the growth is what the messages or queues cost.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from typing import Any, TextIO

from lavin.bench.fleet import pipelined
from lavin.bench.load import run_load
from lavin.bench.measure import BrokerCpu, own_cpu_seconds, process_rss_kib, rss_growth_mb, wait_until_idle
from lavin.bench.scenarios import SETTLE_SECONDS, declare_queue, delete_queue
from lavin.bench.workers import LoadSpec
from lavin.client.wire import CHANNEL, Address, connect
from pamqp import commands

SCALE_SCENARIOS = ("queued-messages", "queue-count", "bindings")


def add_scale_scenarios(subcommands: Any, common: argparse.ArgumentParser) -> None:
    """The scale scenarios' parsers, beside lavin-perf's other scenarios."""
    queued = subcommands.add_parser(
        "queued-messages", parents=[common],
        help="queue persistent messages with confirms; the broker's RSS growth, and the queue's depth",
    )  # fmt: skip
    queued.set_defaults(persistent=True)  # durable queue, delivery mode 2
    queued.add_argument("-C", "--count", type=int, default=1_000_000, help="messages in all (default 1000000)")
    queued.add_argument("-s", "--size", type=int, default=16, help="body size in bytes (default %(default)s)")
    queued.add_argument("-x", "--producers", type=int, default=1,
                        help="producer processes, each publishing count / producers (default 1)")  # fmt: skip
    queued.add_argument("-c", "--confirm", type=int, default=1000, metavar="WINDOW",
                        help="most unconfirmed publishes per producer (default %(default)s)")  # fmt: skip
    queued.add_argument("-u", "--queue", default="perf-queued", help="the durable queue (default %(default)s)")
    queued.add_argument("--keep", action="store_true",
                        help="leave the queue and its messages (to time a restart); deleted otherwise")  # fmt: skip

    queues = subcommands.add_parser(
        "queue-count", parents=[common], help="declare many queues; the broker's RSS growth, then delete them"
    )
    queues.add_argument("-C", "--count", type=int, default=10_000, help="queues (default 10000)")
    queues.add_argument("--durable", action="store_true", help="durable queues (default: not)")

    binds = subcommands.add_parser(
        "bindings", parents=[common], help="bind one queue to one direct exchange with many routing keys"
    )
    binds.add_argument("-C", "--count", type=int, default=10_000, help="bindings (default 10000)")
    binds.add_argument("--durable", action="store_true", help="durable queue and exchange (default: not)")


def check_scale_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.scenario not in SCALE_SCENARIOS:
        return
    if args.count < 1:
        parser.error(f"{args.scenario} needs a --count of at least 1")
    if args.scenario == "queued-messages" and args.count % args.producers:
        parser.error("queued-messages needs a --count that the --producers divide evenly")


def settled_rss_kib(broker_pid: int | None) -> int | None:
    """The broker's RSS once it has settled (SETTLE_SECONDS, then until it idles); None
    without its pid."""
    if broker_pid is None:
        return None
    time.sleep(SETTLE_SECONDS)
    wait_until_idle(broker_pid)
    return process_rss_kib(broker_pid)


def rss_figures(idle_kib: int | None, after_kib: int | None, per: str, count: int) -> dict[str, Any]:
    """RSS before and after, its growth in MB and in KiB per `per` (none without a pid)."""
    if idle_kib is None or after_kib is None:
        return {}
    return {
        "broker_rss_kib_idle": idle_kib,
        "broker_rss_kib_after": after_kib,
        "broker_rss_growth_mb": rss_growth_mb(idle_kib, after_kib),
        f"broker_rss_kib_per_{per}": (after_kib - idle_kib) / count,
    }


def queue_depth(address: Address, queue: str) -> int:
    """The queue's ready messages, from a passive queue.declare on a connection of its own."""
    with connect(address) as connection:
        passive = commands.Queue.Declare(queue=queue, passive=True)
        return connection.call(passive, commands.Queue.DeclareOk, CHANNEL).message_count or 0


def queued_messages(
    spec: LoadSpec, producers: int, keep: bool, broker_pid: int | None, progress: TextIO | None
) -> dict[str, Any]:
    """`spec.count` persistent messages from each of `producers`, with confirms, into a durable
    queue: how fast, how many the queue then holds, and what they cost the broker's RSS. With
    `keep` the queue and its messages stay, to be found again after a restart."""
    spec = replace(spec, persistent=True, rate=0)
    declare_queue(spec)
    idle_kib = settled_rss_kib(broker_pid)
    result = run_load(spec, producers, 0, duration=0, drain=False, broker_pid=broker_pid, progress=progress)
    after_kib = settled_rss_kib(broker_pid)
    result["queued"] = queue_depth(spec.address, spec.queue)
    if not keep:
        delete_queue(spec)
    return {**result, **rss_figures(idle_kib, after_kib, "message", result["published"])}


def queue_count(address: Address, count: int, durable: bool, broker_pid: int | None) -> dict[str, Any]:
    """Declare `count` queues on one connection, then delete them, both pipelined (each reply
    awaited, PIPELINE methods per write): both rates, and the broker's RSS while it holds them."""
    names = [f"lavin-perf-queues-{os.getpid()}-{index}" for index in range(count)]
    broker_cpu = BrokerCpu(broker_pid)
    with connect(address) as connection:
        idle_kib = settled_rss_kib(broker_pid)
        broker_cpu.start()
        cpu_before = own_cpu_seconds()
        started = time.monotonic()
        declares = [commands.Queue.Declare(queue=name, durable=durable) for name in names]
        pipelined(connection, declares, commands.Queue.DeclareOk)
        declare_seconds = time.monotonic() - started
        generator_cpu = own_cpu_seconds() - cpu_before
        broker_cpu.stop()
        after_kib = settled_rss_kib(broker_pid)
        started = time.monotonic()
        pipelined(connection, [commands.Queue.Delete(queue=name) for name in names], commands.Queue.DeleteOk)
        delete_seconds = time.monotonic() - started
    result: dict[str, Any] = {
        "queues": count,
        "durable": durable,
        "declare_rate": count / declare_seconds,
        "delete_rate": count / delete_seconds,
        "generator_cpu_s": generator_cpu,
    }
    if broker_pid is not None:
        result["broker_cpu_us_per_queue"] = broker_cpu.micros_per(count)
    return {**result, **rss_figures(idle_kib, after_kib, "queue", count)}


def bindings(address: Address, count: int, durable: bool, broker_pid: int | None) -> dict[str, Any]:
    """Bind one queue to one direct exchange (both `durable` or not) with `count` routing keys,
    one round trip each: the bind rate. Then both are deleted, and their bindings with them."""
    name = f"lavin-perf-bindings-{os.getpid()}"  # the queue's and the exchange's
    broker_cpu = BrokerCpu(broker_pid)
    with connect(address) as connection:
        connection.call(commands.Queue.Declare(queue=name, durable=durable), commands.Queue.DeclareOk, CHANNEL)
        exchange = commands.Exchange.Declare(exchange=name, exchange_type="direct", durable=durable)
        connection.call(exchange, commands.Exchange.DeclareOk, CHANNEL)
        broker_cpu.start()
        cpu_before = own_cpu_seconds()
        started = time.monotonic()
        for index in range(count):
            bind = commands.Queue.Bind(queue=name, exchange=name, routing_key=f"key-{index}")
            connection.call(bind, commands.Queue.BindOk, CHANNEL)
        bind_seconds = time.monotonic() - started
        generator_cpu = own_cpu_seconds() - cpu_before
        broker_cpu.stop()
        connection.call(commands.Exchange.Delete(exchange=name), commands.Exchange.DeleteOk, CHANNEL)
        connection.call(commands.Queue.Delete(queue=name), commands.Queue.DeleteOk, CHANNEL)
    result: dict[str, Any] = {
        "bindings": count,
        "durable": durable,
        "bind_rate": count / bind_seconds,
        "generator_cpu_s": generator_cpu,
    }
    if broker_pid is not None:
        result["broker_cpu_us_per_binding"] = broker_cpu.micros_per(count)
    return result
