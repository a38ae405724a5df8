"""The core exchange: flags, arguments and the routing walk over its type plugin.

The plugin (`self.table`) only maps a routing key to destinations; following
exchange-to-exchange bindings, CC/BCC, alternate exchanges and holding delayed messages
happen here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from lavin.api import ExchangeType, Message
from lavin.broker.queues.queue import Queue
from lavin.broker.routing.deduplication import MessageCache
from lavin.broker.routing.delayed_store import DelayedMessages
from lavin.broker.routing.sender_selected import routing_keys_of, strip_bcc

if TYPE_CHECKING:
    from lavin.broker.routing.host import ExchangeHost

# Where a routed message is stored: a queue, the hold of a delayed exchange, or the memory
# of a deduplicating one. Each takes it with `publish(message)`, answering like Queue.publish.
# The routing walk itself reaches only the first two.
Reached: TypeAlias = Queue | DelayedMessages
Target: TypeAlias = Reached | MessageCache

_HEADERS_FLAG: Final = 0x20  # in the first byte of the property flags


class Exchange:
    kind = "exchange"  # as a routing destination (lavin.api.Destination)

    def __init__(
        self,
        vhost: ExchangeHost,
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
        self.deleted = False  # once removed from its vhost (a channel may still hold it)
        # A policy's alternate-exchange (lavin.broker.policy.policies); the argument wins over it.
        self.policy_alternate_exchange: str | None = None
        # Message statistics (lavin.broker.runtime.stats): messages published to it, and copies it
        # routed to queues (RabbitMQ's publish_in and publish_out).
        self.published_in = 0
        self.published_out = 0
        self.deduplication = MessageCache.from_arguments(arguments)
        self.delayed: DelayedMessages | None = None
        if table.delays_messages:
            parent = vhost.data_dir if durable else vhost.transient_dir
            path = parent / "delayed" / hashlib.sha1(name.encode()).hexdigest()
            self.delayed = DelayedMessages(self, path, durable)

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} {self.type_name}>"

    def message_counts(self) -> dict[str, int]:
        return {"publish_in": self.published_in, "publish_out": self.published_out}

    def apply_policy(self, definition: Mapping[str, Any]) -> None:
        """The effective definition of the policies that now match it: its alternate-exchange."""
        alternate = definition.get("alternate-exchange")
        self.policy_alternate_exchange = alternate if isinstance(alternate, str) else None

    def has_bindings(self) -> bool:
        return self.table.is_bound()

    def publish_targets(self, message: Message) -> Collection[Target]:
        """Where a message published to this exchange goes; 406 for a malformed CC or BCC.

        Nothing changes but the BCC header until the targets' `publish` is called.
        """
        properties = message.properties
        if len(properties) < 2 or not properties[0] & _HEADERS_FLAG:
            # The common case: no headers, so no CC, BCC, x-delay or deduplication value.
            reached: set[Reached] = set()
            self.route([message.routing_key], message, reached)
            return reached
        cache = self.deduplication
        value = cache.value_of(message) if cache is not None else None
        if cache is None or value is None:
            return self._targets(message)
        if cache.is_duplicate(value):
            return ()
        targets = self._targets(message)
        # Only a message that went somewhere is remembered.
        return (*targets, cache) if targets else targets

    def publish_now(self, message: Message) -> None:
        """Route and store a message no client waits for (a delayed one, due now); it was
        checked for duplicates when it was published."""
        for target in self._targets(message):
            target.publish(message)

    def _targets(self, message: Message) -> Collection[Reached]:
        routing_keys = routing_keys_of(message)
        delayed = self.delayed
        if delayed is not None and delayed.holds(message):
            return (delayed,)  # held whole, BCC included, until its delay is over
        strip_bcc(message)
        targets: set[Reached] = set()
        self.route(routing_keys, message, targets)
        return targets

    def route(self, routing_keys: list[str], message: Message, targets: set[Reached]) -> None:
        """Add every target the message reaches from here. Each exchange on the way is
        visited once, so loops of exchange bindings and alternate exchanges end."""
        self._collect(routing_keys, message, targets, {self})

    def _collect(
        self, routing_keys: list[str], message: Message, targets: set[Reached], visited: set[Exchange]
    ) -> None:
        delayed = self.delayed
        if delayed is not None and delayed.holds(message):
            targets.add(delayed)
            return
        routed = False
        for routing_key in routing_keys:
            for destination in self.table.route(routing_key, message):
                routed = True
                if isinstance(destination, Queue):
                    targets.add(destination)
                elif isinstance(destination, Exchange) and destination not in visited:
                    visited.add(destination)
                    destination._collect(routing_keys, message, targets, visited)
        if not routed:
            # As in RabbitMQ: an exchange whose own bindings match nothing hands the message
            # to its alternate exchange, wherever it sits on the way.
            alternate = self._alternate()
            if alternate is not None and alternate not in visited:
                visited.add(alternate)
                alternate._collect(routing_keys, message, targets, visited)

    def _alternate(self) -> Exchange | None:
        name = self.arguments.get("alternate-exchange", self.policy_alternate_exchange)
        return self.vhost.exchanges.get(name) if isinstance(name, str) else None

    def close(self) -> None:
        """The broker stops: held messages of a durable exchange stay for the next start."""
        if self.delayed is not None:
            if self.durable:
                self.delayed.close()
            else:
                self.delayed.delete()

    def delete(self) -> None:
        """The exchange is deleted: its held messages go with it."""
        self.deleted = True
        if self.delayed is not None:
            self.delayed.delete()
