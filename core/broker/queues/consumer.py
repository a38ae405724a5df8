"""What a queue knows of a consumer: the port through which the broker delivers.

The protocol layer subclasses `Consumer` (a channel's consumer sends `basic.deliver`
frames); the broker never sees a channel or a connection. Methods are overridden rather
than passed in as callbacks so that compiled code calls them through a vtable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from lavin.api.message import Message


class Settles(Protocol):
    """Where acks, rejects and requeues of a delivery go: its queue, or for a stream, the
    consumer's reader (a stream keeps its messages; each consumer settles its own)."""

    def ack(self, message_id: int) -> None: ...

    def reject(self, message_id: int) -> None: ...

    def check_rejectable(self) -> None:
        """Raise when a delivery settled here may not be nacked or rejected; called for
        every delivery a nack/reject names before any of them is settled."""

    def requeue(self, message_ids: Iterable[int]) -> None: ...


class Consumer:
    """A subscription to one queue.

    `prefetch` is the consumer's own credit (0: unlimited) and `unacked` what it holds;
    `can_take` may look further (the connection's write buffer, a channel-wide limit).
    """

    def __init__(
        self, tag: str, no_ack: bool, exclusive: bool, arguments: dict[str, Any], priority: int, prefetch: int
    ) -> None:
        self.tag = tag
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.arguments = arguments
        self.priority = priority
        self.prefetch = prefetch
        self.unacked = 0

    def can_take(self) -> bool:
        """Whether a delivery may be sent now."""
        raise NotImplementedError

    def deliver(self, settles: Settles, message_id: int, message: Message, redelivered: bool) -> None:
        """Send one message; with `no_ack` it is settled already (id -1: never stored)."""
        raise NotImplementedError

    def cancelled_by_broker(self) -> None:
        """The queue went away; the consumer is gone from it already."""
        raise NotImplementedError

    def shares_credit(self) -> bool:
        """True when the consumer's credit is shared with others (global qos), which a
        stream cannot honour."""
        return False
