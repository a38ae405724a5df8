"""The x-lifo queue passes Lavin's queue-type kit, in last-in, first-out order."""

from __future__ import annotations

from collections.abc import Sequence

from lavin.testing import QueueTypeKit
from lavin_sample_queue import LifoQueue


class TestLifoQueue(QueueTypeKit):
    queue_type = LifoQueue

    def expected_order(self, pushed: Sequence[bytes]) -> list[bytes]:
        return list(reversed(pushed))
