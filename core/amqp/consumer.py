"""A channel's consumer: the broker's `Consumer` port, delivering as `basic.deliver`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lavin.amqp import codec
from lavin.api.message import Message
from lavin.broker.queues.consumer import Consumer, Settles
from lavin.broker.queues.queue import Queue

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel


class ChannelConsumer(Consumer):
    def __init__(
        self,
        channel: Channel,
        queue: Queue,
        tag: str,
        no_ack: bool,
        exclusive: bool,
        arguments: dict[str, Any],
        priority: int = 0,
    ) -> None:
        super().__init__(tag, no_ack, exclusive, arguments, priority, channel.consumer_prefetch)
        self.channel = channel
        self.queue = queue
        self.tag_bytes = codec.shortstr(tag)
        self.frames = codec.DeliveryFrames(channel.id, self.tag_bytes)

    def can_take(self) -> bool:
        channel = self.channel
        if not channel.output.writable:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return not channel.global_prefetch or channel.consumer_unacked < channel.global_prefetch

    def deliver(self, settles: Settles, message_id: int, message: Message, redelivered: bool) -> None:
        self.channel.deliver(self, settles, message_id, message, redelivered)

    def cancelled_by_broker(self) -> None:
        self.channel.consumer_cancelled_by_broker(self)

    def shares_credit(self) -> bool:
        return bool(self.channel.global_prefetch)

    def is_active(self) -> bool:
        """Whether it gets deliveries: not a single active consumer's waiting successor."""
        consumers = self.queue.consumers
        return not self.queue.settings.single_active_consumer or (bool(consumers) and consumers[0] is self)
