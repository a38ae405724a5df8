"""The direct exchange: a message goes to the bindings whose key equals its routing key."""

from __future__ import annotations

from lavin.api import Arguments, Binding, BindingId, BindingTable, Destination, DestinationSet, Message


class DirectExchange(BindingTable):
    name = "direct"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._by_routing_key: dict[str, DestinationSet] = {}

    def _index(self, binding_id: BindingId, binding: Binding) -> None:
        targets = self._by_routing_key.get(binding.routing_key)
        if targets is None:
            targets = self._by_routing_key[binding.routing_key] = DestinationSet()
        targets.add(binding_id)

    def _unindex(self, binding_id: BindingId, binding: Binding) -> None:
        targets = self._by_routing_key[binding.routing_key]
        targets.discard(binding_id)
        if not targets:
            del self._by_routing_key[binding.routing_key]

    def route(self, routing_key: str, message: Message) -> tuple[Destination, ...]:
        targets = self._by_routing_key.get(routing_key)
        return targets.destinations if targets is not None else ()
