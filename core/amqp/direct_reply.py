"""Direct reply-to: RPC replies go straight to the requesting channel, no queue involved.

A client consumes (no-ack) from the pseudo-queue `amq.rabbitmq.reply-to` and publishes
requests with that name as `reply_to`; the broker rewrites it to a per-channel address
that routes, through the default exchange, to that consumer only (as RabbitMQ does).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from lavin import errors
from lavin.api import Message

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
ADDRESS_PREFIX = PSEUDO_QUEUE + "."
_REPLY_TO_FLAG = 0x02  # 0x0200 in the property flag word: its high byte


class ReplyRegistry:
    """Addresses of the channels that consume from the pseudo-queue."""

    def __init__(self) -> None:
        self._channels: dict[str, Channel] = {}

    def register(self, channel: Channel) -> str:
        address = ADDRESS_PREFIX + secrets.token_urlsafe(18)
        self._channels[address] = channel
        return address

    def unregister(self, address: str) -> None:
        self._channels.pop(address, None)

    def channel_for(self, routing_key: str) -> Channel | None:
        return self._channels.get(routing_key) if routing_key.startswith(ADDRESS_PREFIX) else None


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
