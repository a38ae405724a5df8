"""Direct reply-to on a channel: its consumer of the pseudo-queue `amq.rabbitmq.reply-to`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lavin.amqp import codec
from lavin.api.message import Message

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel


class ReplyConsumer:
    """Replies routed to the channel's address arrive here, never through a queue.

    Nothing buffers them: while the requester's connection has more output waiting than its
    high-water mark (it does not read), replies to it are dropped, as RabbitMQ's direct
    reply-to drops what its requester cannot take. The responder, another connection, is
    neither slowed nor told.
    """

    def __init__(self, channel: Channel, tag: str) -> None:
        self.channel = channel
        self.tag = tag
        self.tag_bytes = codec.shortstr(tag)
        self.address = channel.connection.broker.replies.register(self)

    def deliver_reply(self, message: Message) -> None:
        channel = self.channel
        output = channel.output
        if not output.writable:
            return
        output.send(
            codec.deliver_frames(
                channel.id,
                self.tag_bytes,
                channel.next_delivery_tag(),
                False,
                message.exchange,
                message.routing_key,
                message.properties,
                message.body,
                channel.frame_max,
            )
        )

    def stop(self) -> None:
        self.channel.connection.broker.replies.unregister(self.address)
