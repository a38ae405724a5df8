"""The scale rows of `bench/compare --scale`: LavinMQ's published scale claims measured on
each broker of the comparison, in a second table after the main one.

| group | lavin-perf | rows |
|---|---|---|
| messages | `queued-messages --keep` | RSS growth over idle; restart until all are back; publish rate |
| queues | `queue-count --durable` | RSS growth; declare rate |
| bindings | `bindings [--durable]` | bind rate, durable and not (a group each) |
| connections | `connections` | RSS growth |

Each group runs once on a fresh broker of each kind, started for it in a directory of its own
and stopped (and its directory removed) after it, one broker after the other, so that no
figure carries memory from an earlier run and a hundred million messages sit beside nothing
else. The restart row stops the broker that holds the messages (SIGTERM) and starts it again
on the same data; its figure is the time from that start command until a passive
queue.declare, polled every RESTART_POLL seconds, finds every message back.

A peer that runs already (no START_CMD) is used as it is: it cannot be restarted, so its
restart row says n/a, and so do its RSS rows without `--peer-pid`.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lavin.bench.brokers import START_TIMEOUT, Broker, Certificates, lavin, rabbitmq, write_certificates
from lavin.bench.comparison import Measured, Row, dig, print_table, run_perf, show
from lavin.bench.peers import PeerSpec, peer
from lavin.bench.scale import queue_depth
from lavin.client.wire import Address, AmqpError

QUEUE = "lavin-compare-queued"  # the messages group's durable queue
RESTART = "restart"  # the figure the comparison times itself, rather than reads from lavin-perf
RESTART_TIMEOUT = 600.0  # seconds from the start command; later is n/a
RESTART_POLL = 0.1
# A run may last its count at the slowest rate seen on this machine (RabbitMQ's persistent
# publishes, LavinMQ's queue declarations), plus this margin.
RUN_MARGIN = 600.0


@dataclass(frozen=True)
class Figure:
    """One row of the scale table."""

    label: str
    unit: str
    metric: str  # dotted key in lavin-perf's JSON, or RESTART
    cpu_metric: str | None = None  # dotted key of the broker's CPU µs per operation


@dataclass(frozen=True)
class ScaleGroup:
    """One lavin-perf run on a fresh broker, and the rows it fills."""

    key: str  # names each broker's directory and instance
    arguments: tuple[str, ...]  # for lavin-perf
    figures: tuple[Figure, ...]
    timeout: float
    restart_count: int = 0  # messages the queue must hold again after a restart; 0: no restart


# Starts a broker of one kind in a directory, with an instance suffix, waiting this long for it to
# listen. Started again with the same directory and suffix, a restartable broker finds its data.
Starter = Callable[[Path, str, float], AbstractContextManager[Broker]]


@dataclass(frozen=True)
class Column:
    name: str
    start: Starter
    restartable: bool  # fresh at each start, and can be started again on its data


def positive(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def add_scale_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("scale rows")
    group.add_argument("--scale", action="store_true",
                       help="also the scale table: LavinMQ's published claims, each on fresh brokers")  # fmt: skip
    for option, default, what in (
        ("--scale-messages", 100_000_000, "persistent 16-byte messages queued"),
        ("--scale-queues", 100_000, "durable queues declared"),
        ("--scale-bindings", 10_000, "bindings made, to a durable queue and to a non-durable one"),
        ("--scale-connections", 8_000, "connections opened"),
    ):
        group.add_argument(option, type=positive, default=default, metavar="N", help=f"{what} (default {default})")


def scale_groups(messages: int, queues: int, bindings: int, connections: int) -> list[ScaleGroup]:
    queued = f"{messages:,} queued 16 B messages"
    per_binding = "broker_cpu_us_per_binding"
    return [
        ScaleGroup("messages",
                   ("queued-messages", "--count", str(messages), "--size", "16", "--confirm", "1000", "--queue", QUEUE),
                   (Figure(f"{queued}: RSS growth over idle", "MB", "broker_rss_growth_mb"),
                    Figure(f"{queued}: restart until all are back", "s", RESTART),
                    Figure(f"{queued}: publish rate", "msg/s", "publish_rate", "broker_cpu_us_per_message")),
                   RUN_MARGIN + messages / 20_000, restart_count=messages),
        ScaleGroup("queues", ("queue-count", "--count", str(queues), "--durable"),
                   (Figure(f"{queues:,} queues (durable): RSS growth", "MB", "broker_rss_growth_mb"),
                    Figure(f"{queues:,} queues (durable): declare rate", "queues/s", "declare_rate",
                           "broker_cpu_us_per_queue")),
                   RUN_MARGIN + queues / 50),
        ScaleGroup("bindings-durable", ("bindings", "--count", str(bindings), "--durable"),
                   (Figure(f"bindings/s, durable queue ({bindings:,} bindings)", "bindings/s", "bind_rate",
                           per_binding),),
                   RUN_MARGIN + bindings / 50),
        ScaleGroup("bindings", ("bindings", "--count", str(bindings)),
                   (Figure(f"bindings/s, non-durable queue ({bindings:,} bindings)", "bindings/s", "bind_rate",
                           per_binding),),
                   RUN_MARGIN + bindings / 50),
        ScaleGroup("connections", ("connections", "--count", str(connections)),
                   (Figure(f"{connections:,} connections: RSS growth", "MB", "broker_rss_growth_mb",
                           "broker_cpu_us_per_connection"),),
                   RUN_MARGIN + connections / 100),
    ]  # fmt: skip


def fresh_lavin(directory: Path, instance: str, timeout: float) -> AbstractContextManager[Broker]:
    return lavin(directory, instance=instance, start_timeout=timeout)


def fresh_rabbitmq(directory: Path, instance: str, timeout: float) -> AbstractContextManager[Broker]:
    return rabbitmq(directory, instance=instance, start_timeout=timeout)


def peer_starter(spec: PeerSpec, certificates: Certificates, pid: int | None) -> Starter:
    """A started peer from its START_CMD each time (its CPU and RSS read from that process);
    a running one as it is."""

    def start(directory: Path, instance: str, timeout: float) -> AbstractContextManager[Broker]:
        if spec.start is None:
            return peer(spec, directory, certificates, pid)
        return peer(spec, directory, certificates, instance=instance, start_timeout=timeout)

    return start


def scale_columns(workdir: Path, with_rabbitmq: bool, peers: Sequence[PeerSpec], pids: dict[str, int]) -> list[Column]:
    columns = [Column("Lavin", fresh_lavin, restartable=True)]
    if with_rabbitmq:
        columns.append(Column("RabbitMQ", fresh_rabbitmq, restartable=True))
    certificates = write_certificates(workdir / "tls")  # for the peers' {cert}, {key} and {ca}
    for spec in peers:
        starter = peer_starter(spec, certificates, pids.get(spec.name))
        columns.append(Column(spec.name, starter, restartable=spec.start is not None))
    return columns


def restart_seconds(column: Column, directory: Path, instance: str, count: int) -> float | None:
    """Start the broker again on its data: seconds from the start command until the queue
    holds all `count` messages again; None past RESTART_TIMEOUT."""
    started = time.monotonic()
    with column.start(directory, instance, RESTART_TIMEOUT) as broker:
        address = Address.from_uri(broker.uri)
        while time.monotonic() - started < RESTART_TIMEOUT:
            with contextlib.suppress(OSError, AmqpError):  # not listening yet, or the queue not back yet
                if queue_depth(address, QUEUE) == count:
                    return time.monotonic() - started
            time.sleep(RESTART_POLL)
    return None


def run_group(group: ScaleGroup, column: Column, directory: Path) -> list[Measured]:
    """The group's figures on a fresh broker of `column`'s kind; None (n/a) for those it cannot take."""
    instance = f"-{group.key}"
    restart = group.restart_count > 0 and column.restartable
    arguments = (*group.arguments, "--keep") if restart else group.arguments
    label = f"scale, {' '.join(arguments)}"
    result: dict[str, Any] | None = None
    restarted: float | None = None
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with column.start(directory, instance, START_TIMEOUT) as broker:
            if broker.pid is None and all(figure.metric.startswith("broker_") for figure in group.figures):
                print(f"{broker.name:8}  {label}: n/a: read from the broker's /proc entry, and its pid is not known",
                      file=sys.stderr)  # fmt: skip
            else:
                result = run_perf(label, arguments, broker, group.timeout)
            if result is not None:
                found = [f"{show(dig(result, figure.metric))} {figure.unit}"
                         for figure in group.figures if figure.metric != RESTART]  # fmt: skip
                print(", ".join(found), file=sys.stderr)
        if result is not None and restart:
            restarted = restart_seconds(column, directory, instance, group.restart_count)
            print(f"{column.name:8}  {label}: restart until all are back: {show(restarted)} s", file=sys.stderr)
    except (RuntimeError, OSError) as exc:  # a broker that did not start: n/a, and the table goes on
        print(f"{column.name}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
    finally:
        shutil.rmtree(directory, ignore_errors=True)  # a hundred million messages take gigabytes

    def measured(figure: Figure) -> Measured:
        if figure.metric == RESTART:
            return Measured(restarted, None)
        if result is None:
            return Measured(None, None)
        return Measured(dig(result, figure.metric), dig(result, figure.cpu_metric) if figure.cpu_metric else None)

    return [measured(figure) for figure in group.figures]


def run_scale_rows(args: argparse.Namespace, pids: dict[str, int]) -> None:
    """Print the scale table for bench/compare's `args` (the --scale-* counts, --only, which
    keeps the groups with a row whose label contains one of its words, --no-rabbitmq and the
    peers) in a temporary directory of its own."""
    groups = scale_groups(args.scale_messages, args.scale_queues, args.scale_bindings, args.scale_connections)
    if args.only:
        groups = [group for group in groups
                  if any(word in figure.label for figure in group.figures for word in args.only)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lavin-compare-scale-") as name:
        workdir = Path(name)
        columns = scale_columns(workdir, not args.no_rabbitmq, args.peer, pids)
        rows: list[Row] = []
        for group in groups:
            runs = [run_group(group, column, workdir / f"{group.key}-{index}") for index, column in enumerate(columns)]
            rows += [(figure, [[broker_runs[position]] for broker_runs in runs])
                     for position, figure in enumerate(group.figures)]  # fmt: skip
    print()
    print_table([column.name for column in columns], rows, title="scale")
