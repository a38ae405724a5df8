"""Shovel and federation link metrics, read from the links when a scrape asks.

RabbitMQ's plugins (rabbitmq_shovel_prometheus, rabbitmq_federation_prometheus) count the
links by status: `<prefix>_shovel_dynamic{status}` and `<prefix>_federation_links{status}`.
Lavin adds, per link, the messages it forwarded since the broker started and its state as
one 0/1 gauge per state, so that an alert can ask for `state="running"} == 0`:

- `<prefix>_shovel_messages_forwarded_total`, `<prefix>_shovel_state` (labels vhost, shovel);
- `<prefix>_federation_link_messages_forwarded_total`, `<prefix>_federation_link_state`
  (labels vhost, type, exchange, queue, upstream: the one of exchange or queue the link
  does not federate is empty).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Final

from lavin.broker.links.federation import EXCHANGE
from lavin.broker.links.link import ERROR, PAUSED, RUNNING, STARTING, TERMINATED
from lavin.management.prometheus.sources import Snapshot
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

STATES: Final = (STARTING, RUNNING, PAUSED, ERROR, TERMINATED)
SHOVEL_LABELS: Final = ("vhost", "shovel")
FEDERATION_LABELS: Final = ("vhost", "type", "exchange", "queue", "upstream")

LinkRow = tuple[tuple[str, ...], str, int]  # labels, state, messages forwarded


def link_metrics(snapshot: Snapshot, prefix: str) -> Iterator[Metric]:
    shovels = list(_shovels(snapshot))
    federation = list(_federation_links(snapshot))
    yield _by_status(f"{prefix}_shovel_dynamic", "Current number of dynamic shovels.", shovels)
    yield _by_status(f"{prefix}_federation_links", "Current number of federation links.", federation)
    yield from _per_link(f"{prefix}_shovel", "shovel", SHOVEL_LABELS, shovels)
    yield from _per_link(f"{prefix}_federation_link", "federation link", FEDERATION_LABELS, federation)


def _shovels(snapshot: Snapshot) -> Iterator[LinkRow]:
    for vhost in snapshot.vhosts():
        shovels = vhost.links.shovels
        for name, link in shovels.links.items():
            yield (vhost.name, name), link.state, link.counters.forwarded
        for name in shovels.broken:  # stored, but its endpoint is not installed
            yield (vhost.name, name), TERMINATED, 0


def _federation_links(snapshot: Snapshot) -> Iterator[LinkRow]:
    for vhost in snapshot.vhosts():
        for federated, link in vhost.links.federation.links.items():
            exchange, queue = (federated.name, "") if federated.kind == EXCHANGE else ("", federated.name)
            labels = (vhost.name, federated.kind, exchange, queue, link.upstream.name)
            yield labels, link.link.state, link.link.counters.forwarded


def _by_status(name: str, help_text: str, rows: list[LinkRow]) -> Metric:
    """RabbitMQ's count of links per status; only the statuses some link is in."""
    gauge = GaugeMetricFamily(name, help_text, labels=("status",))
    for status, count in sorted(Counter(state for _, state, _ in rows).items()):
        gauge.add_metric((status,), count)
    return gauge


def _per_link(name: str, what: str, labels: tuple[str, ...], rows: list[LinkRow]) -> Iterator[Metric]:
    forwarded = CounterMetricFamily(
        f"{name}_messages_forwarded", f"Messages a {what} handed to its destination since start-up", labels=labels
    )
    state = GaugeMetricFamily(
        f"{name}_state", f"1 for the state a {what} is in, 0 for the others", labels=(*labels, "state")
    )
    for link_labels, link_state, count in rows:
        forwarded.add_metric(link_labels, count)
        for each in STATES:
            state.add_metric((*link_labels, each), int(each == link_state))
    yield forwarded
    yield state
