"""The fanout exchange: every message goes to every binding; routing keys are ignored."""

from __future__ import annotations

from lavin.api import Arguments, Binding, BindingId, BindingTable, Destination, DestinationSet, Message


class FanoutExchange(BindingTable):
    name = "fanout"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._targets = DestinationSet()

    def _index(self, binding_id: BindingId, binding: Binding) -> None:
        self._targets.add(binding_id)

    def _unindex(self, binding_id: BindingId, binding: Binding) -> None:
        self._targets.discard(binding_id)

    def route(self, routing_key: str, message: Message) -> tuple[Destination, ...]:
        return self._targets.destinations
