"""Prometheus metrics under the names of RabbitMQ's prometheus plugin, read from the
broker when a scrape asks for them: nothing is counted per message for them beyond the
statistics counters the management API reads too (`lavin.broker.runtime.stats`) and the
broker's lifetime counters (`lavin.broker.runtime.counters`).

Four views, as RabbitMQ's endpoints:
- aggregated (`/metrics`): each family summed over its objects, without labels, plus the
  totals, alarms, global counters, shovel and federation links (`links.py`, per link in
  both views), the cluster gauges of a clustered node (`cluster.py`) and build information;
- per-object (`/metrics/per-object`): the same with one sample per object (labels vhost,
  queue, exchange, channel, connection);
- detailed (`/metrics/detailed`): only the families asked for, one sample per object,
  named `<prefix>_detailed_*` (`<prefix>_cluster_*` for the cluster-wide families), and
  only the vhosts and queues the filter takes;
- memory breakdown (`/metrics/memory-breakdown`): the node memory families Lavin can
  attribute.

The prefix is `rabbitmq`, so that RabbitMQ's Grafana dashboards work unchanged, or `lavin`.
"""

from __future__ import annotations

import platform
import resource
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from itertools import accumulate
from typing import Final

import lavin
from lavin.broker.policy.arguments import queue_type_name
from lavin.broker.queues.queue import MessageQueue, Queue
from lavin.broker.runtime.alarms import DISK, MEMORY, resident_memory
from lavin.broker.runtime.counters import DEAD_LETTER_STRATEGIES
from lavin.broker.runtime.message_sizes import MESSAGE_SIZE_BOUNDS
from lavin.management.prometheus.cluster import cluster_metrics
from lavin.management.prometheus.links import link_metrics
from lavin.management.prometheus.sources import Snapshot
from lavin.management.shapes.runtime import RABBITMQ_VERSION, channel_name
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector

PREFIXES: Final = ("rabbitmq", "lavin")
AGGREGATED: Final = "aggregated"
PER_OBJECT: Final = "per-object"
DETAILED: Final = "detailed"
MEMORY_BREAKDOWN: Final = "memory-breakdown"

Labels = tuple[str, ...]
Row = tuple[Labels, Sequence[float]]


@dataclass(frozen=True)
class Column:
    name: str  # after the prefix
    kind: str  # gauge or counter
    help: str


@dataclass(frozen=True)
class Family:
    """One of RabbitMQ's metric families: columns of numbers, a row per object."""

    labels: tuple[str, ...]
    columns: tuple[Column, ...]
    rows: Callable[[Snapshot], Iterable[Row]]


def _gauge(name: str, help_text: str) -> Column:
    return Column(name, "gauge", help_text)


def _counter(name: str, help_text: str) -> Column:
    return Column(name, "counter", help_text)


# ---- rows ----------------------------------------------------------------------------------


def _queue_labels(queue: Queue) -> Labels:
    return (queue.vhost.name, queue.name)


def _queue_coarse(snapshot: Snapshot) -> Iterator[Row]:
    for queue in snapshot.queues():
        ready = queue.message_count
        unacked = snapshot.unacked(queue)
        yield _queue_labels(queue), (ready, unacked, ready + unacked)


def _queue_consumers(snapshot: Snapshot) -> Iterator[Row]:
    for queue in snapshot.queues():
        yield _queue_labels(queue), (queue.consumer_count,)


def _queue_metrics(snapshot: Snapshot) -> Iterator[Row]:
    for queue in snapshot.queues():
        held = snapshot.held(queue)
        # A stream's log is read by its consumers' cursors, not by the queue.
        disk = (queue.store.disk_reads, queue.store.disk_writes) if isinstance(queue, MessageQueue) else (0, 0)
        row = (queue.consumer_count, _consumer_utilisation(queue), held.ready_bytes, held.unacked_bytes)
        stored = (held.persistent, held.persistent_bytes, held.ready_ram, held.ready_ram)
        yield _queue_labels(queue), (*row, held.total_bytes, *stored, *disk)


def _consumer_utilisation(queue: Queue) -> float:
    """The share of its consumers that can take a message now (RabbitMQ's is the share of
    time its consumers could); 0 without consumers."""
    consumers = queue.consumers
    return sum(1 for consumer in consumers if consumer.can_take()) / len(consumers) if consumers else 0.0


