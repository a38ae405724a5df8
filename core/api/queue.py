"""Queue types: how a queue's messages are stored and ordered.

Two kinds share one base. A `QueueType` is a queue in the AMQP sense: messages are taken,
acked or requeued, and gone once acked. A `StreamType` is an append-only log that
consumers read at their own offsets; nothing goes on ack. The core keeps consumers,
delivery tags, TTL, length limits, dead-lettering and flow control; a type only stores.

Every method runs on the event loop and must not block for long. Storage engines come
from the `StorageToolkit` that the core passes to `create`, so a type can build on the
broker's segment files without importing the core.

Durability rules, for types of durable queues (`durable=True`):

1. `push` may buffer. What `flush` hands to the OS and then reports as file descriptors
   is fsynced by the core before any publisher is confirmed or any transaction commits.
   A confirmed persistent message must therefore be in a file whose fd `flush` returned.
2. `flush` raises OSError when it cannot write; the core then nacks every message the
   flush covered and never confirms them.
3. After a crash, `__init__`/`create` on the same path recovers: every message pushed
   before the last successful `flush` + fsync is ready again, except those acked or
   removed before it. A torn tail is cut off, never read as a message.
4. `ack` and `remove` may be lost in a crash (the message comes back as redelivered):
   at-least-once, as in RabbitMQ.

A type of a non-durable queue may keep everything in memory and return [] from `flush`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from lavin.api.arguments import Arguments
from lavin.api.message import Message


class MessageStore(ABC):
    """What queue types and stream types have in common."""

    name: ClassVar[str]
    # A type for durable, shared queues only (stream, quorum): the core refuses a
    # non-durable, exclusive or auto-delete declaration of it with RabbitMQ's texts, before
    # `create` is called.
    durable_only: ClassVar[bool] = False

    def __init__(self, path: Path, arguments: Arguments, durable: bool) -> None:
        self.path = path
        self.arguments = arguments
        self.durable = durable

    @classmethod
    def create(cls, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> MessageStore:
        """Build (or, for a durable queue, recover) the storage of one queue at `path`, a
        directory the type owns. The core calls this, never `__init__`. Raise
        InvalidArgument for a declare argument the type refuses.

        The default calls `cls(path, arguments, durable)`; types that build on the core's
        storage engines override it to use `storage`. What it returns must be an instance
        of the type's kind (`QueueType` or `StreamType`), by subclass or by registration.
        """
        return cls(path, arguments, durable)

    @abstractmethod
    def push(self, message: Message) -> int:
        """Append a message; return its id (a queue's message id, a stream's offset)."""

    @abstractmethod
    def read(self, message_id: int) -> Message:
        """The message with this id, ready or taken (for dead-lettering, expiry and streams)."""

    @abstractmethod
    def __len__(self) -> int:
        """Ready messages of a queue; kept messages of a stream."""

    @property
    @abstractmethod
    def ready_bytes(self) -> int:
        """Body bytes of the messages `__len__` counts."""

    @property
    def disk_reads(self) -> int:
        """Reads of message records from disk so far (RabbitMQ's `disk_reads`, for
        Prometheus); 0 for a type that does not count them."""
        return 0

    @property
    def disk_writes(self) -> int:
        """Writes of message records to disk so far (RabbitMQ's `disk_writes`)."""
        return 0

    @property
    def ready_persistent(self) -> tuple[int, int]:
        """(messages, body bytes) of the ready messages that a restart keeps (RabbitMQ's
        persistent counts); (0, 0) for a type that does not count them."""
        return 0, 0

    @property
    def ready_in_memory(self) -> tuple[int, int]:
        """(messages, body bytes) of the ready messages held in memory rather than read from
        files when delivered (RabbitMQ's ram counts); (0, 0) for a type that does not count
        them."""
        return 0, 0

    def taken_totals(self, message_ids: Iterable[int]) -> tuple[int, int, int]:
        """(body bytes, persistent messages, their body bytes) of these delivered, unacked
        messages, asked when statistics are read, never per message. The default reads
        each message and counts none as persistent, as `ready_persistent` does."""
        return sum(len(self.read(message_id).body) for message_id in message_ids), 0, 0

    def flush(self) -> list[int]:
        """Hand buffered writes to the OS; return the fds the core must fsync (rule 1)."""
        return []

    def close(self) -> None:
        """Flush and release files; the data stays for the next start."""

    def delete(self) -> None:
        """Release files and remove all data."""
        self.close()


class QueueType(MessageStore):
    """Storage and ordering of one queue's messages.

    Message ids are ints from 0 to 2**64 - 1, unique among the queue's messages until
    acked. A message is ready (waiting), then taken (delivered, not yet acked), then gone.
    Ready messages should not be held as one Python object each: a queue may hold
    millions. See the module docstring for the durability rules.
    """

    @abstractmethod
    def take(self) -> tuple[int, Message, bool] | None:
        """Remove the next ready message: (id, message, redelivered), or None when empty."""

    @abstractmethod
    def peek(self) -> tuple[int, Message, bool] | None:
        """What `take` would return next, left ready; None when empty. The core reads the
        head's expiry and length limits with it."""

    @abstractmethod
    def skip(self, message_id: int) -> None:
        """The core delivered the message `push` just returned straight to a consumer:
        mark it taken without `take`."""

    def push_taken(self, message: Message) -> int:
        """`push` then `skip`: the core delivers the message straight to a consumer, and
        only calls this when no other message is ready. A type may save work here (the
        core's segment store keeps no decoded copy of it)."""
        message_id = self.push(message)
        self.skip(message_id)
        return message_id

    @abstractmethod
    def remove(self, message_id: int) -> None:
        """Drop a ready message wherever it waits, as if taken and acked (expiry out of turn)."""

    @abstractmethod
    def ack(self, message_id: int) -> None:
        """Forget a taken message for good."""

    @abstractmethod
    def requeue(self, message_ids: Iterable[int]) -> None:
        """Make taken messages ready again, as redelivered, in their original order and
        ahead of the messages never taken (of their priority, for a priority type)."""

    @abstractmethod
    def purge(self) -> int:
        """Drop every ready message; return how many."""


@dataclass(frozen=True)
class Retention:
    """How much of a log to keep; None means no limit of that kind."""

    max_length: int | None = None  # messages
    max_bytes: int | None = None  # segment bytes
    max_age_ms: int | None = None  # a segment goes once its newest message is older


class StreamCursor(Protocol):
    """One consumer's read position in a stream."""

    offset: int  # the offset `next` reads

    def next(self, limit: int) -> tuple[int, Message] | None:
        """(offset, message) at the cursor, then advance; None once the cursor reaches
        `limit`. Offsets deleted by retention are passed over."""


class StreamType(MessageStore):
    """An append-only log: the storage of a queue declared with `x-queue-type: stream`.

    `push` appends and returns the message's offset; offsets count up from 0 without gaps
    and are never reused, across restarts and crashes. `read(offset)` returns a kept
    message. Retention drops the oldest messages, whole segments at a time. The core gives
    each consumer a cursor, tracks acks, and reads only offsets it knows are on disk (below
    what it last passed to `synced`).
    """

    durable_only = True

    @property
    @abstractmethod
    def first_offset(self) -> int:
        """Offset of the oldest kept message; the offset of the next push when empty."""

    @property
    @abstractmethod
    def written_offset(self) -> int:
        """Messages below this offset were handed to the OS (by `flush` or a roll-over)."""

    @abstractmethod
    def synced(self, offset: int) -> None:
        """The fds that `flush` returned were fsynced: messages below `offset` are on disk."""

    @abstractmethod
    def offset_at(self, timestamp: int) -> int:
        """The first offset whose message arrived at or after `timestamp` (ms since the
        epoch), or the next offset when none did. Found without reading the whole log."""

    @abstractmethod
    def cursor(self, offset: int) -> StreamCursor:
        """A new read position at `offset`."""

    @abstractmethod
    def enforce_retention(self) -> None:
        """Drop what the retention limits no longer allow. The core calls this once a
        minute, so that an age limit applies to an idle stream too."""

    def apply_retention_policy(self, policy: Retention) -> None:
        """A policy's `max-length-bytes` and `max-age` (None: the policy sets none), which win
        over the declare arguments, as in RabbitMQ; an empty Retention removes the policy's
        effect. Apply it now. By default a store keeps the retention it was created with."""


class StorageToolkit(Protocol):
    """The core's storage engines, handed to `MessageStore.create`."""

    @property
    def max_stream_segment_size(self) -> int:
        """The largest segment a stream store accepts, in bytes."""

    def fifo_store(self, path: Path, durable: bool) -> QueueType:
        """A FIFO queue in segment files at `path` (the classic queue's storage), recovered
        when durable data is there."""

    def stream_store(self, path: Path, segment_size: int | None, retention: Retention) -> StreamType:
        """An append-only log in segment files at `path`, recovered when data is there."""

    def ensure_directory(self, path: Path) -> None:
        """Create `path` (and parents) durably: the new entries are fsynced."""

    def recreate_directory(self, path: Path) -> None:
        """Make `path` an empty directory, removing what was there."""

    def numbered_entries(self, directory: Path, prefix: str, digits: int) -> list[int]:
        """The numbers N of the entries named `prefix` + N (`digits` digits) in `directory`,
        ascending."""
