"""RabbitMQ's JSON for what runs now: connections, channels, consumers, the node and the
overview, out of the broker's snapshots (`lavin.broker.runtime.stats`)."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
from collections.abc import Iterable
from typing import Any, Final, TypeVar

import lavin
from lavin.broker.broker import Broker
from lavin.broker.runtime.alarms import DISK, MEMORY, resident_memory
from lavin.broker.runtime.memory import MemoryBreakdown
from lavin.broker.runtime.stats import (
    OVERALL,
    QUEUE_TOTALS,
    ChannelSnapshot,
    ConnectionSnapshot,
    ConsumerSnapshot,
    vhost_key,
)
from lavin.management.shapes.message_stats import message_stats_json, sampled_message_stats, with_rates
from lavin.transport.certificates import TlsDetails

# A count or a rate, for sums of either.
Number = TypeVar("Number", int, float)

# The RabbitMQ release whose management API this one answers as (tools compare it).
RABBITMQ_VERSION: Final = "3.13.7"
PROTOCOL: Final = "AMQP 0-9-1"
# RabbitMQ's default limit of Erlang processes, reported as proc_total.
PROCESS_LIMIT: Final = 1_048_576


def node_name(broker: Broker) -> str:
    return broker.alarms.node


def channel_name(connection: ConnectionSnapshot, channel: ChannelSnapshot) -> str:
    """RabbitMQ's channel name: the connection's, then the number in parentheses."""
    return f"{connection.name} ({channel.number})"


def connection_json(broker: Broker, connection: ConnectionSnapshot) -> dict[str, Any]:
    stats = broker.stats
    octets = {"recv_oct": connection.recv_oct, "send_oct": connection.send_oct}
    shaped: dict[str, Any] = {
        "name": connection.name,
        "node": node_name(broker),
        "type": "network",
        "vhost": connection.vhost,
        "user": connection.user,
        "user_who_performed_action": connection.user,
        "state": connection.state,
        "channels": len(connection.channels),
        "peer_host": connection.peer_host,
        "peer_port": connection.peer_port,
        "host": connection.host,
        "port": connection.port,
        "protocol": PROTOCOL,
        "auth_mechanism": connection.auth_mechanism,
        **tls_fields(connection.tls),
        "client_properties": connection.client_properties,
        "connected_at": connection.connected_at,
        "timeout": connection.heartbeat,
        "frame_max": connection.frame_max,
        "channel_max": connection.channel_max,
        **with_rates(octets, stats.rates(connection.key, octets)),
    }
    user_provided = connection.client_properties.get("connection_name")
    if user_provided is not None:
        shaped["user_provided_name"] = user_provided
    return shaped


def tls_fields(tls: TlsDetails | None) -> dict[str, Any]:
    """RabbitMQ's ssl_* and peer_cert_* fields (key exchange and hash are not told apart)."""
    return {
        "ssl": tls is not None,
        "ssl_protocol": tls.protocol if tls else None,
        "ssl_key_exchange": None,
        "ssl_cipher": tls.cipher if tls else None,
        "ssl_hash": None,
        "peer_cert_subject": tls.peer_cert_subject if tls else None,
        "peer_cert_issuer": tls.peer_cert_issuer if tls else None,
        "peer_cert_validity": tls.peer_cert_validity if tls else None,
    }


def connection_details(connection: ConnectionSnapshot) -> dict[str, Any]:
    return {"name": connection.name, "peer_host": connection.peer_host, "peer_port": connection.peer_port}


def channel_json(broker: Broker, connection: ConnectionSnapshot, channel: ChannelSnapshot) -> dict[str, Any]:
    return {
        "name": channel_name(connection, channel),
        "number": channel.number,
        "node": node_name(broker),
        "connection_details": connection_details(connection),
        "vhost": connection.vhost,
        "user": connection.user,
        "user_who_performed_action": connection.user,
        "state": channel.state,
        "consumer_count": len(channel.consumers),
        "prefetch_count": channel.prefetch_count,
        "global_prefetch_count": channel.global_prefetch_count,
        "messages_unacknowledged": channel.messages_unacknowledged,
        "messages_unconfirmed": 0,
        "messages_uncommitted": 0,
        "acks_uncommitted": 0,
        "confirm": channel.confirm,
        "transactional": channel.transactional,
        "message_stats": sampled_message_stats(broker.stats, channel.key, channel.counts),
    }


def consumer_json(
    broker: Broker, connection: ConnectionSnapshot, channel: ChannelSnapshot, consumer: ConsumerSnapshot
) -> dict[str, Any]:
    return {
        "consumer_tag": consumer.tag,
        "channel_details": {
            "name": channel_name(connection, channel),
            "number": channel.number,
            "connection_name": connection.name,
            "peer_host": connection.peer_host,
            "peer_port": connection.peer_port,
            "node": node_name(broker),
            "user": connection.user,
        },
        "queue": {"name": consumer.queue, "vhost": connection.vhost},
        "ack_required": consumer.ack_required,
        "prefetch_count": consumer.prefetch_count,
        "exclusive": consumer.exclusive,
        "arguments": consumer.arguments,
        "active": consumer.active,
        "activity_status": "up" if consumer.active else "waiting",
    }


def object_totals(broker: Broker, vhosts: Iterable[str], connections: list[ConnectionSnapshot]) -> dict[str, int]:
    live = [broker.vhosts[name] for name in vhosts if name in broker.vhosts]
    channels = [channel for connection in connections for channel in connection.channels]
    return {
        "connections": len(connections),
        "channels": len(channels),
        "exchanges": sum(len(vhost.exchanges) for vhost in live),
        "queues": sum(len(vhost.queues) for vhost in live),
        "consumers": sum(len(channel.consumers) for channel in channels),
    }