def _queue_deliveries(snapshot: Snapshot) -> Iterator[Row]:
    for q in snapshot.queues():
        yield _queue_labels(q), (q.got, q.got_no_ack, q.delivered, q.delivered_no_ack, q.redelivered, q.acked)


def _queue_published(snapshot: Snapshot) -> Iterator[Row]:
    for queue in snapshot.queues():
        yield _queue_labels(queue), (queue.published,)


def _exchange_published(snapshot: Snapshot) -> Iterator[Row]:
    for vhost in snapshot.vhosts():
        for exchange in vhost.exchanges.values():
            yield (vhost.name, exchange.name), (exchange.published_in,)


def _channel_metrics(snapshot: Snapshot) -> Iterator[Row]:
    for connection, channel in snapshot.channels():
        row = (len(channel.consumers), channel.messages_unacknowledged, channel.prefetch_count)
        pending = (channel.messages_unconfirmed, channel.messages_uncommitted, channel.acks_uncommitted)
        yield (channel_name(connection, channel),), (*row, channel.global_prefetch_count, *pending)


def _channel_publishes(snapshot: Snapshot) -> Iterator[Row]:
    for connection, channel in snapshot.channels():
        counts = channel.counts
        row = (counts["publish"], counts["confirm"], counts["return_unroutable"], counts["drop_unroutable"])
        yield (channel_name(connection, channel),), row


def _channel_deliveries(snapshot: Snapshot) -> Iterator[Row]:
    keys = ("get", "get_no_ack", "deliver", "deliver_no_ack", "redeliver", "ack", "get_empty")
    for connection, channel in snapshot.channels():
        yield (channel_name(connection, channel),), tuple(channel.counts[key] for key in keys)


def _connection_octets(snapshot: Snapshot) -> Iterator[Row]:
    for connection in snapshot.connections():
        yield (connection.name,), (connection.recv_oct, connection.send_oct)


def _connection_metrics(snapshot: Snapshot) -> Iterator[Row]:
    for c in snapshot.connections():
        yield (c.name,), (c.recv_cnt, c.send_cnt, c.send_pend, len(c.channels))


def _churn(snapshot: Snapshot) -> Iterator[Row]:
    churn = snapshot.churn()
    counters = snapshot.broker.stats.counters
    connections = (churn.opened, churn.closed) if churn is not None else (0, 0)
    channels = (counters.channels_opened, counters.channels_closed)
    yield (), (*connections, *channels, counters.queues_declared, counters.queues_created, counters.queues_deleted)


def _node_coarse(snapshot: Snapshot) -> Iterator[Row]:
    yield (), (snapshot.open_fds(), resident_memory(), snapshot.disk_free())


def _node(snapshot: Snapshot) -> Iterator[Row]:
    alarms = snapshot.broker.alarms
    max_fds = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    yield (), (max_fds, alarms.memory_limit, alarms.disk_free_limit, snapshot.uptime())


def _vhost_status(snapshot: Snapshot) -> Iterator[Row]:
    for vhost in snapshot.vhosts():
        yield (vhost.name,), (1,)


def _exchange_bindings(snapshot: Snapshot) -> Iterator[Row]:
    for exchange in snapshot.exchanges():
        if not exchange.internal:
            yield (exchange.vhost.name, exchange.name, exchange.type_name), (sum(1 for _ in exchange.table.bindings()),)


def _exchange_names(snapshot: Snapshot) -> Iterator[Row]:
    for exchange in snapshot.exchanges():
        if not exchange.internal:
            yield (exchange.vhost.name, exchange.name, exchange.type_name), (1,)


# ---- the catalogue -------------------------------------------------------------------------

QUEUE: Final = ("vhost", "queue")
EXCHANGE: Final = ("vhost", "exchange", "type")
CHANNEL: Final = ("channel",)
CONNECTION: Final = ("connection",)

