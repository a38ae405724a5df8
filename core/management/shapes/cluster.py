"""The cluster as the management API shows it: `/api/cluster` (Lavin's own) and the fields
Lavin adds to every node of `/api/nodes`. A single node is shown as a cluster of one, its
leader, so that the shapes do not depend on clustering."""

from __future__ import annotations

from typing import Any

from lavin.broker.broker import Broker
from lavin.broker.runtime.cluster_status import LEADER, ClusterMember, ClusterState


def cluster_state_of(broker: Broker, node: str) -> ClusterState:
    """What the clustering node reports, or a cluster of this one node (named `node`)."""
    if broker.cluster is not None:
        return broker.cluster()
    listening = {protocol: f"{address}:{port}" for protocol, address, port in reversed(broker.listeners)}
    alone = ClusterMember(node, LEADER, True, "", listening.get("amqp"), listening.get("http"))
    return ClusterState(node, node, (alone,), (node,), ())


def cluster_json(state: ClusterState, *, clustering: bool) -> dict[str, Any]:
    return {
        "clustering": clustering,
        "this_node": state.this_node,
        "leader": state.leader,
        "nodes": [member_json(member) for member in state.members],
        "in_sync_replicas": list(state.in_sync),
        "etcd": [{"endpoint": one.endpoint, "healthy": one.healthy, "detail": one.detail} for one in state.etcd],
    }


def member_json(member: ClusterMember) -> dict[str, Any]:
    return {
        "name": member.name,
        "role": member.role,
        "in_sync": member.in_sync,
        "replication_uri": member.replication_uri or None,
        "amqp": member.amqp,
        "http": member.http,
        "lag_bytes": member.lag_bytes,
        "lag_seconds": member.lag_seconds,
    }


def role_fields(member: ClusterMember) -> dict[str, Any]:
    """Lavin's fields of a node object of `/api/nodes`; no lag for the leader."""
    leads = member.role == LEADER
    return {
        "cluster_role": member.role,
        "in_sync": member.in_sync,
        "replication_lag_bytes": None if leads else member.lag_bytes,
        "replication_lag_seconds": None if leads else member.lag_seconds,
    }


def other_node_json(member: ClusterMember) -> dict[str, Any]:
    """A node this one knows only through the cluster: RabbitMQ's node fields that can be
    known from here, and Lavin's."""
    return {
        "name": member.name,
        "type": "disc",
        "running": True,
        "being_drained": False,
        "partitions": [],
        "cluster_links": [],
        **role_fields(member),
    }


def member_named(state: ClusterState, name: str) -> ClusterMember | None:
    return next((member for member in state.members if member.name == name), None)
