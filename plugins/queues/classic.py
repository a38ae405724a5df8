"""The classic queue: messages in publish order, stored in segment files."""

from __future__ import annotations

from pathlib import Path

from lavin.api import Arguments, QueueType, StorageToolkit


class ClassicQueue(QueueType):
    """A FIFO queue: the core's segment store, as it is.

    `create` hands out the store itself rather than a wrapper around it, so the
    per-message calls (push, take, skip, ack) reach the compiled store with no forwarding
    call in between. The class is never instantiated.
    """

    name = "classic"

    @classmethod
    def create(cls, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> QueueType:
        return storage.fifo_store(path, durable)
