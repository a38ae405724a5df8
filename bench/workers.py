"""Producer and consumer processes: one AMQP connection each, raw bytes on the hot path.

A producer writes pre-encoded publishes in batches; a consumer scans frame heads for
basic.deliver and acks a whole read with one `multiple` ack. Each runs in its own process
so producers and consumers can use separate cores, and each reports its own CPU time.
"""

from __future__ import annotations

import enum
import select
import signal
import socket
import ssl
import struct
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

from lavin.bench.measure import own_cpu_seconds
from lavin.bench.scan import (
    CLOCK_STAMP,
    SEQUENCE_STAMP,
    ConfirmTracker,
    DeliveryScanner,
    LatencyRecorder,
    SequenceCheck,
)
from lavin.client.wire import (
    CHANNEL,
    DEFAULT_TIMEOUT,
    RECEIVE_SIZE,
    Address,
    Connection,
    EncodedMessage,
    ack_frame,
    connect,
    encode_publish,
)
from pamqp import commands

BATCH = 256  # publishes per write when nothing smaller is due
BATCH_BYTES = 4 * 1024 * 1024  # ... and at most this much per write, large bodies being one at least
MAX_PACING_SLEEP = 0.05  # seconds; a paced producer still notices `stop` quickly
STOP_POLL_SECONDS = 0.1  # a consumer read gives up after this long to check `stop`
STOP_POLL = struct.pack("ll", 0, int(STOP_POLL_SECONDS * 1e6))
NOTHING_YET = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)  # a non-blocking read found no data
PERSISTENT = commands.Basic.Properties(delivery_mode=2)


class Stamp(enum.Enum):
    """What a producer writes at the start of each body."""

    NONE = "none"
    SEQUENCE = "sequence"  # producer id + sequence number, for --verify
    CLOCK = "clock"  # publish time, for latency


@dataclass(frozen=True)
class LoadSpec:
    address: Address
    queue: str
    exchange: str
    routing_key: str
    size: int
    persistent: bool
    confirm: int  # most publishes awaiting a confirm; 0 = confirms off
    rate: float  # msg/s per producer; 0 = as fast as possible
    count: int  # publishes per producer; 0 = until stopped
    autoack: bool
    prefetch: int
    stamp: Stamp
    routing_keys: tuple[str, ...] = ()  # publish to each in turn instead of to routing_key
    queue_type: str = ""  # the queue's x-queue-type argument (quorum); "" = none

    @property
    def keys(self) -> tuple[str, ...]:
        return self.routing_keys or (self.routing_key,)


class Signals:
    """What the coordinating process shares with its workers.

    Workers put ("ready" | "result" | "error", role, index, payload) on `reports` and keep
    their running message count in `progress[slot]`.
    """

    def __init__(self, context: BaseContext, slots: int) -> None:
        self.start = context.Event()
        self.stop_producers = context.Event()
        self.stop_consumers = context.Event()
        self.reports = context.Queue()
        self.progress = context.RawArray("q", slots)


def run_worker(role: str, index: int, signals: Signals, work: Callable[[Callable[[], None]], dict[str, Any]]) -> None:
    """Process entry point: `work` gets a callback to say it is set up and waits for the start."""

    def ready() -> None:
        signals.reports.put(("ready", role, index, None))
        signals.start.wait()

    # Ctrl-C reaches the whole process group: the coordinator alone decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    try:
        result = work(ready)
    except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which stops the run
        signals.reports.put(("error", role, index, f"{type(exc).__name__}: {exc}"))
    else:
        signals.reports.put(("result", role, index, result))


