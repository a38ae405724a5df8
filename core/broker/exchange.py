"""The core exchange: flags, arguments and the routing walk over its type plugin.

The plugin (`self.table`) only maps a routing key to destinations; following
exchange-to-exchange bindings, CC/BCC and alternate exchanges happens here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lavin.api import ExchangeType, Message
from lavin.broker.queue import Queue

if TYPE_CHECKING:
    from lavin.broker.vhost import VHost


class Exchange:
    def __init__(
        self,
        vhost: VHost,
        name: str,
        type_name: str,
        table: ExchangeType,
        *,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.type_name = type_name
        self.table = table
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments
        self.bound_from: set[Exchange] = set()  # exchanges with a binding to this one

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} {self.type_name}>"

    def has_bindings(self) -> bool:
        return self.table.is_bound()

    def route(self, routing_keys: list[str], message: Message, queues: set[Queue]) -> None:
        """Add every queue the message reaches, following exchange bindings once each."""
        visited: set[Exchange] = {self}
        self._collect(routing_keys, message, queues, visited)
        if not queues:
            self._route_alternate(routing_keys, message, queues, visited)

    def _collect(
        self, routing_keys: list[str], message: Message, queues: set[Queue], visited: set[Exchange]
    ) -> None:
        for routing_key in routing_keys:
            for destination in self.table.route(routing_key, message):
                if destination.__class__ is Queue:
                    queues.add(destination)  # type: ignore[arg-type]
                elif destination not in visited:
                    visited.add(destination)  # type: ignore[arg-type]
                    destination._collect(routing_keys, message, queues, visited)  # type: ignore[attr-defined]

    def _route_alternate(
        self, routing_keys: list[str], message: Message, queues: set[Queue], visited: set[Exchange]
    ) -> None:
        name = self.arguments.get("alternate-exchange")
        if not isinstance(name, str):
            return
        alternate = self.vhost.exchanges.get(name)
        if alternate is None or alternate in visited:
            return
        visited.add(alternate)
        alternate._collect(routing_keys, message, queues, visited)
        if not queues:
            alternate._route_alternate(routing_keys, message, queues, visited)
