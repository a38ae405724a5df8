"""Lavin's cluster gauges, only on a clustered node (a single node has none):

- `<prefix>_cluster_leader`: 1 when this node leads the cluster, else 0;
- `<prefix>_cluster_in_sync_replicas`: how many nodes are in the in-sync replicas;
- `<prefix>_cluster_replication_lag_bytes{node}` and
  `<prefix>_cluster_replication_lag_seconds{node}`: per follower, as its leader measures it
  (changes not yet acknowledged, and the age of the oldest of them).
"""

from __future__ import annotations

from collections.abc import Iterator

from lavin.broker.runtime.cluster_status import FOLLOWER
from lavin.management.prometheus.sources import Snapshot
from prometheus_client.metrics_core import GaugeMetricFamily, Metric


def cluster_metrics(snapshot: Snapshot, prefix: str) -> Iterator[Metric]:
    source = snapshot.broker.cluster
    if source is None:
        return
    state = source()
    name = f"{prefix}_cluster_"
    yield GaugeMetricFamily(
        f"{name}leader", "1 when this node is the cluster's leader", value=int(state.leader == state.this_node)
    )
    yield GaugeMetricFamily(f"{name}in_sync_replicas", "Nodes in the in-sync replicas", value=len(state.in_sync))
    lag_bytes = GaugeMetricFamily(
        f"{name}replication_lag_bytes", "Bytes of changes a follower has not acknowledged", labels=("node",)
    )
    lag_seconds = GaugeMetricFamily(
        f"{name}replication_lag_seconds",
        "Age of the oldest change a follower has not acknowledged, in seconds",
        labels=("node",),
    )
    for member in state.members:
        if member.role != FOLLOWER:
            continue
        if member.lag_bytes is not None:
            lag_bytes.add_metric((member.name,), member.lag_bytes)
        if member.lag_seconds is not None:
            lag_seconds.add_metric((member.name,), member.lag_seconds)
    yield lag_bytes
    yield lag_seconds
