"""A channel's consumer timeout, RabbitMQ's `consumer_timeout`: a delivery left unacked
longer than its queue allows closes the channel (406).

One timer per channel, armed while deliveries may be unacked. Deliveries record no time:
each check notes (highest tag so far, now), so the oldest unacked tag was delivered no
later than the first note covering it. A delivery only reads the channel's `arm_timeout`
flag; the one that finds it set starts the timer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Final

from lavin.api import errors
from lavin.broker.queues.queue import Queue

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel
    from lavin.amqp.consumer import ChannelConsumer

# The check runs every eighth of the timeout, at most this many seconds apart.
_CHECK_MAX: Final = 5.0


class ConsumerTimeout:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._timer: asyncio.TimerHandle | None = None
        # (highest delivery tag, loop time) noted at each check; made on first use, as most
        # channels never arm the timer and an empty deque costs hundreds of bytes
        self._tag_notes: deque[tuple[int, float]] | None = None

    def limit(self, queue: Queue) -> int:
        """Milliseconds a delivery from `queue` may stay unacked; 0: no limit."""
        own = queue.settings.consumer_timeout
        return self.channel.connection.broker.config.consumer_timeout if own is None else own

    def applies_to(self, consumer: ChannelConsumer) -> bool:
        """Whether `consumer`'s deliveries can time out (manual acks, a timeout on its queue)."""
        return not consumer.no_ack and bool(self.limit(consumer.queue))

    def consumer_added(self, consumer: ChannelConsumer) -> None:
        if self._timer is None and self.applies_to(consumer):
            self.channel.arm_timeout = True

    def watch(self, tag: int, queue: Queue) -> None:
        """Start the timer, unless it runs already, for the delivery `tag` just made."""
        if self._timer is not None:
            return
        timeout = self.limit(queue)
        if not timeout:
            return
        self.channel.arm_timeout = False
        loop = self.channel.connection.loop
        if self._tag_notes is None:
            self._tag_notes = deque()
        self._tag_notes.append((tag, loop.time()))
        self._timer = loop.call_later(_check_period(timeout), self._check)

    def stop(self) -> None:
        """The channel closes: no check any more, nothing noted."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.channel.arm_timeout = False
        if self._tag_notes is not None:
            self._tag_notes.clear()

    def _check(self) -> None:
        """Close the channel when its oldest unacked delivery is older than its queue's
        timeout; RabbitMQ also looks at the oldest only."""
        self._timer = None
        channel = self.channel
        unacked = channel.unacked
        notes = self._tag_notes
        assert notes is not None  # the timer runs only after watch
        if channel.closing or not unacked:
            notes.clear()
            channel.arm_timeout = any(self.applies_to(consumer) for consumer in channel.consumers.values())
            return
        loop = channel.connection.loop
        now = loop.time()
        if channel.last_delivery_tag > notes[-1][0]:
            notes.append((channel.last_delivery_tag, now))
        oldest = next(iter(unacked))
        while notes[0][0] < oldest:  # everything up to that tag is settled
            notes.popleft()
        settles, _, consumer = unacked[oldest]
        queue = consumer.queue if consumer is not None else settles
        timeout = self.limit(queue) if isinstance(queue, Queue) else 0
        if timeout and (now - notes[0][1]) * 1000 >= timeout:
            channel.close_with_error(
                errors.PreconditionFailed(
                    f"delivery acknowledgement on channel {channel.id} timed out. Timeout value used: {timeout} ms. "
                    "This timeout value can be configured, see consumers doc guide to learn more"
                )
            )
            return
        self._timer = loop.call_later(_check_period(timeout), self._check)


def _check_period(timeout: int) -> float:
    """Seconds between checks; a timeout fires at most about two checks late."""
    return min(timeout / 8000, _CHECK_MAX) if timeout else _CHECK_MAX
