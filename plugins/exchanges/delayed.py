"""The delayed-message exchange (RabbitMQ's `x-delayed-message` plugin).

The exchange routes like the type named by its `x-delayed-type` argument, which may be any
installed type, a third-party one too. This class only wraps a table of that type; holding
messages until their `x-delay` is over, and keeping them on disk, is done by the core for
every type that sets `delays_messages`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Self

from lavin.api import (
    Arguments,
    Binding,
    Destination,
    ExchangeType,
    ExchangeTypes,
    Message,
    PreconditionFailed,
)

INNER_TYPE_ARGUMENT = "x-delayed-type"


class DelayedMessageExchange(ExchangeType):
    name = "x-delayed-message"
    delays_messages = True

    def __init__(self, arguments: Arguments, inner: ExchangeType) -> None:
        super().__init__(arguments)
        self.inner = inner

    @classmethod
    def create(cls, arguments: Arguments, exchange_types: ExchangeTypes) -> Self:
        inner_name = arguments.get(INNER_TYPE_ARGUMENT)
        if isinstance(inner_name, bytes):
            inner_name = inner_name.decode("utf-8", "surrogateescape")
        inner_type = exchange_types.get(inner_name) if isinstance(inner_name, str) else None
        if inner_type is None or inner_type.delays_messages:
            raise PreconditionFailed(f"Invalid argument, '{INNER_TYPE_ARGUMENT}' must be an existing exchange type")
        return cls(arguments, inner_type.create(arguments, exchange_types))

    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        return self.inner.bind(destination, routing_key, arguments)

    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        return self.inner.unbind(destination, routing_key, arguments)

    def route(self, routing_key: str, message: Message) -> Iterable[Destination]:
        return self.inner.route(routing_key, message)

    def bindings(self) -> Iterable[Binding]:
        return self.inner.bindings()

    def is_bound(self, destination: Destination | None = None) -> bool:
        return self.inner.is_bound(destination)

    def remove_destination(self, destination: Destination) -> None:
        self.inner.remove_destination(destination)
