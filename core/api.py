"""The public surface for plugins: import this module, never other `lavin` internals.

Exchange-type plugins own only a routing table; queue-type plugins own only storage and
ordering; auth backends answer who a user is. Everything else lives in the core.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pluggy

from lavin.errors import (
    AccessRefused,
    AMQPError,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
)
from lavin.message import Message
from lavin.storage.segment_store import SegmentStore

hookimpl = pluggy.HookimplMarker("lavin")

Arguments = Mapping[str, Any]
# A routing destination: the core passes its own Queue or Exchange objects; plugins only
# store and return them, never look inside.
Destination = Hashable


@dataclass(frozen=True)
class Binding:
    destination: Destination
    routing_key: str
    arguments: Arguments = field(default_factory=dict, hash=False, compare=False)


class ExchangeType(ABC):
    """Routing table of one exchange. `name` must equal the entry-point name."""

    name: ClassVar[str]

    def __init__(self, arguments: Arguments) -> None:
        """Raise PreconditionFailed for arguments this type cannot accept."""
        self.arguments = arguments

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

    Messages are identified by an int id the store hands out. Ready messages must not be
    held as one Python object each: a store streams them from its segments.
    """

    name: ClassVar[str]

    def __init__(self, path: Path, arguments: Arguments, durable: bool) -> None:
        self.path = path
        self.arguments = arguments
        self.durable = durable

    @abstractmethod
    def push(self, message: Message) -> int:
        """Append a ready message; return its id. Persistent messages of a durable queue
        are written so that `sync` makes them survive a crash."""

    @abstractmethod
    def take(self) -> tuple[int, Message, bool] | None:
        """Remove the next ready message: (id, message, redelivered), or None when empty."""

    @abstractmethod
    def skip(self, message_id: int) -> None:
        """The core delivered `message_id` straight from `push` without `take`: mark it taken."""

    @abstractmethod
    def ack(self, message_id: int) -> None:
        """Forget a taken message for good."""

    @abstractmethod
    def requeue(self, message_ids: Iterable[int]) -> None:
        """Put taken messages back at the front, in their original order, as redelivered."""

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
    "Message",
    "NotAllowed",
    "NotFound",
    "PreconditionFailed",
    "QueueType",
    "ResourceLocked",
    "SegmentStore",
    "User",
    "hookimpl",
]
