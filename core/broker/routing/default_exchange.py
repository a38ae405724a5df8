"""The default exchange: every queue is bound to it by its own name, and nothing else is."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from lavin.api import Arguments, Binding, Destination, ExchangeType, Message
from lavin.api.errors import AccessRefused

if TYPE_CHECKING:
    from lavin.broker.queues.queue import Queue


class DefaultExchangeTable(ExchangeType):
    """Routes by queue name through the vhost's queue table (so dead-lettering and
    exchange-to-exchange walks reach it like any other exchange)."""

    name = ""

    def __init__(self, queues: Mapping[str, Queue]) -> None:
        super().__init__({})
        self._queues = queues

    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        raise AccessRefused("operation not permitted on the default exchange")

    unbind = bind

    def route(self, routing_key: str, message: Message) -> Iterable[Destination]:
        queue = self._queues.get(routing_key)
        return () if queue is None else (queue,)

    def bindings(self) -> Iterable[Binding]:
        return ()
