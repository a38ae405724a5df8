"""The broker's lifetime counters that belong to no object that lives as long: queues and
channels opened and gone, messages dead-lettered, and the sizes of messages published.

They only ever grow, so Prometheus' rates over them hold across deleted queues and closed
channels. All are counted off the per-message path except the message sizes: a channel
holds the broker's `message_size_counts` list and adds to it with two integer increments
per publish, the bucket found from the body size's bit length and one comparison.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

# RabbitMQ's message size buckets (bytes, each an upper bound; the last is +Inf).
MESSAGE_SIZE_BOUNDS: Final = (100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 50_000_000, 100_000_000)
INFINITE_BUCKET: Final = len(MESSAGE_SIZE_BOUNDS)
# `message_size_counts` holds one count per bucket, +Inf's included, then the sum of sizes.
MESSAGE_SIZE_SUM: Final = INFINITE_BUCKET + 1
MAX_BIT_LENGTH: Final = 62  # a body is far smaller; the bounds stay small (unboxed) integers


def _first_buckets() -> tuple[int, ...]:
    """For each bit length, the bucket of the smallest size of that length. A size of that
    length is in that bucket or the next, as no two bounds are within a factor of two."""
    firsts = []
    for bits in range(MAX_BIT_LENGTH + 1):
        smallest = 1 << (bits - 1) if bits else 0
        firsts.append(next((i for i, bound in enumerate(MESSAGE_SIZE_BOUNDS) if smallest <= bound), INFINITE_BUCKET))
    return tuple(firsts)


FIRST_BUCKET_BY_BIT_LENGTH: Final = _first_buckets()
# Each bucket's upper bound, +Inf's as a size no body reaches: a size of a bit length is in
# its first bucket unless it is over that bucket's bound.
BUCKET_UPPER_BOUNDS: Final = (*MESSAGE_SIZE_BOUNDS, (1 << MAX_BIT_LENGTH) - 1)


# RabbitMQ's dead-letter strategies: where a message that died could go. Lavin has no
# at-least-once dead-lettering.
DISABLED: Final = "disabled"  # no dead-letter exchange, or one that does not exist
AT_MOST_ONCE: Final = "at_most_once"
DEAD_LETTER_STRATEGIES: Final = (DISABLED, AT_MOST_ONCE)


class BrokerCounters:
    """Counts since start-up; `dead_lettered` by (queue type, dead-letter strategy, reason)."""

    def __init__(self) -> None:
        self.queues_declared = 0
        self.queues_created = 0
        self.queues_deleted = 0
        self.channels_opened = 0
        self.channels_closed = 0
        self.dead_lettered: Counter[tuple[str, str, str]] = Counter()
        self.message_size_counts = [0] * (MESSAGE_SIZE_SUM + 1)
