"""Bookkeeping shared by the built-in exchange types.

A binding is identified by (destination, routing key, arguments), as in RabbitMQ. The base
class keeps every binding indexed by destination, so deleting a queue costs only its own
bindings; each type maintains just the lookup structure its `route` reads.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable, Mapping
from operator import itemgetter
from typing import Any

from lavin.api import Arguments, Binding, Destination, ExchangeType

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
    """An exchange type whose subclasses only keep their routing index in step."""

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
        binding_id = (destination, routing_key, frozen(arguments))
        known = self._by_destination.get(destination)
        if known is not None and binding_id in known:
            return False
        binding = Binding(destination, routing_key, dict(arguments))
        self._index(binding_id, binding)
        self._by_destination.setdefault(destination, {})[binding_id] = binding
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        binding_id = (destination, routing_key, frozen(arguments))
        known = self._by_destination.get(destination)
        if known is None or binding_id not in known:
            return False
        self._unindex(binding_id, known.pop(binding_id))
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
        for binding_id, binding in self._by_destination.pop(destination, {}).items():
            self._unindex(binding_id, binding)