# RabbitMQ's families (the `family` parameter of /metrics/detailed), each with the
# metrics Lavin has of it, under RabbitMQ's names and help texts.
FAMILIES: Final[dict[str, Family]] = {
    "connection_churn_metrics": Family(
        (),
        (
            _counter("connections_opened_total", "Total number of connections opened"),
            _counter("connections_closed_total", "Total number of connections closed or terminated"),
            _counter("channels_opened_total", "Total number of channels opened"),
            _counter("channels_closed_total", "Total number of channels closed"),
            _counter("queues_declared_total", "Total number of queues declared"),
            _counter("queues_created_total", "Total number of queues created"),
            _counter("queues_deleted_total", "Total number of queues deleted"),
        ),
        _churn,
    ),
    "node_coarse_metrics": Family(
        (),
        (
            _gauge("process_open_fds", "Open file descriptors"),
            _gauge("process_resident_memory_bytes", "Memory used in bytes"),
            _gauge("disk_space_available_bytes", "Disk space available in bytes"),
        ),
        _node_coarse,
    ),
    "node_metrics": Family(
        (),
        (
            _gauge("process_max_fds", "Open file descriptors limit"),
            _gauge("resident_memory_limit_bytes", "Memory high watermark in bytes"),
            _gauge("disk_space_available_limit_bytes", "Free disk space low watermark in bytes"),
            _gauge("erlang_uptime_seconds", "Node uptime"),
        ),
        _node,
    ),
    "queue_coarse_metrics": Family(
        QUEUE,
        (
            _gauge("queue_messages_ready", "Messages ready to be delivered to consumers"),
            _gauge("queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged"),
            _gauge("queue_messages", "Sum of ready and unacknowledged messages - total queue depth"),
        ),
        _queue_coarse,
    ),
    "queue_consumer_count": Family(QUEUE, (_gauge("queue_consumers", "Consumers on a queue"),), _queue_consumers),
    "queue_metrics": Family(
        QUEUE,
        (
            _gauge("queue_consumers", "Consumers on a queue"),
            _gauge("queue_consumer_utilisation", "Consumer utilisation"),
            _gauge("queue_messages_ready_bytes", "Size in bytes of ready messages"),
            _gauge("queue_messages_unacked_bytes", "Size in bytes of all unacknowledged messages"),
            _gauge("queue_messages_bytes", "Size in bytes of ready and unacknowledged messages"),
            _gauge("queue_messages_persistent", "Persistent messages"),
            _gauge("queue_messages_persistent_bytes", "Size in bytes of persistent messages"),
            _gauge("queue_messages_ram", "Ready and unacknowledged messages stored in memory"),
            _gauge("queue_messages_ready_ram", "Ready messages stored in memory"),
            _counter("queue_disk_reads_total", "Total number of times queue read messages from disk"),
            _counter("queue_disk_writes_total", "Total number of times queue wrote messages to disk"),
        ),
        _queue_metrics,
    ),
    "channel_metrics": Family(
        CHANNEL,
        (
            _gauge("channel_consumers", "Consumers on a channel"),
            _gauge("channel_messages_unacked", "Delivered but not yet acknowledged messages"),
            _gauge("consumer_prefetch", "Limit of unacknowledged messages for each consumer"),
            _gauge("channel_prefetch", "Total limit of unacknowledged messages for all consumers on a channel"),
            _gauge("channel_messages_unconfirmed", "Published but not yet confirmed messages"),
            _gauge("channel_messages_uncommitted", "Messages received in a transaction but not yet committed"),
            _gauge("channel_acks_uncommitted", "Message acknowledgements in a transaction not yet committed"),
        ),
        _channel_metrics,
    ),
    "channel_exchange_metrics": Family(
        CHANNEL,
        (
            _counter(
                "channel_messages_published_total", "Total number of messages published into an exchange on a channel"
            ),
            _counter(
                "channel_messages_confirmed_total",
                "Total number of messages published into an exchange and confirmed on the channel",
            ),
            _counter(
                "channel_messages_unroutable_returned_total",
                "Total number of messages published as mandatory into an exchange and returned to the publisher "
                "as unroutable",
            ),
            _counter(
                "channel_messages_unroutable_dropped_total",
                "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
            ),
        ),
        _channel_publishes,
    ),
    "channel_queue_metrics": Family(
        CHANNEL,
        (
            _counter(
                "channel_get_ack_total",
                "Total number of messages fetched with basic.get in manual acknowledgement mode",
            ),
            _counter(
                "channel_get_total", "Total number of messages fetched with basic.get in automatic acknowledgement mode"
            ),
            _counter(
                "channel_messages_delivered_ack_total",
                "Total number of messages delivered to consumers in manual acknowledgement mode",
            ),
            _counter(
                "channel_messages_delivered_total",
                "Total number of messages delivered to consumers in automatic acknowledgement mode",
            ),
            _counter("channel_messages_redelivered_total", "Total number of messages redelivered to consumers"),
            _counter("channel_messages_acked_total", "Total number of messages acknowledged by consumers"),
            _counter("channel_get_empty_total", "Total number of times basic.get operations fetched no message"),
        ),
        _channel_deliveries,
    ),
    "connection_coarse_metrics": Family(
        CONNECTION,
        (
            _counter("connection_incoming_bytes_total", "Total number of bytes received on a connection"),
            _counter("connection_outgoing_bytes_total", "Total number of bytes sent on a connection"),
        ),
        _connection_octets,
    ),
    "connection_metrics": Family(
        CONNECTION,
        (
            _counter("connection_incoming_packets_total", "Total number of packets received on a connection"),
            _counter("connection_outgoing_packets_total", "Total number of packets sent on a connection"),
            _gauge("connection_pending_packets", "Number of packets waiting to be sent on a connection"),
            _gauge("connection_channels", "Channels on a connection"),
        ),
        _connection_metrics,
    ),
    # RabbitMQ labels these by channel, queue and exchange; Lavin counts per queue.
    "channel_queue_exchange_metrics": Family(
        QUEUE,
        (_counter("queue_messages_published_total", "Total number of messages published to queues"),),
        _queue_published,
    ),
    "exchange_metrics": Family(
        ("vhost", "exchange"),
        (_counter("exchange_messages_published_total", "Total number of messages published into an exchange"),),
        _exchange_published,
    ),
    "queue_delivery_metrics": Family(
        QUEUE,
        (
            _counter(
                "queue_get_ack_total",
                "Total number of messages fetched from a queue with basic.get in manual acknowledgement mode",
            ),
            _counter(
                "queue_get_total",
                "Total number of messages fetched from a queue with basic.get in automatic acknowledgement mode",
            ),
            _counter(
                "queue_messages_delivered_ack_total",
                "Total number of messages delivered from a queue to consumers in manual acknowledgement mode",
            ),
            _counter(
                "queue_messages_delivered_total",
                "Total number of messages delivered from a queue to consumers in automatic acknowledgement mode",
            ),
            _counter(
                "queue_messages_redelivered_total", "Total number of messages redelivered from a queue to consumers"
            ),
            _counter("queue_messages_acked_total", "Total number of messages acknowledged by consumers on a queue"),
        ),
        _queue_deliveries,
    ),
}
# Only in /metrics/detailed, named <prefix>_cluster_*.
CLUSTER_FAMILIES: Final[dict[str, Family]] = {
    "vhost_status": Family(("vhost",), (_gauge("vhost_status", "Whether a given vhost is running"),), _vhost_status),
    "exchange_bindings": Family(
        EXCHANGE,
        (_gauge("exchange_bindings", "Number of bindings for an exchange. This value is cluster-wide."),),
        _exchange_bindings,
    ),
    "exchange_names": Family(
        EXCHANGE,
        (_gauge("exchange_name", "Enumerates exchanges without any additional info. This value is cluster-wide."),),
        _exchange_names,
    ),
}
# RabbitMQ's other families: accepted in `family`, with nothing to report in Lavin.
WITHOUT_NUMBERS: Final = frozenset(
    {
        "node_persister_metrics",
        "auth_attempt_metrics",
        "auth_attempt_detailed_metrics",
        "channel_process_metrics",
        "stream_consumer_metrics",
        "queue_exchange_metrics",
    }
)
KNOWN_FAMILIES: Final = frozenset(FAMILIES) | frozenset(CLUSTER_FAMILIES) | WITHOUT_NUMBERS
QUEUE_FAMILIES: Final = frozenset({"queue_coarse_metrics", "queue_consumer_count", "queue_metrics"})
# RabbitMQ's queue types by the names its metrics give them.
RABBITMQ_QUEUE_TYPES: Final = {
    "classic": "rabbit_classic_queue",
    "priority": "rabbit_classic_queue",
    "quorum": "rabbit_quorum_queue",
    "stream": "rabbit_stream_queue",
}
# RabbitMQ's global counters (<prefix>_global_*, per protocol) out of the broker's
# message statistics: the keys of lavin.broker.runtime.stats' counts each one adds up.
GLOBAL_COUNTERS: Final = (
    ("messages_received_total", "Total number of messages received from publishers", ("publish",)),
    (
        "messages_received_confirm_total",
        "Total number of messages received from publishers expecting confirmations",
        ("received_confirm",),
    ),
    ("messages_routed_total", "Total number of messages routed to queues or streams", ("routed",)),
    (
        "messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        ("drop_unroutable",),
    ),
    ("messages_confirmed_total", "Total number of messages confirmed to publishers", ("confirm",)),
    (
        "messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        ("return_unroutable",),
    ),
    (
        "messages_delivered_total",
        "Total number of messages delivered to consumers",
        ("deliver", "deliver_no_ack", "get", "get_no_ack"),
    ),
    (
        "messages_delivered_consume_manual_ack_total",
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
        ("deliver",),
    ),
    (
        "messages_delivered_consume_auto_ack_total",
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
        ("deliver_no_ack",),
    ),
    (
        "messages_delivered_get_manual_ack_total",
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
        ("get",),
    ),
    (
        "messages_delivered_get_auto_ack_total",
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
        ("get_no_ack",),
    ),
    ("messages_redelivered_total", "Total number of messages redelivered to consumers", ("redeliver",)),
    ("messages_acknowledged_total", "Total number of messages acknowledged by consumers", ("ack",)),
    ("messages_get_empty_total", "Total number of times basic.get operations fetched no message", ("get_empty",)),
)
PROTOCOL: Final = ("amqp091",)
# RabbitMQ's dead-lettered counters (<prefix>_global_messages_dead_lettered_<reason>_total).
DEAD_LETTERED: Final = (
    ("delivery_limit", "Total number of messages dead-lettered due to delivery-limit exceeded"),
    ("expired", "Total number of messages dead-lettered due to message TTL exceeded"),
    ("maxlen", "Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx"),
    ("rejected", "Total number of messages dead-lettered due to basic.reject or basic.nack"),
)
DEAD_LETTERING_QUEUE_TYPES: Final = ("rabbit_classic_queue", "rabbit_quorum_queue")


