"""The `x-prefix` exchange: a message goes to every binding whose key prefixes its routing key.

A third-party exchange type in its smallest form; it imports nothing from Lavin but `lavin.api`.
"""

from __future__ import annotations

from collections.abc import Iterator

from lavin.api import Arguments, Binding, Destination, ExchangeType, Message


class PrefixExchange(ExchangeType):
    name = "x-prefix"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._bindings: dict[tuple[Destination, str], Binding] = {}

    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        key = (destination, routing_key)
        if key in self._bindings:
            return False
        self._bindings[key] = Binding(destination, routing_key, arguments)
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        return self._bindings.pop((destination, routing_key), None) is not None

    def route(self, routing_key: str, message: Message) -> Iterator[Destination]:
        for binding in self._bindings.values():
            if routing_key.startswith(binding.routing_key):
                yield binding.destination

    def bindings(self) -> Iterator[Binding]:
        return iter(list(self._bindings.values()))
