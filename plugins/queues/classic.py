"""The classic queue: messages in publish order, stored in segment files."""

from __future__ import annotations

from pathlib import Path

from lavin.api import Arguments, QueueType, SegmentStore


class ClassicQueue(SegmentStore, QueueType):
    """A FIFO queue whose every operation is the segment store's own.

    Inheriting instead of wrapping keeps the per-message calls (push, take, skip, ack)
    free of a forwarding call.
    """

    name = "classic"

    def __init__(self, path: Path, arguments: Arguments, durable: bool) -> None:
        QueueType.__init__(self, path, arguments, durable)
        SegmentStore.__init__(self, path, durable)