class PublishBatches:
    """The bytes of the next n publishes, from pre-encoded messages of one length.

    Publish n is `messages[n % K]` (one per routing key). Its sequence stamp names stream
    `first_stream + n % K` and numbers it n // K: each routing key is a stream of its own,
    numbered from 0, so order can be checked per destination queue.
    """

    def __init__(self, messages: Sequence[EncodedMessage], stamp: Stamp, first_stream: int) -> None:
        self._stride = len(messages[0].data)
        if any(len(message.data) != self._stride for message in messages):
            raise ValueError("routing keys of one batch must have the same length")
        self._keys = len(messages)
        self._body_offset = messages[0].body_offset
        self._stamp = stamp
        self._first_stream = first_stream
        self.size = max(1, min(BATCH, BATCH_BYTES // self._stride))  # publishes per write at most
        # Enough whole cycles that the next `size` publishes from any key are one slice; unstamped
        # bodies never change, so it is written again and again without a copy.
        cycles = -(-(self._keys + self.size - 1) // self._keys)
        self._cycles = memoryview(b"".join(message.data for message in messages) * cycles)

    def take(self, first_sequence: int, count: int) -> memoryview | bytearray:
        start = first_sequence % self._keys * self._stride
        chunk = self._cycles[start : start + count * self._stride]
        if self._stamp is Stamp.NONE:
            return chunk
        batch = bytearray(chunk)
        offsets = range(self._body_offset, self._body_offset + count * self._stride, self._stride)
        if self._stamp is Stamp.SEQUENCE:
            pack, keys, first_stream = SEQUENCE_STAMP.pack_into, self._keys, self._first_stream
            for number, offset in enumerate(offsets, first_sequence):
                sequence, key = divmod(number, keys)
                pack(batch, offset, first_stream + key, sequence)
        else:
            pack, now = CLOCK_STAMP.pack_into, time.monotonic_ns()
            for offset in offsets:
                pack(batch, offset, now)
        return batch


class Reads:
    """A hot loop's reads, done the cheapest way its stream allows.

    A plain socket reads with MSG_DONTWAIT and wakes up through a kernel receive timeout,
    with no extra system call per read. TLS and WebSocket streams keep bytes that select
    cannot see and retry reads past a kernel timeout, so they go through socket timeouts.
    """

    def __init__(self, connection: Connection) -> None:
        self.stream = connection.stream
        self.sock = connection.sock
        self.plain = self.stream is self.sock and not isinstance(self.sock, ssl.SSLSocket)

    def now(self) -> bytes | None:
        """What has arrived so far, without waiting; None when nothing has."""
        if self.plain:
            try:
                return self.sock.recv(RECEIVE_SIZE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
        self.stream.settimeout(0.0)
        try:
            return self.stream.recv(RECEIVE_SIZE)
        except NOTHING_YET:
            return None
        finally:
            self.stream.settimeout(None)

    def waiting(self, timeout: float, waiting_for: str) -> bytes:
        if self.plain:
            if not select.select([self.sock], [], [], timeout)[0]:
                raise TimeoutError(f"no {waiting_for} for {timeout:.0f} s")
            return self.sock.recv(RECEIVE_SIZE)
        self.stream.settimeout(timeout)
        try:
            return self.stream.recv(RECEIVE_SIZE)
        except TimeoutError:
            raise TimeoutError(f"no {waiting_for} for {timeout:.0f} s") from None
        finally:
            self.stream.settimeout(None)

    def wake_every_poll(self) -> None:
        """From now on a blocking read gives up after STOP_POLL_SECONDS (BlockingIOError or
        TimeoutError) so that the loop can check whether to stop."""
        if self.plain:
            self.sock.settimeout(None)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, STOP_POLL)
        else:
            self.stream.settimeout(STOP_POLL_SECONDS)


class Pacer:
    """Spreads publishes evenly at a fixed rate from the moment it is created."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._started = time.monotonic()

    def allowance(self, sent: int, wanted: int) -> int:
        """How many may go now (up to `wanted`); sleeps a little and says 0 when none is due."""
        elapsed = time.monotonic() - self._started
        due = int(elapsed * self._rate) - sent
        if due <= 0:
            time.sleep(min(MAX_PACING_SLEEP, (sent + 1) / self._rate - elapsed))
            return 0
        return min(due, wanted)


def produce(spec: LoadSpec, index: int, slot: int, signals: Signals) -> None:
    run_worker("producer", index, signals, lambda ready: _produce(spec, index, slot, signals, ready))


def _produce(spec: LoadSpec, index: int, slot: int, signals: Signals, ready: Callable[[], None]) -> dict[str, Any]:
    connection = connect(spec.address)
    if spec.confirm:
        connection.call(commands.Confirm.Select(), commands.Confirm.SelectOk, CHANNEL)
    keys = spec.keys
    batches = publish_batches(spec, keys, connection.frame_max, index * len(keys))
    confirms = ConfirmTracker()
    stream = connection.stream
    reads = Reads(connection)
    ready()
    stream.settimeout(None)  # the hot loop blocks in sendall and polls for confirms without select
    cpu_before = own_cpu_seconds()
    started = time.monotonic()
    pacer = Pacer(spec.rate) if spec.rate else None
    published = 0
    while not signals.stop_producers.is_set():
        wanted = batches.size if not spec.count else min(batches.size, spec.count - published)
        if wanted == 0:
            break
        if pacer is not None:
            wanted = pacer.allowance(published, wanted)
            if wanted == 0:
                continue
        if spec.confirm:
            wanted = min(wanted, spec.confirm - (published - confirms.settled))
            if wanted <= 0:
                _read_replies(connection, reads, confirms, wait=True)
                continue
        stream.sendall(batches.take(published, wanted))
        published += wanted
        signals.progress[slot] = published
        # Without confirms this still catches a channel.close (a missing exchange, say).
        _read_replies(connection, reads, confirms, wait=False)
    while spec.confirm and confirms.settled < published:
        _read_replies(connection, reads, confirms, wait=True)
    stream.settimeout(DEFAULT_TIMEOUT)
    # One round trip behind the last publish: once it returns the broker has taken them all in.
    connection.call(commands.Queue.Declare(queue=spec.queue, passive=True), commands.Queue.DeclareOk, CHANNEL)
    elapsed = time.monotonic() - started
    cpu = own_cpu_seconds() - cpu_before
    connection.close()
    return {
        "published": published,
        "streams": stream_counts(index * len(keys), len(keys), published),
        "nacked": confirms.nacked,
        "elapsed": elapsed,
        "cpu": cpu,
    }


def publish_batches(spec: LoadSpec, keys: Sequence[str], frame_max: int, first_stream: int) -> PublishBatches:
    properties = PERSISTENT if spec.persistent else None
    body = bytes(spec.size)
    messages = [encode_publish(CHANNEL, spec.exchange, key, body, properties, frame_max) for key in keys]
    return PublishBatches(messages, spec.stamp, first_stream)


def stream_counts(first_stream: int, keys: int, published: int) -> dict[int, int]:
    """How many of `published` publishes, cycling over `keys` routing keys, went to each stream."""
    rounds, extra = divmod(published, keys)
    return {first_stream + key: rounds + (key < extra) for key in range(keys)}


def _read_replies(connection: Connection, reads: Reads, confirms: ConfirmTracker, wait: bool) -> None:
    """Take in whatever the broker sent a producer: confirms, or a close that ends the run."""
    data = reads.waiting(DEFAULT_TIMEOUT, "publisher confirm") if wait else reads.now()
    if data is None:
        return
    if not data:
        raise ConnectionError("the broker closed the socket")
    buffer = connection.buffer
    buffer += data
    del buffer[: confirms.scan(buffer)]


def consume(spec: LoadSpec, index: int, slot: int, signals: Signals) -> None:
    run_worker("consumer", index, signals, lambda ready: _consume(spec, index, slot, signals, ready))


def _consume(spec: LoadSpec, index: int, slot: int, signals: Signals, ready: Callable[[], None]) -> dict[str, Any]:
    connection = connect(spec.address)
    if not spec.autoack:
        connection.qos(spec.prefetch)
    check = SequenceCheck() if spec.stamp is Stamp.SEQUENCE else None
    latencies = LatencyRecorder() if spec.stamp is Stamp.CLOCK else None
    stamp_reader = check or latencies
    scanner = DeliveryScanner(stamp_reader.on_body if stamp_reader is not None else None)
    connection.consume(spec.queue, no_ack=spec.autoack, consumer_tag=f"lavin-perf-{index}")
    stream = connection.stream
    reads = Reads(connection)
    ready()
    reads.wake_every_poll()
    cpu_before = own_cpu_seconds()
    started = time.monotonic()
    buffer = connection.buffer
    first_ns = last_ns = 0
    acked = 0
    while not signals.stop_consumers.is_set():
        try:
            data = stream.recv(RECEIVE_SIZE)
        except (BlockingIOError, TimeoutError):
            continue
        if not data:
            raise ConnectionError("the broker closed the socket")
        now = time.monotonic_ns()
        if latencies is not None:
            latencies.now = now
        counted = scanner.count
        buffer += data
        del buffer[: scanner.scan(buffer)]
        if scanner.count != counted:
            first_ns = first_ns or now
            last_ns = now
            signals.progress[slot] = scanner.count
        if not spec.autoack and scanner.last_tag > acked:
            acked = scanner.last_tag
            stream.sendall(ack_frame(CHANNEL, acked, True))
    elapsed = time.monotonic() - started
    cpu = own_cpu_seconds() - cpu_before
    connection.close()
    return {
        "consumed": scanner.count,
        "first_ns": first_ns,
        "last_ns": last_ns,
        "elapsed": elapsed,
        "cpu": cpu,
        "checks": [check] if check is not None else [],
        "latencies_ns": latencies.samples_ns if latencies is not None else array("q"),
    }
