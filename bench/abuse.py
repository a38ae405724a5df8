"""Memory and file descriptors of a Lavin broker under abuse.

    python -m lavin.bench.abuse [--scale 0.01] [--only CASE] [--config FILE] [--watermark-mib N]

Each case starts a fresh broker (`lavin serve` from this interpreter's environment, as
bench/compare does), puts it under one kind of abuse, holds it there for a second, and
reports the broker's RSS (VmRSS of /proc/PID/status; the peak is VmHWM) and its open file
descriptors (the entries of /proc/PID/fd, sampled throughout). docs/benchmarks.md describes
the cases and the targets.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from lavin.bench.brokers import lavin
from lavin.bench.fleet import open_idle_connections
from lavin.bench.measure import process_fd_count, process_rss_kib
from lavin.bench.scan import DeliveryScanner
from lavin.client.wire import (
    CHANNEL,
    FRAME_MAX,
    RECEIVE_SIZE,
    Address,
    AmqpError,
    Connection,
    connect,
    content_frames,
    method_frame,
)
from pamqp import commands

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SAMPLE_INTERVAL = 0.2  # seconds between /proc samples
HOLD_SECONDS = 1.0  # the abuse stays in place this long before the held sample
STALL_SECONDS = 5.0  # a write blocked this long means the broker stopped reading
BATCH = 256  # publishes per socket write
DECLARE_BATCH = 100  # pipelined queue declarations
FD_POOL = 100  # the fixed part of the fd target: listener, epoll, log, definitions, open segments
WATERMARK_MARGIN = 1.10
PERSISTENT = commands.Basic.Properties(delivery_mode=2)

# A case sets its abuse up at a size, yields while the abuse is in place, and may set
# note["note"]; the broker is thrown away afterwards.
Case = Callable[[Address, int, dict[str, str]], AbstractContextManager[None]]


@dataclass(frozen=True)
class CaseSpec:
    name: str
    full_size: int
    unit: str
    run: Case
    clients: Callable[[int], int]  # client connections the case holds open, by size


@dataclass
class Row:
    case: str
    size: str
    setup_seconds: float
    clients: int
    rss_mib_before: float
    rss_mib_held: float
    rss_mib_peak: float
    fds_before: int
    fds_held: int
    fds_peak: int
    fd_target: int
    note: str


def encoded_publish(
    routing_key: str, body: bytes, properties: commands.Basic.Properties | None, mandatory: bool
) -> bytes:
    publish = commands.Basic.Publish(exchange="", routing_key=routing_key, mandatory=mandatory)
    return b"".join([method_frame(CHANNEL, publish), *content_frames(CHANNEL, body, properties, FRAME_MAX)])


def send_repeated(connection: Connection, message: bytes, count: int) -> int:
    """Write `message` `count` times, BATCH to a write; return how many went out: fewer than
    `count` when a write blocked for the socket's whole timeout (the broker stopped reading)."""
    batch = message * BATCH
    sent = 0
    try:
        while sent < count:
            step = min(BATCH, count - sent)
            connection.sock.sendall(batch if step == BATCH else message * step)
            sent += step
    except TimeoutError:
        pass
    return sent


def send_all(connection: Connection, message: bytes, count: int) -> None:
    sent = send_repeated(connection, message, count)
    if sent < count:
        raise TimeoutError(f"the broker stopped reading after {sent:,} of {count:,} publishes")


def round_trip(connection: Connection, queue: str) -> int:
    """A passive declare: once it is answered, every publish before it was handled."""
    declare = commands.Queue.Declare(queue=queue, passive=True)
    return int(connection.call(declare, commands.Queue.DeclareOk, CHANNEL).message_count)


def declare(connection: Connection, queue: str, durable: bool = False) -> None:
    connection.call(commands.Queue.Declare(queue=queue, durable=durable), commands.Queue.DeclareOk, CHANNEL)


# -- the cases ----------------------------------------------------------------------------


@contextmanager
def idle_connections(address: Address, count: int, note: dict[str, str]) -> Iterator[None]:
    opened: list[Connection] = []
    try:
        open_idle_connections(address, count, opened)
        yield
    finally:
        for connection in opened:  # dropped, not closed politely: the broker goes next
            connection.sock.close()


