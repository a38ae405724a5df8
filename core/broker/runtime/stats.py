"""Message-rate statistics: counters on the hot path, rates from a sampler.

Channels, queues, exchanges and connections carry plain integer counters that the hot
path only increments. Every `interval` seconds the sampler reads them all and keeps, per
object, the counts of that sample and the rates since the one before; nothing is timed or
allocated per message. For RabbitMQ's sample histories (`msg_rates_age`, `lengths_age`)
it also keeps each object's last HISTORY_SAMPLES changes: an object that stopped changing
holds one entry, a busy one at most HISTORY_SAMPLES, and a deleted one none. A closed
channel's counts are added to its vhost's retired totals, so vhost and broker totals never
go backwards.

The sampler knows no broker, vhost or queue class: it reads the broker's connections and
vhosts through the ports below (`ObservedConnection`, `ObservedVHost`), handed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lavin.broker.runtime.counters import BrokerCounters
from lavin.transport.certificates import TlsDetails

log = logging.getLogger(__name__)

Counts = dict[str, int]
Rates = dict[str, float]

# Counts a channel keeps for RabbitMQ's global Prometheus counters only: RabbitMQ's
# `message_stats` have no such keys.
GLOBAL_ONLY_KEYS = ("routed", "received_confirm")
# The keys of a channel's counts, as RabbitMQ names them in `message_stats`, then the
# above; vhost and broker totals are their sums.
CHANNEL_KEYS = (
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
    *GLOBAL_ONLY_KEYS,
)
# Changes kept per object: ten minutes at the default interval of 5 s, as RabbitMQ's
# `basic` retention policy keeps.
HISTORY_SAMPLES = 120
OVERALL = "overall"  # the sampler's key for the broker's totals
QUEUE_TOTALS = "queue_totals"  # ... and for the message counts of every queue together


def vhost_key(name: str) -> tuple[str, str]:
    """The sampler's key for a vhost's totals."""
    return ("vhost", name)


def queue_lengths(ready: int, unacked: int) -> Counts:
    """A queue's lengths under RabbitMQ's names."""
    return {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked}


# What an object counted at a wall-clock time (ms since the epoch).
Sample = tuple[int, Counts]


class History:
    """One object's last HISTORY_SAMPLES changes, packed as 64-bit integers (the time, then
    each count in `names` order): 8 bytes a value, where a dict of them takes hundreds."""

    __slots__ = ("_names", "_rows")

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        self._rows = array("q")

    def append(self, at_ms: int, counts: Counts) -> None:
        rows, width = self._rows, len(self._names) + 1
        rows.append(at_ms)
        rows.extend(counts.get(name, 0) for name in self._names)
        if len(rows) > HISTORY_SAMPLES * width:
            del rows[:width]

    def __iter__(self) -> Iterator[Sample]:
        rows, width = self._rows, len(self._names) + 1
        for start in range(0, len(rows), width):
            yield rows[start], dict(zip(self._names, rows[start + 1 : start + width], strict=True))


@dataclass
class ConsumerSnapshot:
    tag: str
    queue: str
    ack_required: bool
    prefetch_count: int
    exclusive: bool
    arguments: dict[str, Any]
    active: bool


@dataclass
class ChannelSnapshot:
    """One channel, read when asked for; `key` is the live channel (the sampler's key)."""

    key: object
    number: int
    state: str
    prefetch_count: int
    global_prefetch_count: int
    messages_unacknowledged: int
    confirm: bool
    transactional: bool
    consumers: list[ConsumerSnapshot]
    counts: Counts
    messages_unconfirmed: int  # published in confirm mode, not yet confirmed or nacked
    messages_uncommitted: int  # published in the open transaction
    acks_uncommitted: int  # acks, nacks and rejects in the open transaction


@dataclass
class ConnectionSnapshot:
    """One client connection, read when asked for; `key` is the live connection, `vhost`
    and `user` are None until it is open."""

    key: object
    peer_host: str
    peer_port: int
    host: str
    port: int
    vhost: str | None
    user: str | None
    state: str
    client_properties: dict[str, Any]
    auth_mechanism: str
    connected_at: int  # ms since the epoch
    heartbeat: int
    frame_max: int
    channel_max: int
    recv_oct: int
    send_oct: int
    recv_cnt: int  # socket reads
    send_cnt: int  # socket writes
    send_pend: int  # bytes waiting in the socket's write buffer
    channels: list[ChannelSnapshot] = field(default_factory=list)
    tls: TlsDetails | None = None  # None: not a TLS connection

    @property
    def name(self) -> str:
        """RabbitMQ's connection name: "peer host:port -> local host:port"."""
        return f"{self.peer_host}:{self.peer_port} -> {self.host}:{self.port}"


class ObservedConnection(Protocol):
    """A client connection as the sampler reads it (the protocol layer's connection)."""

    def snapshot(self) -> ConnectionSnapshot:
        """What it is now, its channels and their consumers included."""


class CountedObject(Protocol):
    """A queue or an exchange: its statistics counters."""

    def message_counts(self) -> Counts:
        """Its counters under RabbitMQ's `message_stats` names."""


class CountedQueue(CountedObject, Protocol):
    @property
    def message_count(self) -> int:
        """Messages ready in it."""

    @property
    def unacked(self) -> int:
        """Messages delivered from it and not yet acknowledged."""


class ObservedVHost(Protocol):
    """A vhost as the sampler reads it: its queues and exchanges by name (`VHost`)."""

    @property
    def queues(self) -> Mapping[str, CountedQueue]: ...

    @property
    def exchanges(self) -> Mapping[str, CountedObject]: ...


class MessageStats:
    """The broker's statistics: the retired counts of closed channels, and the sampler
    that turns counters into rates. `connections` and `vhosts` are the broker's own
    collections, read at each sample."""

    def __init__(
        self, interval: float, connections: Collection[ObservedConnection], vhosts: Mapping[str, ObservedVHost]
    ) -> None:
        self.interval = interval
        self._connections = connections
        self._vhosts = vhosts
        self.retired: dict[str, Counts] = {}  # vhost name -> counts of its closed channels
        self.counters = BrokerCounters()
        # The counts of each object at the last sample, and its rates then (None: all 0).
        # The counts of each object at the last sample, its rates then (None: all 0) and
        # its history (None: no change yet).
        self._samples: dict[object, tuple[Counts, Rates | None, History | None]] = {}
        self._sampled_at = 0.0
        self._started_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.loop_lag_ms = 0.0  # the event loop's lag at the last sample

    # ---- what the protocol layer reports ------------------------------------------------

    def channel_opened(self) -> None:
        self.counters.channels_opened += 1

    def channel_closed(self, vhost: str, counts: Counts) -> None:
        """A channel is gone: what it counted stays in its vhost's totals."""
        self.counters.channels_closed += 1
        retired = self.retired.setdefault(vhost, dict.fromkeys(CHANNEL_KEYS, 0))
        for key, value in counts.items():
            retired[key] += value

    # ---- reading ------------------------------------------------------------------------

    def rates(self, key: object, counts: Counts) -> Rates:
        """The rates of `key` at the last sample; 0.0 for each of `counts` not sampled yet."""
        sample = self._samples.get(key)
        rates = sample[1] if sample is not None else None
        return {name: rates.get(name, 0.0) if rates is not None else 0.0 for name in counts}

    def history(self, key: object) -> Iterable[Sample]:
        """The counts of `key` at its kept changes, oldest first."""
        sample = self._samples.get(key)
        return sample[2] or () if sample is not None else ()

    def snapshots(self) -> list[ConnectionSnapshot]:
        """Every open connection (handshake done), as it is now."""
        snapshots = (connection.snapshot() for connection in list(self._connections))
        return [snapshot for snapshot in snapshots if snapshot.vhost is not None]

    def vhost_counts(self, vhost: str, snapshots: list[ConnectionSnapshot]) -> Counts:
        """A vhost's totals: its closed channels' counts plus its open channels'."""
        totals = dict(self.retired.get(vhost, dict.fromkeys(CHANNEL_KEYS, 0)))
        for channel in _channels(snapshots, vhost):
            for key, value in channel.counts.items():
                totals[key] += value
        return totals

    def overall_counts(self, snapshots: list[ConnectionSnapshot]) -> Counts:
        totals = dict.fromkeys(CHANNEL_KEYS, 0)
        for vhost in {*self.retired, *(s.vhost for s in snapshots if s.vhost is not None)}:
            for key, value in self.vhost_counts(vhost, snapshots).items():
                totals[key] += value
        return totals

    def queue_totals(self, vhosts: Iterable[str], snapshots: list[ConnectionSnapshot]) -> Counts:
        """Messages ready in the queues of `vhosts` and unacknowledged on the channels of
        `snapshots`."""
        queues = (queue for name in vhosts for queue in self._vhosts[name].queues.values())
        ready = sum(queue.message_count for queue in queues)
        unacked = sum(channel.messages_unacknowledged for channel in _channels(snapshots, None))
        return queue_lengths(ready, unacked)

    # ---- sampling -----------------------------------------------------------------------

    def uptime_ms(self) -> int:
        """Milliseconds since the broker started."""
        return int((self._loop.time() - self._started_at) * 1000) if self._loop is not None else 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._sampled_at = self._started_at = loop.time()
        self._task = loop.create_task(self._run(loop))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            # How late the timer fired: what a callback waits behind others on a busy loop.
            self.loop_lag_ms = max(0.0, (loop.time() - due) * 1000)
            try:
                self.sample(loop.time())
            except Exception:  # a bug in the statistics must not stop the broker's
                log.exception("sampling the message statistics failed")

    def sample(self, now: float) -> None:
        """Read every counter; the rates are per second since the previous sample. Objects
        that never counted anything are not kept (many idle queues cost no memory here)."""
        elapsed = max(now - self._sampled_at, 1e-3)
        self._sampled_at = now
        wall_ms = int(time.time() * 1000)
        previous = self._samples
        samples: dict[object, tuple[Counts, Rates | None, History | None]] = {}
        for key, counts in self._every_count():
            before = previous.get(key)
            if before is None:
                if not any(counts.values()):
                    continue
                before = ({}, None, None)
            old, _, history = before
            rates = None
            if counts != old:
                rates = {name: (value - old.get(name, 0)) / elapsed for name, value in counts.items()}
                history = history or History(tuple(counts))
                history.append(wall_ms, counts)
            samples[key] = (counts, rates, history)
        self._samples = samples

    def _every_count(self) -> Iterator[tuple[object, Counts]]:
        snapshots = self.snapshots()
        for snapshot in snapshots:
            yield snapshot.key, {"recv_oct": snapshot.recv_oct, "send_oct": snapshot.send_oct}
        for channel in _channels(snapshots, None):
            yield channel.key, channel.counts
        for name, vhost in self._vhosts.items():
            yield vhost_key(name), self.vhost_counts(name, snapshots)
            for queue in vhost.queues.values():
                # Its lengths with its counters: one entry for both, told apart by name.
                counts = queue.message_counts()
                ready, unacked = queue.message_count, queue.unacked
                counts["messages"], counts["messages_ready"] = ready + unacked, ready
                counts["messages_unacknowledged"] = unacked
                yield queue, counts
            for exchange in vhost.exchanges.values():
                yield exchange, exchange.message_counts()
        yield OVERALL, self.overall_counts(snapshots)
        yield QUEUE_TOTALS, self.queue_totals(self._vhosts, snapshots)


def _channels(snapshots: list[ConnectionSnapshot], vhost: str | None) -> Iterator[ChannelSnapshot]:
    """The channels of `snapshots` in `vhost` (None: in any)."""
    for snapshot in snapshots:
        if vhost is None or snapshot.vhost == vhost:
            yield from snapshot.channels
