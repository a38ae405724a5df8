"""Direct reply-to: RPC replies go straight to the requesting channel, no queue involved.

A client consumes (no-ack) from the pseudo-queue `amq.rabbitmq.reply-to` and publishes
requests with that name as `reply_to`; the broker rewrites it to a per-channel address
that routes, through the default exchange, to that consumer only (as RabbitMQ does).
"""

from __future__ import annotations

import secrets
from typing import Protocol

from lavin.api import errors
from lavin.api.message import Message

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
ADDRESS_PREFIX = PSEUDO_QUEUE + "."
_REPLY_TO_FLAG = 0x02  # 0x0200 in the property flag word: its high byte


class ReplyConsumer(Protocol):
    """A consumer of the pseudo-queue (a channel's, in the protocol layer). Replies are
    delivered at most once: it drops those its requester cannot take now (RabbitMQ's
    replies go through no buffer either)."""

    def deliver_reply(self, message: Message) -> None: ...


class ReplyRegistry:
    """Addresses of the consumers of the pseudo-queue."""

    def __init__(self) -> None:
        self._consumers: dict[str, ReplyConsumer] = {}

    def register(self, consumer: ReplyConsumer) -> str:
        address = ADDRESS_PREFIX + secrets.token_urlsafe(18)
        self._consumers[address] = consumer
        return address

    def unregister(self, address: str) -> None:
        self._consumers.pop(address, None)

    def is_live(self, address: str) -> bool:
        """Whether a reply address still has its consumer (for a passive queue.declare)."""
        return address in self._consumers

    def deliver(self, message: Message) -> bool:
        """Hand a message routed to a reply address to its consumer; False when the
        routing key is no live address."""
        if not message.routing_key.startswith(ADDRESS_PREFIX):
            return False
        consumer = self._consumers.get(message.routing_key)
        if consumer is None:
            return False
        consumer.deliver_reply(message)
        return True


def rewrite_reply_to(message: Message, address: str | None) -> None:
    """Replace a `reply_to` of the pseudo-queue by the channel's own address."""
    properties = message.properties
    if len(properties) < 2 or not properties[0] & _REPLY_TO_FLAG:
        return
    props = message.props
    if props.get("reply_to") != PSEUDO_QUEUE:
        return
    if address is None:
        raise errors.PreconditionFailed("fast reply consumer does not exist")
    message.replace_properties({**props, "reply_to": address})
