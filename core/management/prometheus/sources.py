"""What the Prometheus families read, taken from the broker when a scrape asks: queues,
exchanges, the snapshots of connections and channels (`lavin.broker.runtime.stats`), the
connections opened and closed since start-up, and the process itself.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from lavin.api import hookimpl
from lavin.api.hooks import ConnectionInfo
from lavin.broker.broker import Broker
from lavin.broker.queues.queue import Queue
from lavin.broker.routing.exchange import Exchange
from lavin.broker.runtime.memory import MemoryBreakdown, memory_breakdown
from lavin.broker.runtime.stats import ChannelSnapshot, ConnectionSnapshot
from lavin.broker.vhost import VHost
from lavin.management.shapes.held_messages import HeldMessages, held_messages, unacked_deliveries

CHURN_PLUGIN: Final = "lavin.management.connection-churn"


class ConnectionChurn:
    """Counts AMQP connections opened and closed (RabbitMQ's connection churn), through
    the connection hooks: a count per connection, nothing per message."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0

    @hookimpl
    def lavin_connection_opened(self, connection: ConnectionInfo) -> None:
        self.opened += 1

    @hookimpl
    def lavin_connection_closed(self, connection: ConnectionInfo) -> None:
        self.closed += 1

    def register(self, broker: Broker) -> None:
        broker.registry.plugin_manager.register(self, name=CHURN_PLUGIN)

    def unregister(self, broker: Broker) -> None:
        plugin_manager = broker.registry.plugin_manager
        if plugin_manager.is_registered(self):
            plugin_manager.unregister(self)

    @staticmethod
    def of(broker: Broker) -> ConnectionChurn | None:
        """The broker's, once its management plane runs."""
        plugin = broker.registry.plugin_manager.get_plugin(CHURN_PLUGIN)
        return plugin if isinstance(plugin, ConnectionChurn) else None


@dataclass(frozen=True)
class ObjectFilter:
    """Which objects `/metrics/detailed` reports on: some vhosts, the queues whose names the
    request's regular expression matched (None: all)."""

    vhosts: frozenset[str] | None = None
    queue_names: frozenset[str] | None = None

    def takes_vhost(self, name: str) -> bool:
        return self.vhosts is None or name in self.vhosts

    def takes_queue(self, name: str) -> bool:
        return self.queue_names is None or name in self.queue_names


@dataclass
class Snapshot:
    """One scrape's reading of the broker; what costs a walk is done once, when asked."""

    broker: Broker
    filter: ObjectFilter = field(default_factory=ObjectFilter)
    _connections: list[ConnectionSnapshot] | None = None
    _unacked: dict[Queue, list[int]] | None = None

    def vhosts(self) -> Iterator[VHost]:
        for name, vhost in self.broker.vhosts.items():
            if self.filter.takes_vhost(name):
                yield vhost

    def queues(self) -> Iterator[Queue]:
        for vhost in self.vhosts():
            for name, queue in vhost.queues.items():
                if self.filter.takes_queue(name):
                    yield queue

    def exchanges(self) -> Iterator[Exchange]:
        """Named exchanges: the default one is left out, as RabbitMQ's families do."""
        for vhost in self.vhosts():
            for name, exchange in vhost.exchanges.items():
                if name:
                    yield exchange

    def connections(self) -> list[ConnectionSnapshot]:
        """Open connections (connection.open done) of every vhost."""
        if self._connections is None:
            self._connections = self.broker.stats.snapshots()
        return self._connections

    def channels(self) -> Iterator[tuple[ConnectionSnapshot, ChannelSnapshot]]:
        for connection in self.connections():
            for channel in connection.channels:
                yield connection, channel

    def unacked(self, queue: Queue) -> int:
        """Messages of `queue` delivered and not yet acknowledged, on every channel."""
        return len(self._unacked_ids(queue))

    def held(self, queue: Queue) -> HeldMessages:
        """Its bytes, persistent messages and messages in memory."""
        return held_messages(queue, self._unacked_ids(queue))

    def _unacked_ids(self, queue: Queue) -> list[int]:
        if self._unacked is None:
            self._unacked = unacked_deliveries(self.connections())
        return self._unacked.get(queue, [])

    def churn(self) -> ConnectionChurn | None:
        return ConnectionChurn.of(self.broker)

    def memory_breakdown(self) -> MemoryBreakdown:
        return memory_breakdown(self.broker.alarms, self.connections())

    # ---- the process ---------------------------------------------------------------------

    def disk_free(self) -> int:
        return shutil.disk_usage(self.broker.config.data_dir).free

    @staticmethod
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir holds

    @staticmethod
    def uptime() -> float:
        """Seconds since the process started (RabbitMQ's node uptime is its VM's)."""
        with open("/proc/self/stat", encoding="ascii") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as uptime:
            system_uptime = float(uptime.read().split()[0])
        return system_uptime - int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
