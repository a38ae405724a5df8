"""What a clustered node knows of its cluster, for the management API, `lavin ctl` and the
metrics: the broker shows it, the clustering front-end fills it in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

LEADER = "leader"
FOLLOWER = "follower"


@dataclass(frozen=True)
class ClusterMember:
    name: str  # the node's name, as /api/nodes lists it
    role: str  # LEADER or FOLLOWER
    in_sync: bool  # in the in-sync replicas: every confirmed message is on it
    replication_uri: str  # where followers reach it (its advertised URI)
    amqp: str | None  # host:port of its AMQP listener
    http: str | None  # host:port of its management API
    lag_bytes: int | None = None  # followers, as their leader measures: changes not yet acknowledged
    lag_seconds: float | None = None  # age of the oldest change the follower has not acknowledged


@dataclass(frozen=True)
class EtcdHealth:
    endpoint: str
    healthy: bool
    detail: str  # the version it runs, or why it could not be asked


@dataclass(frozen=True)
class ClusterState:
    this_node: str
    leader: str | None
    members: tuple[ClusterMember, ...]
    in_sync: tuple[str, ...]  # names of the in-sync replicas, as etcd holds them
    etcd: tuple[EtcdHealth, ...]


# The node's current view; asked at request time, never per message.
ClusterStatusSource = Callable[[], ClusterState]
