"""The public surface for plugins: import this module, never other `lavin` internals.

Exchange-type plugins own only a routing table; queue-type plugins own only storage and
ordering; auth backends answer who a user is. Everything else lives in the core.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn, Protocol, Self

import pluggy
from lavin.broker.arguments import field_type
from lavin.errors import (
    AccessRefused,
    AMQPError,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
)
from lavin.message import Message
from lavin.storage.disk import ensure_directory, fsync_directory, recreate_directory
from lavin.storage.record import message_priority
from lavin.storage.segment_files import list_ids
from lavin.storage.segment_store import SegmentStore
from lavin.storage.stream_store import Retention, StreamStore

hookimpl = pluggy.HookimplMarker("lavin")

Arguments = Mapping[str, Any]
# A routing destination: the core passes its own Queue or Exchange objects; plugins store
# and return them and read nothing but what `destination_identity` gives.
Destination = Hashable


def destination_identity(destination: Destination) -> tuple[str, str]:
    """(name, kind) of a destination, kind being "queue" or "exchange".

    Within a vhost this names the destination in every run of the broker, so a plugin can
    order its destinations the same way before and after a restart, whatever order the
    bindings came in.
    """
    return destination.name, destination.kind  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Binding:
    destination: Destination
    routing_key: str
    arguments: Arguments = field(default_factory=dict, hash=False, compare=False)


ExchangeTypes = Mapping[str, "type[ExchangeType]"]


class ExchangeType(ABC):
    """Routing table of one exchange. `name` must equal the entry-point name."""

    name: ClassVar[str]
    # When True the core holds messages with a positive `x-delay` header (ms), then routes
    # them through this table once the delay is over.
    delays_messages: ClassVar[bool] = False

    def __init__(self, arguments: Arguments) -> None:
        """Raise PreconditionFailed for arguments this type cannot accept."""
        self.arguments = arguments

    @classmethod
    def create(cls, arguments: Arguments, exchange_types: ExchangeTypes) -> Self:
        """Build the table of a new exchange; the core calls this, never `__init__`.

        `exchange_types` maps every installed type name to its class, for types that wrap
        another one. The default ignores it.
        """
        return cls(arguments)

    @abstractmethod
    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Add a binding; return False when an equal one exists already."""

    @abstractmethod
    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Remove a binding; return False when there was none."""

    @abstractmethod
    def route(self, routing_key: str, message: Message) -> Iterable[Destination]:
        """The destinations a message with this routing key goes to (duplicates allowed)."""

    @abstractmethod
    def bindings(self) -> Iterable[Binding]:
        """Every binding, for listing and persistence."""

    def is_bound(self, destination: Destination | None = None) -> bool:
        """Whether any binding exists (to `destination`, when given).

        The core asks on every unbind; tables with many bindings should answer without a scan.
        """
        return any(destination is None or b.destination == destination for b in self.bindings())

    def remove_destination(self, destination: Destination) -> None:
        """Drop every binding to a deleted destination."""
        for binding in [b for b in self.bindings() if b.destination == destination]:
            self.unbind(binding.destination, binding.routing_key, binding.arguments)


class QueueType(ABC):
    """Storage and ordering of one queue's messages.

    Messages are identified by an id the store hands out: an int from 0 to 2**64 - 1, unique
    among the queue's messages until acked. A message is ready (waiting in the queue), then
    taken (delivered, not acked yet), then gone. Ready messages must not be held as one
    Python object each: a store streams them from its segments. The core keeps the taken
    ids, delivery counts, TTL and length limits; the type only stores and orders.
    """

    name: ClassVar[str]

    def __init__(self, path: Path, arguments: Arguments, durable: bool) -> None:
        self.path = path
        self.arguments = arguments
        self.durable = durable

    @abstractmethod
    def push(self, message: Message) -> int:
        """Append a ready message; return its id. Persistent messages of a durable queue
        survive a crash once the fds that the next `flush` returns are synced."""

    @abstractmethod
    def take(self) -> tuple[int, Message, bool] | None:
        """Remove the next ready message: (id, message, redelivered), or None when empty."""

    @abstractmethod
    def peek(self) -> tuple[int, Message, bool] | None:
        """What `take` would return next, left ready; None when empty. The core reads the
        head's expiry and drops the head for length limits with it."""

    @abstractmethod
    def remove(self, message_id: int) -> None:
        """Drop a ready message wherever it waits, as if it was taken and acked (durably,
        like `ack`). Used for expiry out of turn; the id must be ready."""

    @abstractmethod
    def skip(self, message_id: int) -> None:
        """The core delivered `message_id` straight from `push` without `take`: mark it taken."""

    @abstractmethod
    def ack(self, message_id: int) -> None:
        """Forget a taken message for good."""

    @abstractmethod
    def requeue(self, message_ids: Iterable[int]) -> None:
        """Make taken messages ready again, as redelivered, in their original order and
        ahead of the messages never taken (of their priority, for a priority type)."""

    @abstractmethod
    def read(self, message_id: int) -> Message:
        """The message with this id, ready or taken (for dead-lettering and expiry)."""

    @abstractmethod
    def purge(self) -> int:
        """Drop every ready message; return how many."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of ready messages."""

    @property
    @abstractmethod
    def ready_bytes(self) -> int:
        """Body bytes of the ready messages."""

    @abstractmethod
    def flush(self) -> list[int]:
        """Hand buffered writes to the OS; return file descriptors that need an fsync."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release files; the data stays."""

    @abstractmethod
    def delete(self) -> None:
        """Close and remove all data."""


