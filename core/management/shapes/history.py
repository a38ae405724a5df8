"""RabbitMQ's sample histories, which its UI's charts ask for: with `msg_rates_age` and
`msg_rates_incr` (message rates) or `lengths_age` and `lengths_incr` (queue lengths), in
seconds, each `*_details` object gains `samples` (newest first, one every `incr` seconds
over the last `age`: `{"sample": count, "timestamp": ms}`), and with two samples or more
`avg_rate` (per second between the oldest and the newest) and `avg` (of the samples)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from lavin.broker.runtime.stats import Counts, MessageStats, Sample
from lavin.management.shapes.access import BadRequest
from lavin.management.shapes.message_stats import DELIVER_GET_PARTS

# Points one range may ask for: RabbitMQ's UI asks for 12 (60 s every 5 s); a day every
# minute is 1440.
MAX_POINTS: Final = 1440


@dataclass(frozen=True)
class SampleRange:
    """The last `age_ms`, a point every `incr_ms`."""

    age_ms: int
    incr_ms: int

    @classmethod
    def parse(cls, query: Mapping[str, str], prefix: str) -> SampleRange | None:
        """`{prefix}_age` and `{prefix}_incr` from a query string; None when neither is given."""
        age, incr = query.get(f"{prefix}_age"), query.get(f"{prefix}_incr")
        if age is None and incr is None:
            return None
        if age is None or incr is None:
            raise BadRequest(f"{prefix}_age and {prefix}_incr must be given together")
        if not (age.isdigit() and incr.isdigit()) or int(incr) == 0:
            raise BadRequest(f"{prefix}_age and {prefix}_incr must be whole numbers of seconds, incr above 0")
        if int(age) // int(incr) > MAX_POINTS:
            raise BadRequest(f"{prefix}_age / {prefix}_incr must be at most {MAX_POINTS} samples")
        return cls(int(age) * 1000, int(incr) * 1000)

    def points(self, history: Iterable[Sample], now_ms: int) -> list[Sample]:
        """The counts at each point of the range, newest first: the last change at or before
        it. Points before the first kept change are left out."""
        changes = list(history)
        last = now_ms - now_ms % self.incr_ms
        found: list[Sample] = []
        at = len(changes) - 1
        point = last
        while point >= last - self.age_ms and at >= 0:
            while at >= 0 and changes[at][0] > point:
                at -= 1
            if at >= 0:
                found.append((point, changes[at][1]))
            point -= self.incr_ms
        return found


def _count(counts: Counts, name: str) -> int:
    if name == "deliver_get":
        return sum(counts.get(part, 0) for part in DELIVER_GET_PARTS)
    return counts.get(name, 0)


def add_samples(shaped: dict[str, Any], points: list[Sample]) -> None:
    """Give each `name_details` of `shaped` whose `name` the points count its samples."""
    counted = {name for _, counts in points for name in counts}
    if any(part in counted for part in DELIVER_GET_PARTS):
        counted.add("deliver_get")
    for name in counted:
        details = shaped.get(f"{name}_details")
        if not isinstance(details, dict):
            continue
        values = [(at, _count(counts, name)) for at, counts in points]
        details["samples"] = [{"sample": value, "timestamp": at} for at, value in values]
        if len(values) > 1:
            (newest_at, newest), (oldest_at, oldest) = values[0], values[-1]
            details["avg_rate"] = (newest - oldest) * 1000 / (newest_at - oldest_at)
            details["avg"] = sum(value for _, value in values) / len(values)


@dataclass(frozen=True)
class Histories:
    """The ranges a request asks for, and the sampler to read them from."""

    stats: MessageStats
    msg_rates: SampleRange | None
    lengths: SampleRange | None
    now_ms: int

    @classmethod
    def asked(cls, query: Mapping[str, str], stats: MessageStats) -> Histories:
        return cls(
            stats, SampleRange.parse(query, "msg_rates"), SampleRange.parse(query, "lengths"), int(time.time() * 1000)
        )

    def add_msg_rates(self, message_stats: dict[str, Any], key: object) -> None:
        """Samples of the counters the sampler keeps under `key`, if the request asks."""
        if self.msg_rates is not None:
            add_samples(message_stats, self.msg_rates.points(self.stats.history(key), self.now_ms))

    def add_lengths(self, shaped: dict[str, Any], key: object) -> None:
        """Samples of the lengths the sampler keeps under `key`, if the request asks."""
        if self.lengths is not None:
            add_samples(shaped, self.lengths.points(self.stats.history(key), self.now_ms))
