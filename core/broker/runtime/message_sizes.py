"""The sizes of published message bodies, in RabbitMQ's histogram buckets.

Counted on every publish, so the class is compiled and its counts are native integers: a
publish adds to the sum and to one bucket after at most eight comparisons (one for the
usual message of up to 100 bytes), where a list of counts would box a new integer each time.
"""

from __future__ import annotations

from typing import Final

# RabbitMQ's message size buckets (bytes, each an upper bound; then +Inf).
MESSAGE_SIZE_BOUNDS: Final = (100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 50_000_000, 100_000_000)


class MessageSizes:
    """Bodies published since start-up, by size bucket, and the sum of their sizes."""

    def __init__(self) -> None:
        self.total_bytes = 0
        self.up_to_100 = 0
        self.up_to_1k = 0
        self.up_to_10k = 0
        self.up_to_100k = 0
        self.up_to_1m = 0
        self.up_to_10m = 0
        self.up_to_50m = 0
        self.up_to_100m = 0
        self.over_100m = 0

    def add(self, size: int) -> None:
        self.total_bytes += size
        if size <= 100:
            self.up_to_100 += 1
        elif size <= 1_000:
            self.up_to_1k += 1
        elif size <= 10_000:
            self.up_to_10k += 1
        elif size <= 100_000:
            self.up_to_100k += 1
        elif size <= 1_000_000:
            self.up_to_1m += 1
        elif size <= 10_000_000:
            self.up_to_10m += 1
        elif size <= 50_000_000:
            self.up_to_50m += 1
        elif size <= 100_000_000:
            self.up_to_100m += 1
        else:
            self.over_100m += 1

    def counts(self) -> list[int]:
        """One count per bucket of MESSAGE_SIZE_BOUNDS, then the +Inf bucket's (not cumulative)."""
        return [
            self.up_to_100,
            self.up_to_1k,
            self.up_to_10k,
            self.up_to_100k,
            self.up_to_1m,
            self.up_to_10m,
            self.up_to_50m,
            self.up_to_100m,
            self.over_100m,
        ]
