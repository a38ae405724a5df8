"""Publisher flow control: how a queue holds back a publisher that outruns its consumers.

A publish into a queue whose consumers wait behind a growing backlog marks the publisher
slowed; at the end of the read that carried it, the publisher stops reading from its
socket and each such queue holds it until deliveries catch up (or the consumers stall).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class HoldsPublishers(Protocol):
    def hold_publisher(self, publisher: PublisherFlow) -> None: ...


class PublisherFlow:
    """One publishing connection's side of flow control; the transport's pause and resume
    are handed in, so the broker never touches a socket."""

    def __init__(self, pause_reading: Callable[[], None], resume_reading: Callable[[], None]) -> None:
        self._pause_reading = pause_reading
        self._resume_reading = resume_reading
        self.slowed_by: set[HoldsPublishers] = set()

    def slow_down(self, queue: HoldsPublishers) -> None:
        self.slowed_by.add(queue)

    def end_of_batch(self) -> None:
        """Stop reading while a queue published to in this batch holds us."""
        self._pause_reading()
        for queue in self.slowed_by:
            queue.hold_publisher(self)
        self.slowed_by.clear()

    def resume(self) -> None:
        self._resume_reading()