def overview_json(
    broker: Broker,
    vhosts: list[str],
    everyone: list[ConnectionSnapshot],
    connections: list[ConnectionSnapshot],
    everything: bool,
) -> dict[str, Any]:
    """RabbitMQ's overview of `everyone`'s connections. `everything`: the requester sees
    every vhost and connection; else message rates cover `vhosts`, object and queue totals
    `connections` in them (and the queue totals' rates are 0)."""
    stats = broker.stats
    node = node_name(broker)
    if everything:
        message_stats = sampled_message_stats(stats, OVERALL, stats.overall_counts(everyone))
        queue_counts = stats.queue_totals(broker.vhosts, everyone)
    else:
        per_vhost = [(vhost, stats.vhost_counts(vhost, everyone)) for vhost in vhosts]
        message_stats = message_stats_json(
            _summed(counts for _, counts in per_vhost),
            _summed(stats.rates(vhost_key(vhost), counts) for vhost, counts in per_vhost),
        )
        queue_counts = stats.queue_totals(vhosts, connections)
    return {
        "management_version": RABBITMQ_VERSION,
        "rates_mode": "basic",
        "sample_retention_policies": {"global": [600], "basic": [600], "detailed": [600]},
        "exchange_types": [
            {"name": name, "description": "", "enabled": True} for name in sorted(broker.registry.exchange_types)
        ],
        "product_version": lavin.__version__,
        "product_name": "Lavin",
        "rabbitmq_version": RABBITMQ_VERSION,
        "cluster_name": node,
        "erlang_version": "",
        "erlang_full_version": "",
        "disable_stats": False,
        "enable_queue_totals": True,
        "message_stats": message_stats,
        "queue_totals": with_rates(queue_counts, stats.rates(QUEUE_TOTALS if everything else None, queue_counts)),
        "object_totals": object_totals(broker, vhosts, connections),
        "statistics_db_event_queue": 0,
        "node": node,
        "listeners": [
            {"node": node, "protocol": protocol, "ip_address": ip_address, "port": port, "socket_opts": {}}
            for protocol, ip_address, port in broker.listeners
        ],
        "contexts": [],
    }


def _summed(counts: Iterable[dict[str, Number]]) -> dict[str, Number]:
    """Each key's values added up (counts or rates)."""
    totals: dict[str, Number] = {}
    for each in counts:
        for key, value in each.items():
            totals[key] = totals[key] + value if key in totals else value
    return totals


# RabbitMQ's memory categories Lavin has no counterpart of (Erlang's processes, tables and
# allocators): reported as 0, so that tools reading every key find them.
_ERLANG_MEMORY_CATEGORIES: Final = (
    "connection_channels", "connection_other", "queue_slave_procs", "quorum_queue_procs",
    "quorum_queue_dlx_procs", "stream_queue_procs", "stream_queue_replica_reader_procs",
    "stream_queue_coordinator_procs", "plugins", "other_proc", "metrics", "mgmt_db", "mnesia",
    "quorum_ets", "other_ets", "binary", "msg_index", "code", "atom", "allocated_unused",
    "reserved_unallocated",
)  # fmt: skip


def memory_json(breakdown: MemoryBreakdown) -> dict[str, Any]:
    """`GET /api/nodes/{node}/memory`'s `memory`: RabbitMQ's categories, measured by the
    `rss` strategy; Lavin's queues (all types) are `queue_procs`, the rest `other_system`."""
    memory: dict[str, Any] = dict.fromkeys(_ERLANG_MEMORY_CATEGORIES, 0)
    memory |= {
        "connection_readers": breakdown.connection_readers,
        "connection_writers": breakdown.connection_writers,
        "queue_procs": breakdown.queues,
        "other_system": breakdown.other,
        "strategy": "rss",
        "total": {"erlang": breakdown.resident, "rss": breakdown.resident, "allocated": breakdown.resident},
    }
    return memory


def node_json(broker: Broker) -> dict[str, Any]:
    """The one node: its memory, file descriptors, disk and alarms, as RabbitMQ reports them."""
    alarms = broker.alarms
    descriptors = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    try:
        fd_used = len(os.listdir("/proc/self/fd"))
    except OSError:
        fd_used = 0
    return {
        "name": node_name(broker),
        "type": "disc",
        "running": True,
        "being_drained": False,
        "os_pid": str(os.getpid()),
        "mem_used": resident_memory(),
        "mem_limit": alarms.memory_limit,
        "mem_alarm": MEMORY in alarms.active,
        "mem_calculation_strategy": "rss",
        "disk_free": shutil.disk_usage(broker.config.data_dir).free,
        "disk_free_limit": alarms.disk_free_limit,
        "disk_free_alarm": DISK in alarms.active,
        "fd_used": fd_used,
        "fd_total": descriptors,
        "sockets_used": len(broker.connections),
        "sockets_total": descriptors,
        "proc_used": len(asyncio.all_tasks(broker.loop)),
        "proc_total": PROCESS_LIMIT,
        "run_queue": 0,
        "event_loop_lag": round(broker.stats.loop_lag_ms, 3),  # Lavin's: ms the sampler's timer fired late
        "processors": os.cpu_count() or 1,
        "uptime": broker.stats.uptime_ms(),
        "rates_mode": "basic",
        "exchange_types": [
            {"name": name, "description": "", "enabled": True} for name in sorted(broker.registry.exchange_types)
        ],
        "partitions": [],
        "cluster_links": [],
        "applications": [],
        "contexts": [],
        "enabled_plugins": list(broker.config.plugins),
        "config_files": [],
        "log_files": [],
        "net_ticktime": 60,
    }