@dataclass(frozen=True)
class Scrape:
    """What one request asks for: the view, the name prefix, and for the detailed view the
    families (the snapshot's filter picks vhosts and queues)."""

    view: str = AGGREGATED
    prefix: str = "rabbitmq"
    families: frozenset[str] = frozenset()


class BrokerCollector(Collector):
    """A prometheus_client collector over one snapshot of the broker."""

    def __init__(self, snapshot: Snapshot, scrape: Scrape) -> None:
        self.snapshot = snapshot
        self.scrape = scrape

    def collect(self) -> Iterator[Metric]:
        prefix = self.scrape.prefix
        if self.scrape.view == DETAILED:
            asked = self.scrape.families
            if "queue_metrics" in asked:  # holds queue_consumer_count's metric
                asked = asked - {"queue_consumer_count"}
            for name in sorted(asked & FAMILIES.keys()):
                yield from _emit(FAMILIES[name], f"{prefix}_detailed_", self.snapshot, per_object=True)
            for name in sorted(asked & CLUSTER_FAMILIES.keys()):
                yield from _emit(CLUSTER_FAMILIES[name], f"{prefix}_cluster_", self.snapshot, per_object=True)
            if asked & QUEUE_FAMILIES:
                yield self._queue_info(f"{prefix}_detailed_")
        elif self.scrape.view == MEMORY_BREAKDOWN:
            yield from self._memory_breakdown()
        else:
            per_object = self.scrape.view == PER_OBJECT
            for name, family in FAMILIES.items():
                # queue_consumer_count is the cheaper part of queue_metrics: as RabbitMQ,
                # only the latter when both are reported.
                if name != "queue_consumer_count":
                    yield from _emit(family, f"{prefix}_", self.snapshot, per_object=per_object)
            yield from self._totals()
            yield from self._alarms()
            yield from self._global()
            yield from link_metrics(self.snapshot, prefix)
            yield from cluster_metrics(self.snapshot, prefix)
            if per_object:
                yield self._queue_info(f"{prefix}_")
        yield from self._identity()

    def _totals(self) -> Iterator[Metric]:
        """RabbitMQ's totals: how many there are of each kind of object."""
        snapshot = self.snapshot
        queues = list(snapshot.queues())
        prefix = self.scrape.prefix
        yield GaugeMetricFamily(
            f"{prefix}_connections", "Connections currently open", value=len(snapshot.connections())
        )
        yield GaugeMetricFamily(
            f"{prefix}_channels", "Channels currently open", value=sum(1 for _ in snapshot.channels())
        )
        consumers = sum(queue.consumer_count for queue in queues)
        yield GaugeMetricFamily(f"{prefix}_consumers", "Consumers currently connected", value=consumers)
        yield GaugeMetricFamily(f"{prefix}_queues", "Queues available", value=len(queues))

    def _memory_breakdown(self) -> Iterator[Metric]:
        """RabbitMQ's node memory families that Lavin has a counterpart of, and the rest of
        the resident memory as its runtime's other memory, so that they add up to it."""
        breakdown = self.snapshot.memory_breakdown()
        prefix = f"{self.scrape.prefix}_memory_"
        for name, help_text, amount in (
            ("classic_queue_erlang_process_bytes", "Classic queue processes footprint in bytes", breakdown.queues),
            (
                "client_connection_reader_bytes",
                "Client connection reader processes footprint in bytes",
                breakdown.connection_readers,
            ),
            (
                "client_connection_writer_bytes",
                "Client connection writer processes footprint in bytes",
                breakdown.connection_writers,
            ),
            ("other_system_bytes", "Other runtime footprint in bytes", breakdown.other),
        ):
            yield GaugeMetricFamily(f"{prefix}{name}", help_text, value=amount)

    def _alarms(self) -> Iterator[Metric]:
        active = self.snapshot.broker.alarms.active
        prefix = f"{self.scrape.prefix}_alarms_"
        yield UnknownMetricFamily(
            f"{prefix}free_disk_space_watermark",
            "is 1 if free disk space watermark alarm is in effect",
            value=int(DISK in active),
        )
        yield UnknownMetricFamily(
            f"{prefix}memory_used_watermark",
            "is 1 if VM memory watermark alarm is in effect",
            value=int(MEMORY in active),
        )

    def _global(self) -> Iterator[Metric]:
        """RabbitMQ's global counters: never going back when a channel closes (its counts
        stay in its vhost's totals)."""
        snapshot = self.snapshot
        counts = snapshot.broker.stats.overall_counts(snapshot.connections())
        prefix = f"{self.scrape.prefix}_global_"
        for name, help_text, keys in GLOBAL_COUNTERS:
            counter = CounterMetricFamily(f"{prefix}{name}", help_text, labels=("protocol",))
            counter.add_metric(PROTOCOL, sum(counts[key] for key in keys))
            yield counter
        consumers = GaugeMetricFamily(f"{prefix}consumers", "Current number of consumers", labels=("protocol",))
        consumers.add_metric(PROTOCOL, sum(queue.consumer_count for queue in snapshot.queues()))
        yield consumers
        # RabbitMQ's publisher: a channel that has published.
        publishers = GaugeMetricFamily(f"{prefix}publishers", "Current number of publishers", labels=("protocol",))
        publishers.add_metric(PROTOCOL, sum(1 for _, channel in snapshot.channels() if channel.counts["publish"]))
        yield publishers
        yield from self._dead_lettered(prefix)
        yield self._message_sizes()

    def _dead_lettered(self, prefix: str) -> Iterator[Metric]:
        counted: Counter[tuple[str, str, str]] = Counter()
        for (kind, strategy, reason), count in self.snapshot.broker.stats.counters.dead_lettered.items():
            counted[(RABBITMQ_QUEUE_TYPES.get(kind, kind), strategy, reason)] += count
        labels = ("queue_type", "dead_letter_strategy")
        for reason, help_text in DEAD_LETTERED:
            counter = CounterMetricFamily(f"{prefix}messages_dead_lettered_{reason}_total", help_text, labels=labels)
            # RabbitMQ's series start at 0 for each queue type and strategy that dead-letters.
            kinds = {kind for kind, _, counted_reason in counted if counted_reason == reason}
            for kind in sorted(kinds | set(DEAD_LETTERING_QUEUE_TYPES)):
                for strategy in DEAD_LETTER_STRATEGIES:
                    counter.add_metric((kind, strategy), counted[(kind, strategy, reason)])
            yield counter
        confirmed = CounterMetricFamily(
            f"{prefix}messages_dead_lettered_confirmed_total",
            "Total number of messages dead-lettered and confirmed by target queues",
            labels=labels,
        )
        confirmed.add_metric(("rabbit_quorum_queue", "at_least_once"), 0)  # Lavin dead-letters at most once
        yield confirmed

    def _message_sizes(self) -> Metric:
        sizes = self.snapshot.broker.stats.counters.message_sizes
        histogram = HistogramMetricFamily(
            f"{self.scrape.prefix}_message_size_bytes",
            "Size of messages received from publishers",
            labels=("protocol",),
        )
        cumulative = list(accumulate(sizes.counts()))
        bounds = [_bucket_label(bound) for bound in MESSAGE_SIZE_BOUNDS] + ["+Inf"]
        histogram.add_metric(PROTOCOL, list(zip(bounds, cumulative, strict=True)), sizes.total_bytes)
        return histogram

    def _queue_info(self, prefix: str) -> Metric:
        info = GaugeMetricFamily(
            f"{prefix}queue_info",
            "A metric with a constant '1' value and labels that provide some queue details",
            labels=("vhost", "queue", "queue_type", "membership"),
        )
        for queue in self.snapshot.queues():
            kind = queue_type_name(queue.arguments)
            info.add_metric((*_queue_labels(queue), RABBITMQ_QUEUE_TYPES.get(kind, kind), "leader"), 1)
        return info

    def _identity(self) -> Iterator[Metric]:
        prefix = self.scrape.prefix
        build = UnknownMetricFamily(
            f"{prefix}_build_info",
            "RabbitMQ & Erlang/OTP version info",
            labels=(
                "product_name",
                "product_version",
                "rabbitmq_version",
                "prometheus_plugin_version",
                "prometheus_client_version",
                "erlang_version",
            ),
        )
        # RabbitMQ names its Erlang/OTP release where Lavin names the Python that runs it.
        runtime = f"Python {platform.python_version()}"
        labels = (
            "Lavin",
            lavin.__version__,
            RABBITMQ_VERSION,
            lavin.__version__,
            version("prometheus_client"),
            runtime,
        )
        build.add_metric(labels, 1)
        yield build
        node = self.snapshot.broker.alarms.node
        identity = UnknownMetricFamily(
            f"{prefix}_identity_info",
            "RabbitMQ node & cluster identity info",
            labels=("rabbitmq_node", "rabbitmq_cluster", "rabbitmq_endpoint"),
        )
        identity.add_metric((node, node, self.scrape.view), 1)
        yield identity


def _bucket_label(bound: int) -> str:
    """A bucket's `le` as Prometheus clients write it (Go's float format), as RabbitMQ's
    dashboard queries it: 100.0 ... 100000.0, then 1e+06, 5e+07."""
    return f"{bound:.1f}" if bound < 1_000_000 else f"{bound:.0e}"


def _emit(family: Family, prefix: str, snapshot: Snapshot, *, per_object: bool) -> Iterator[Metric]:
    rows: list[Row] = list(family.rows(snapshot))
    labels = family.labels
    if not per_object:  # one row of sums, as RabbitMQ aggregates
        sums = [sum(values[index] for _, values in rows) for index in range(len(family.columns))]
        rows, labels = [((), sums)], ()
    for index, column in enumerate(family.columns):
        metric = _metric(column, prefix, labels)
        for label_values, values in rows:
            metric.add_metric(label_values, values[index])
        yield metric


def _metric(column: Column, prefix: str, labels: Sequence[str]) -> GaugeMetricFamily | CounterMetricFamily:
    if column.kind == "counter":
        return CounterMetricFamily(f"{prefix}{column.name}", column.help, labels=labels)
    return GaugeMetricFamily(f"{prefix}{column.name}", column.help, labels=labels)