@contextmanager
def durable_queues(address: Address, count: int, note: dict[str, str]) -> Iterator[None]:
    with connect(address) as connection:
        for first in range(0, count, DECLARE_BATCH):
            names = [f"abuse-durable-{index}" for index in range(first, min(first + DECLARE_BATCH, count))]
            connection.send_raw(
                b"".join(method_frame(CHANNEL, commands.Queue.Declare(queue=name, durable=True)) for name in names)
            )
            for _ in names:
                connection.expect(commands.Queue.DeclareOk, CHANNEL)
            note["note"] = f"{first + len(names):,} declared"
        yield


@contextmanager
def unacked_messages(address: Address, count: int, note: dict[str, str]) -> Iterator[None]:
    """One consumer without a prefetch limit takes every message and acks none."""
    queue = "abuse-unacked"
    with connect(address) as consumer, connect(address) as publisher:
        declare(publisher, queue)
        consumer.consume(queue)
        failure: list[Exception] = []
        reader = threading.Thread(target=read_deliveries, args=(consumer, count, failure))
        reader.start()
        send_all(publisher, encoded_publish(queue, b"x" * 16, None, mandatory=False), count)
        reader.join()
        if failure:
            raise failure[0]
        yield


def read_deliveries(connection: Connection, count: int, failure: list[Exception]) -> None:
    scanner = DeliveryScanner()
    buffer = connection.buffer
    try:
        while scanner.count < count:
            data = connection.sock.recv(RECEIVE_SIZE)
            if not data:
                raise ConnectionError(f"the broker closed the consumer after {scanner.count} deliveries")
            buffer += data
            del buffer[: scanner.scan(buffer)]
    except (OSError, AmqpError) as error:  # handed to the main thread
        failure.append(error)


@contextmanager
def never_reading(address: Address, total: int, note: dict[str, str]) -> Iterator[None]:
    """Mandatory publishes that nothing routes: each comes back as basic.return to a client
    that never reads its socket."""
    body = b"r" * KiB
    count = total // len(body)
    connection = connect(address)
    try:
        connection.sock.settimeout(STALL_SECONDS)
        sent = send_repeated(connection, encoded_publish("abuse-no-such-queue", body, None, mandatory=True), count)
        if sent < count:
            note["note"] = f"the broker stopped reading after about {sent:,} of {count:,} publishes"
        else:
            note["note"] = f"all {sent:,} publishes written"
        yield
    finally:
        connection.sock.close()