class InvalidArgument(PreconditionFailed):
    """A declare argument a queue type refuses. The core names the queue in the reply, as
    RabbitMQ does: "invalid arg 'x-max-age' for queue 'q' in vhost '/': invalid_max_age"."""

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"invalid arg '{argument}': {reason}")
        self.argument = argument
        self.reason = reason


_DAY_MS = 86_400_000
_DURATION_UNIT_MS = {"Y": 365 * _DAY_MS, "M": 30 * _DAY_MS, "D": _DAY_MS, "h": 3_600_000, "m": 60_000, "s": 1000}


def parse_duration(text: str) -> int | None:
    """Milliseconds of a RabbitMQ duration: a positive integer and one unit of Y M D h m s
    (`7D`, `12h`; a month is 30 days, a year 365). None when `text` is not one."""
    digits, unit = text[:-1], text[-1:]
    if not (digits.isascii() and digits.isdigit()) or unit not in _DURATION_UNIT_MS or not int(digits):
        return None
    return int(digits) * _DURATION_UNIT_MS[unit]


class StreamCursor(Protocol):
    """One consumer's read position in a stream."""

    offset: int  # the offset `next` reads

    def next(self, limit: int) -> tuple[int, Message] | None:
        """(offset, message) at the cursor, then advance; None once the cursor reaches
        `limit`. Offsets deleted by retention are passed over."""


class StreamType(QueueType):
    """An append-only log: the storage of a queue declared with `x-queue-type: stream`.

    `push` appends and returns the message's offset; offsets count up from 0 without gaps
    and are never reused, across restarts and crashes. `read(offset)` returns a kept
    message, `__len__` is the number of kept messages and `ready_bytes` the bytes they
    take. Nothing goes on ack: retention drops the oldest messages, whole segments at a
    time. The core gives each consumer a cursor, tracks acks, and reads only offsets it
    knows are on disk (below what it last passed to `synced`).
    """

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

    # A log has no shared read position and drops nothing per message: the core never
    # calls the queue operations below on a stream.

    def _not_for_streams(self, operation: str) -> NoReturn:
        raise TypeError(f"{operation} is a queue operation; a stream is read through cursors")

    def take(self) -> tuple[int, Message, bool] | None:
        self._not_for_streams("take")

    def peek(self) -> tuple[int, Message, bool] | None:
        self._not_for_streams("peek")

    def remove(self, message_id: int) -> None:
        self._not_for_streams("remove")

    def skip(self, message_id: int) -> None:
        self._not_for_streams("skip")

    def ack(self, message_id: int) -> None:
        self._not_for_streams("ack")

    def requeue(self, message_ids: Iterable[int]) -> None:
        self._not_for_streams("requeue")

    def purge(self) -> int:
        self._not_for_streams("purge")


@dataclass
class User:
    name: str
    tags: tuple[str, ...] = ()
    # vhost -> (configure, write, read) regular expressions
    permissions: dict[str, tuple[str, str, str]] = field(default_factory=dict)


class AuthBackend(ABC):
    """Answers who a user is. Backends are asked in order; the first non-None answer wins."""

    name: ClassVar[str]

    @abstractmethod
    def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        """Return the user, None for "not mine", or raise AccessRefused to deny."""


__all__ = [
    "AMQPError",
    "AccessRefused",
    "Arguments",
    "AuthBackend",
    "Binding",
    "Destination",
    "ExchangeType",
    "ExchangeTypes",
    "InvalidArgument",
    "Message",
    "NotAllowed",
    "NotFound",
    "PreconditionFailed",
    "QueueType",
    "ResourceLocked",
    "Retention",
    "SegmentStore",
    "StreamCursor",
    "StreamStore",
    "StreamType",
    "User",
    "destination_identity",
    "ensure_directory",
    "field_type",
    "fsync_directory",
    "hookimpl",
    "list_ids",
    "message_priority",
    "parse_duration",
    "recreate_directory",
]
