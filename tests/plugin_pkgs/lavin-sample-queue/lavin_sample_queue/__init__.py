"""The `x-lifo` queue type: the message published last is delivered first.

Clients select it with the declare argument `x-queue-type: x-lifo`. A third-party queue
type that imports nothing from Lavin but `lavin.api`, built on the broker's own FIFO
segment store (`StorageToolkit.fifo_store`): the store keeps the messages and makes
durable queues durable, and this class only orders them.

Every message is marked taken in the store as soon as it is pushed (`skip`), and a stack
of ids here says which are ready. The store therefore keeps each message until it is
acked (or removed, or purged, which ack it too), and after a restart it hands back every
persistent message not acked, oldest first: stacked again, they come out newest first.
Durable queues thus follow the durability rules of `lavin.api.queue` with nothing written
by this class.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from pathlib import Path

from lavin.api import Arguments, Message, QueueType, StorageToolkit


class LifoQueue(QueueType):
    name = "x-lifo"

    def __init__(self, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> None:
        super().__init__(path, arguments, durable)
        self._store = storage.fifo_store(path, durable)
        self._ready = array("Q")  # ready ids, the next to take last: 8 bytes a message
        self._ready_bytes = 0
        self._redelivered: set[int] = set()  # ready ids that were taken before
        # Taken ids by when they were taken, so that requeued ones come back in that order.
        self._taken: dict[int, int] = {}
        self._takes = 0
        self._last_push = (-1, 0)  # id and body size of the message pushed last, for skip
        while (item := self._store.take()) is not None:  # what a durable store recovered
            message_id, message, redelivered = item
            self._make_ready(message_id, len(message.body), redelivered)

    @classmethod
    def create(cls, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> LifoQueue:
        return cls(path, arguments, durable, storage)

    def push(self, message: Message) -> int:
        message_id = self._store.push(message)
        self._store.skip(message_id)
        self._make_ready(message_id, len(message.body), redelivered=False)
        self._last_push = (message_id, len(message.body))
        return message_id

    def take(self) -> tuple[int, Message, bool] | None:
        if not self._ready:
            return None
        message_id = self._ready.pop()
        message = self._store.read(message_id)
        self._ready_bytes -= len(message.body)
        self._mark_taken(message_id)
        return message_id, message, self._pop_redelivered(message_id)

    def peek(self) -> tuple[int, Message, bool] | None:
        if not self._ready:
            return None
        message_id = self._ready[-1]
        return message_id, self._store.read(message_id), message_id in self._redelivered

    def skip(self, message_id: int) -> None:
        last_id, body_size = self._last_push
        if message_id != last_id or not self._ready or self._ready[-1] != message_id:
            raise ValueError(f"message {message_id} is not the one just pushed")
        self._ready.pop()
        self._ready_bytes -= body_size
        self._mark_taken(message_id)

    def remove(self, message_id: int) -> None:
        if self._ready and self._ready[-1] == message_id:
            self._ready.pop()
        else:
            self._ready.remove(message_id)  # a scan, but only for expiry out of turn
        self._ready_bytes -= len(self._store.read(message_id).body)
        self._pop_redelivered(message_id)
        self._store.ack(message_id)

    def ack(self, message_id: int) -> None:
        del self._taken[message_id]
        self._store.ack(message_id)

    def requeue(self, message_ids: Iterable[int]) -> None:
        # The one taken first goes on top of the stack, so they come back in the order they left.
        for message_id in sorted(message_ids, key=self._taken.__getitem__, reverse=True):
            del self._taken[message_id]
            self._make_ready(message_id, len(self._store.read(message_id).body), redelivered=True)

    def read(self, message_id: int) -> Message:
        return self._store.read(message_id)

    def purge(self) -> int:
        count = len(self._ready)
        for message_id in self._ready:
            self._store.ack(message_id)
        self._ready = array("Q")
        self._ready_bytes = 0
        self._redelivered.clear()
        return count

    def __len__(self) -> int:
        return len(self._ready)

    @property
    def ready_bytes(self) -> int:
        return self._ready_bytes

    def flush(self) -> list[int]:
        return self._store.flush()

    def close(self) -> None:
        self._store.close()

    def delete(self) -> None:
        self._store.delete()

    def _make_ready(self, message_id: int, body_size: int, redelivered: bool) -> None:
        self._ready.append(message_id)
        self._ready_bytes += body_size
        if redelivered:
            self._redelivered.add(message_id)

    def _mark_taken(self, message_id: int) -> None:
        self._taken[message_id] = self._takes
        self._takes += 1

    def _pop_redelivered(self, message_id: int) -> bool:
        if message_id in self._redelivered:
            self._redelivered.remove(message_id)
            return True
        return False
