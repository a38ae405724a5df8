"""The `x-prefix` exchange: a message goes to every binding whose key prefixes its routing key.

A third-party exchange type in its smallest form; it imports nothing from Lavin but
`lavin.api`. `BindingTable` keeps the bindings and their identity (destination, routing
key, arguments); this class keeps an index from binding key to destinations for `route`.
"""

from __future__ import annotations

from lavin.api import Arguments, Binding, BindingId, BindingTable, Destination, DestinationSet, Message


class PrefixExchange(BindingTable):
    name = "x-prefix"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._by_prefix: dict[str, DestinationSet] = {}

    def _index(self, binding_id: BindingId, binding: Binding) -> None:
        self._by_prefix.setdefault(binding.routing_key, DestinationSet()).add(binding_id)

    def _unindex(self, binding_id: BindingId, binding: Binding) -> None:
        targets = self._by_prefix[binding.routing_key]
        targets.discard(binding_id)
        if not targets:
            del self._by_prefix[binding.routing_key]

    def route(self, routing_key: str, message: Message) -> list[Destination]:
        # One lookup per prefix of the routing key (at most 256), however many bindings.
        found: list[Destination] = []
        for end in range(len(routing_key) + 1):
            targets = self._by_prefix.get(routing_key[:end])
            if targets is not None:
                found.extend(targets.destinations)
        return found
