"""Exchange types: the routing table of one exchange, and the binding table they build on.

An exchange type maps a routing key (and the message, for types that read headers) to the
destinations bound to it. Following exchange-to-exchange bindings, alternate exchanges,
CC/BCC and delays are the core's work; a type only keeps its bindings and answers `route`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, ClassVar, Protocol, Self

from lavin.api.arguments import Arguments
from lavin.api.message import Message


class Destination(Protocol):
    """Where a binding leads: a queue or an exchange of the same vhost.

    The core hands its own objects to `bind` and expects the same objects back from `route`.
    They hash and compare by identity; a type stores them and reads only `name` and `kind`.
    """

    @property
    def name(self) -> str:
        """The queue's or exchange's name, unique per kind within the vhost."""

    @property
    def kind(self) -> str:
        """ "queue" or "exchange"."""


def destination_identity(destination: Destination) -> tuple[str, str]:
    """(name, kind): names a destination in every run of the broker, so that a type can
    order its destinations the same way before and after a restart, whatever order the
    bindings came in."""
    return destination.name, destination.kind


@dataclass(frozen=True)
class Binding:
    destination: Destination
    routing_key: str
    arguments: Arguments = field(default_factory=dict, hash=False, compare=False)


ExchangeTypes = Mapping[str, "type[ExchangeType]"]


class ExchangeType(ABC):
    """Routing table of one exchange. `name` must equal the entry-point name.

    Runs on the event loop: `route` is called once per published message and must not
    block or do I/O. Bindings are persisted by the core; after a restart the core calls
    `bind` again for each durable one.
    """

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
        """Add a binding; return False when an equal one exists already. Raise an
        AMQPError (e.g. PreconditionFailed) to refuse it, leaving the table unchanged."""

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


# A binding's identity, as in RabbitMQ: destination, routing key and arguments.
BindingId = tuple[Destination, str, Hashable]

_by_key = itemgetter(0)


def frozen(value: Any) -> Hashable:
    """A hashable form of an AMQP field value in which equal tables compare equal.

    Scalars are tagged with their type so True, 1 and 1.0 stay distinct, as the types they
    travel as on the wire are distinct.
    """
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=_by_key)
        return ("table", tuple((key, frozen(item)) for key, item in items))
    if isinstance(value, list | tuple):
        return ("array", tuple(frozen(item) for item in value))
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    return (type(value).__name__, value)


def binding_id(destination: Destination, routing_key: str, arguments: Arguments) -> BindingId:
    return destination, routing_key, frozen(arguments)


class DestinationSet:
    """Bindings that share one routing outcome, with their distinct destinations.

    The destination tuple is rebuilt lazily on the next route, so binding many queues in a
    row stays linear instead of rebuilding the tuple after each one.
    """

    __slots__ = ("_binding_ids", "_destinations")

    def __init__(self) -> None:
        self._binding_ids: dict[BindingId, None] = {}
        self._destinations: tuple[Destination, ...] | None = ()

    def add(self, binding_id: BindingId) -> None:
        self._binding_ids[binding_id] = None
        self._destinations = None

    def discard(self, binding_id: BindingId) -> None:
        self._binding_ids.pop(binding_id, None)
        self._destinations = None

    def __bool__(self) -> bool:
        return bool(self._binding_ids)

    @property
    def destinations(self) -> tuple[Destination, ...]:
        destinations = self._destinations
        if destinations is None:
            unique = dict.fromkeys(binding_id[0] for binding_id in self._binding_ids)
            destinations = self._destinations = tuple(unique)
        return destinations


class BindingTable(ExchangeType):
    """An exchange type that keeps its bindings here and only maintains a routing index.

    Bindings are identified by (destination, routing key, arguments), as in RabbitMQ, and
    indexed by destination, so deleting a queue costs only its own bindings. A subclass
    implements `_index`, `_unindex` and `route`.
    """

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._by_destination: dict[Destination, dict[BindingId, Binding]] = {}

    @abstractmethod
    def _index(self, binding_id: BindingId, binding: Binding) -> None:
        """Make `route` see a new binding; raise an AMQP error to refuse it unchanged."""

    @abstractmethod
    def _unindex(self, binding_id: BindingId, binding: Binding) -> None:
        """Make `route` forget a binding that was indexed."""

    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        identity = binding_id(destination, routing_key, arguments)
        known = self._by_destination.get(destination)
        if known is not None and identity in known:
            return False
        binding = Binding(destination, routing_key, dict(arguments))
        self._index(identity, binding)
        self._by_destination.setdefault(destination, {})[identity] = binding
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        identity = binding_id(destination, routing_key, arguments)
        known = self._by_destination.get(destination)
        if known is None or identity not in known:
            return False
        self._unindex(identity, known.pop(identity))
        if not known:
            del self._by_destination[destination]
        return True

    def bindings(self) -> list[Binding]:
        # A list, not a generator, so callers may bind and unbind while they walk it.
        return [binding for known in self._by_destination.values() for binding in known.values()]

    def is_bound(self, destination: Destination | None = None) -> bool:
        if destination is None:
            return bool(self._by_destination)
        return destination in self._by_destination

    def remove_destination(self, destination: Destination) -> None:
        for identity, binding in self._by_destination.pop(destination, {}).items():
            self._unindex(identity, binding)
