"""The classic queue: messages in publish order, stored in segment files."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from lavin.api import Arguments, QueueType, SegmentStore


class ClassicQueue(SegmentStore):
    """A FIFO queue whose every operation is the segment store's own.

    Inheriting instead of wrapping keeps the per-message calls (push, take, skip, ack)
    free of a forwarding call. It is a QueueType by registration rather than by a second
    base class, so that setup.py can compile it as a subclass of the compiled store.
    """

    name: ClassVar[str] = "classic"

    def __init__(self, path: Path, arguments: Arguments, durable: bool) -> None:
        super().__init__(path, durable)
        self.arguments = arguments


QueueType.register(ClassicQueue)
