"""RabbitMQ's `message_stats` object: each count with its rate,
`{"publish": 10, "publish_details": {"rate": 2.0}, ...}`, plus `deliver_get`, the sum of
deliveries and gets of both acknowledgement modes."""

from __future__ import annotations

from typing import Any, Final

from lavin.broker.queues.queue import Queue
from lavin.broker.routing.exchange import Exchange
from lavin.broker.runtime.stats import GLOBAL_ONLY_KEYS, Counts, MessageStats, vhost_key

DELIVER_GET_PARTS: Final = ("deliver", "deliver_no_ack", "get", "get_no_ack")


def with_rates(counts: Counts, rates: dict[str, float]) -> dict[str, Any]:
    """`{key: count, key_details: {"rate": rate}}` for each key of `counts`."""
    shaped: dict[str, Any] = {}
    for key, value in counts.items():
        shaped[key] = value
        shaped[f"{key}_details"] = {"rate": rates.get(key, 0.0)}
    return shaped


def message_stats_json(counts: Counts, rates: dict[str, float]) -> dict[str, Any]:
    """RabbitMQ's `message_stats` for counts under its names (with their sampled rates)."""
    counts = {key: value for key, value in counts.items() if key not in GLOBAL_ONLY_KEYS}
    if all(part in counts for part in DELIVER_GET_PARTS):
        counts = {**counts, "deliver_get": sum(counts[part] for part in DELIVER_GET_PARTS)}
        rates = {**rates, "deliver_get": sum(rates.get(part, 0.0) for part in DELIVER_GET_PARTS)}
    return with_rates(counts, rates)


def sampled_message_stats(stats: MessageStats, key: object, counts: Counts) -> dict[str, Any]:
    """`message_stats` for the object the sampler knows as `key`, whose counts are `counts` now."""
    return message_stats_json(counts, stats.rates(key, counts))


def object_message_stats(stats: MessageStats, counted: Queue | Exchange) -> dict[str, Any]:
    """A queue's or an exchange's `message_stats`."""
    return sampled_message_stats(stats, counted, counted.message_counts())


def vhost_message_stats(stats: MessageStats, vhost: str) -> dict[str, Any]:
    """A vhost's `message_stats`: its channels' totals, closed ones included."""
    return sampled_message_stats(stats, vhost_key(vhost), stats.vhost_counts(vhost, stats.snapshots()))
