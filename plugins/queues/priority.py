"""The priority queue: higher `priority` property first, FIFO within a priority.

Selected when a queue is declared with `x-max-priority`. Each priority level is a segment
store of its own in a sub-directory `prio.NNN`, opened the first time a message of that
level arrives (or found again at recovery). A message id is `level << 56 | store id`, so
every id names its level and ids never collide across levels.
"""

from __future__ import annotations

import shutil
from bisect import insort
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from lavin.api import (
    AMQPError,
    Arguments,
    Message,
    PreconditionFailed,
    QueueType,
    StorageToolkit,
    message_priority,
)

MAX_SUPPORTED_PRIORITY = 255
_LEVEL_SHIFT = 56
_STORE_ID_MASK = (1 << _LEVEL_SHIFT) - 1
_LEVEL_PREFIX = "prio."

_Argument = TypeVar("_Argument")

# AMQP field-table type names as RabbitMQ reports them for a rejected argument.
_TYPE_NAMES: dict[type, str] = {
    bool: "bool",
    float: "double",
    str: "longstr",
    bytes: "longstr",
    bytearray: "longstr",
    dict: "table",
    list: "array",
    type(None): "void",
}


def max_priority_argument(value: object) -> int:
    """`x-max-priority` checked as RabbitMQ checks it: an integer from 0 to 255."""
    if isinstance(value, bool) or not isinstance(value, int):
        reason = f"{{unacceptable_type,{_TYPE_NAMES.get(type(value), type(value).__name__)}}}"
    elif value < 0:
        reason = f"{{value_negative,{value}}}"
    elif value > MAX_SUPPORTED_PRIORITY:
        reason = f"{{max_value_exceeded,{value}}}"
    else:
        return value
    raise PreconditionFailed(
        f"invalid arg 'x-max-priority': {reason} (expected an integer from 0 to {MAX_SUPPORTED_PRIORITY})"
    )


def _existing_levels(path: Path, storage: StorageToolkit) -> list[int]:
    """The levels with a directory, ascending; a level above 255 would not fit in an id."""
    levels = storage.numbered_entries(path, _LEVEL_PREFIX, 3)
    return [level for level in levels if level <= MAX_SUPPORTED_PRIORITY]


# A level's store is the toolkit's, not a subclass of ours: call its methods by name.
def _skip(store: QueueType, store_id: int) -> None:
    store.skip(store_id)


def _remove(store: QueueType, store_id: int) -> None:
    store.remove(store_id)


def _requeue(store: QueueType, store_ids: list[int]) -> None:
    store.requeue(store_ids)


class PriorityQueue(QueueType):
    """Messages ordered by priority level, each level a FIFO segment store."""

    name = "priority"

    def __init__(self, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> None:
        super().__init__(path, arguments, durable)
        self.max_priority = max_priority_argument(arguments.get("x-max-priority"))
        self._storage = storage
        self._levels: dict[int, QueueType] = {}
        self._ready_levels: list[int] = []  # ascending levels holding ready messages
        self._ready = 0
        self._ready_bytes = 0
        if not durable:
            storage.recreate_directory(path)
            return
        storage.ensure_directory(path)
        for level in _existing_levels(path, storage):
            store = self._open_level(level)
            if not len(store):  # nothing survived: no need to hold its files open
                store.delete()
                del self._levels[level]
                continue
            self._ready_levels.append(level)
            self._ready += len(store)
            self._ready_bytes += store.ready_bytes

    @classmethod
    def create(cls, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> PriorityQueue:
        return cls(path, arguments, durable, storage)

    # -- the queue's operations ------------------------------------------------------------

    def push(self, message: Message) -> int:
        level = message_priority(message.properties)
        level = min(level, self.max_priority)
        store = self._levels.get(level)
        if store is None:
            store = self._open_level(level)
        store_id = store.push(message)
        if store_id > _STORE_ID_MASK:
            store.remove(store_id)
            raise AMQPError(
                f"priority level {level} has used up its message ids (2**24 segments); drain the queue and restart"
            )
        if len(store) == 1:
            insort(self._ready_levels, level)
        self._ready += 1
        self._ready_bytes += len(message.body)
        return level << _LEVEL_SHIFT | store_id

    def take(self) -> tuple[int, Message, bool] | None:
        ready_levels = self._ready_levels
        if not ready_levels:
            return None
        level = ready_levels[-1]
        store = self._levels[level]
        item = store.take()
        assert item is not None, "a ready level is never empty"
        store_id, message, redelivered = item
        if not len(store):
            ready_levels.pop()
        self._ready -= 1
        self._ready_bytes -= len(message.body)
        return level << _LEVEL_SHIFT | store_id, message, redelivered

    def peek(self) -> tuple[int, Message, bool] | None:
        if not self._ready_levels:
            return None
        level = self._ready_levels[-1]
        item = self._levels[level].peek()
        assert item is not None, "a ready level is never empty"
        store_id, message, redelivered = item
        return level << _LEVEL_SHIFT | store_id, message, redelivered

    def skip(self, message_id: int) -> None:
        self._change_ready(message_id >> _LEVEL_SHIFT, _skip, message_id & _STORE_ID_MASK)

    def remove(self, message_id: int) -> None:
        self._change_ready(message_id >> _LEVEL_SHIFT, _remove, message_id & _STORE_ID_MASK)

    def ack(self, message_id: int) -> None:
        self._levels[message_id >> _LEVEL_SHIFT].ack(message_id & _STORE_ID_MASK)

    def requeue(self, message_ids: Iterable[int]) -> None:
        by_level: dict[int, list[int]] = {}
        for message_id in message_ids:
            by_level.setdefault(message_id >> _LEVEL_SHIFT, []).append(message_id & _STORE_ID_MASK)
        for level, store_ids in by_level.items():
            self._change_ready(level, _requeue, store_ids)

    def read(self, message_id: int) -> Message:
        return self._levels[message_id >> _LEVEL_SHIFT].read(message_id & _STORE_ID_MASK)

    def purge(self) -> int:
        count = sum(store.purge() for store in self._levels.values())
        self._ready_levels.clear()
        self._ready = self._ready_bytes = 0
        return count

    def __len__(self) -> int:
        return self._ready

    @property
    def ready_bytes(self) -> int:
        return self._ready_bytes

    def flush(self) -> list[int]:
        fds: set[int] = set()
        for store in self._levels.values():
            fds.update(store.flush())
        return list(fds)

    def close(self) -> None:
        for store in self._levels.values():
            store.close()
        self._levels.clear()

    def delete(self) -> None:
        for store in self._levels.values():
            store.delete()
        self._levels.clear()
        shutil.rmtree(self.path, ignore_errors=True)

    # -- levels ----------------------------------------------------------------------------

    def _open_level(self, level: int) -> QueueType:
        store = self._storage.fifo_store(self.path / f"{_LEVEL_PREFIX}{level:03d}", self.durable)
        self._levels[level] = store
        return store

    def _change_ready(self, level: int, change: Callable[[QueueType, _Argument], None], argument: _Argument) -> None:
        """Apply `change` to one level's store and carry its effect over to the totals."""
        store = self._levels[level]
        was_ready, bytes_before = len(store), store.ready_bytes
        change(store, argument)
        now_ready = len(store)
        self._ready += now_ready - was_ready
        self._ready_bytes += store.ready_bytes - bytes_before
        if was_ready and not now_ready:
            self._ready_levels.remove(level)
        elif now_ready and not was_ready:
            insort(self._ready_levels, level)