@contextmanager
def backlog(address: Address, total: int, note: dict[str, str]) -> Iterator[None]:
    """Persistent 4 KiB messages in one durable queue that nobody consumes."""
    queue = "abuse-backlog"
    body = b"b" * (4 * KiB)
    with connect(address) as connection:
        declare(connection, queue, durable=True)
        send_all(connection, encoded_publish(queue, body, PERSISTENT, mandatory=False), total // len(body))
        note["note"] = f"{round_trip(connection, queue):,} messages queued"
        yield


CASES = [
    CaseSpec("idle-connections", 10_000, "connections", idle_connections, clients=lambda size: size),
    CaseSpec("durable-queues", 10_000, "queues", durable_queues, clients=lambda _size: 1),
    CaseSpec("unacked", 1_000_000, "messages", unacked_messages, clients=lambda _size: 2),
    CaseSpec("never-reading", GiB, "bytes returned", never_reading, clients=lambda _size: 1),
    CaseSpec("backlog", GiB, "bytes queued", backlog, clients=lambda _size: 1),
]


# -- measuring ----------------------------------------------------------------------------


class Sampler:
    """The most fds the broker had open, counted every SAMPLE_INTERVAL in a thread. (The peak
    RSS needs no sampling: the kernel keeps it as VmHWM.)"""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_fds = process_fd_count(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            try:
                self.peak_fds = max(self.peak_fds, process_fd_count(self.pid))
            except FileNotFoundError:  # the broker died; the case reports how
                return

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_fds = max(self.peak_fds, process_fd_count(self.pid))


def show_size(size: int, unit: str) -> str:
    if unit.startswith("bytes"):
        return f"{size / MiB:,.0f} MiB {unit.removeprefix('bytes ')}"
    return f"{size:,} {unit}"


def run_case(spec: CaseSpec, scale: float, extra_args: list[str]) -> Row:
    size = max(1, round(spec.full_size * scale))
    note: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="lavin-abuse-") as workdir, lavin(Path(workdir), extra_args) as broker:
        pid = broker.pid
        rss_before, fds_before = process_rss_kib(pid), process_fd_count(pid)
        with Sampler(pid) as sampler:
            started = time.monotonic()
            try:
                with spec.run(Address.from_uri(broker.uri), size, note):
                    setup_seconds = time.monotonic() - started
                    time.sleep(HOLD_SECONDS)
                    rss_held, fds_held = process_rss_kib(pid), process_fd_count(pid)
            except (OSError, AmqpError) as error:  # the broker gave out: a result, not a crash of the script
                setup_seconds = time.monotonic() - started
                note["note"] = f"{note.get('note', '')} FAILED: {error}".strip()
                rss_held, fds_held = process_rss_kib(pid), process_fd_count(pid)
        rss_peak = process_rss_kib(pid, peak=True)
    clients = spec.clients(size)
    return Row(
        case=spec.name,
        size=show_size(size, spec.unit),
        setup_seconds=round(setup_seconds, 1),
        clients=clients,
        rss_mib_before=round(rss_before / KiB, 1),
        rss_mib_held=round(rss_held / KiB, 1),
        rss_mib_peak=round(rss_peak / KiB, 1),
        fds_before=fds_before,
        fds_held=fds_held,
        fds_peak=sampler.peak_fds,
        fd_target=2 * clients + FD_POOL,
        note=note.get("note", ""),
    )


def print_table(rows: list[Row], watermark_mib: float | None) -> None:
    print("| case | size | set-up s | RSS MiB before | held | peak | within RSS target | fds before | held | peak "
          "| fd target | within | note |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---|")
    for row in rows:
        rss_ok = "n/a" if watermark_mib is None else yes_no(row.rss_mib_peak <= watermark_mib * WATERMARK_MARGIN)
        print(f"| {row.case} | {row.size} | {row.setup_seconds} | {row.rss_mib_before} | {row.rss_mib_held} "
              f"| {row.rss_mib_peak} | {rss_ok} | {row.fds_before} | {row.fds_held} | {row.fds_peak} "
              f"| {row.fd_target} | {yes_no(row.fds_peak <= row.fd_target)} | {row.note} |")  # fmt: skip


def yes_no(value: bool) -> str:
    return "yes" if value else "no"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lavin.bench.abuse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each case's full size (default 1)")
    parser.add_argument("--only", action="append", default=[], metavar="CASE",
                        help=f"run only this case (repeatable): {', '.join(spec.name for spec in CASES)}")  # fmt: skip
    parser.add_argument("--config", type=Path, help="config file for the broker (`lavin serve --config`)")
    parser.add_argument("--watermark-mib", type=int,
                        help="the broker's memory watermark in MiB, set with [main] vm_memory_high_watermark.absolute "
                             "unless --config is given; the peak RSS must stay within it plus 10 %%")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object per case instead of the table")
    args = parser.parse_args()
    unknown = set(args.only) - {spec.name for spec in CASES}
    if unknown:
        parser.error(f"unknown case: {', '.join(sorted(unknown))}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lavin-abuse-config-") as config_dir:
        config = args.config
        if config is None and args.watermark_mib is not None:
            config = Path(config_dir) / "lavin.ini"
            config.write_text(f"[main]\nvm_memory_high_watermark.absolute = {args.watermark_mib * MiB}\n")
        extra_args = ["--config", str(config)] if config is not None else []
        for spec in CASES:
            if args.only and spec.name not in args.only:
                continue
            row = run_case(spec, args.scale, extra_args)
            rows.append(row)
            if args.json:
                print(json.dumps(asdict(row)), flush=True)
    if not args.json:
        print_table(rows, args.watermark_mib)


if __name__ == "__main__":
    main()
