"""The core queue: consumers, round-robin delivery, unacked bookkeeping, lifecycle.

Storage and ordering belong to the queue-type plugin (`self.store`); this class decides
who gets the next message and when the queue goes away.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from lavin.api import Message, QueueType

if TYPE_CHECKING:
    from lavin.amqp.channel import Consumer
    from lavin.amqp.connection import Connection
    from lavin.broker.exchange import Exchange
    from lavin.broker.vhost import VHost

# Deliveries per drain call before yielding to the loop, so one busy queue cannot starve
# the rest of the broker or grow a connection's write buffer without bound.
DRAIN_BATCH = 256


class Queue:
    """A queue in a vhost."""

    def __init__(
        self,
        vhost: VHost,
        name: str,
        store: QueueType,
        *,
        durable: bool,
        exclusive_owner: Connection | None,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.store = store
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.consumers: list[Consumer] = []
        self.bound_from: set[Exchange] = set()
        self.deleted = False
        self._had_consumer = False
        self._rr = 0
        self._drain_scheduled = False

    def __repr__(self) -> str:
        return f"<Queue {self.name!r}>"

    @property
    def message_count(self) -> int:
        return len(self.store)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    # ---- publishing ----------------------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Store a message and deliver it if a consumer can take it now.

        Returns True when the publisher's confirm must wait for an fsync.
        """
        store = self.store
        message_id = store.push(message)
        self.vhost.broker.mark_dirty(self)
        if self.consumers:
            if len(store) == 1:
                consumer = self._next_consumer()
                if consumer is not None:
                    store.skip(message_id)
                    consumer.deliver(self, message_id, message, False)
                    return self.durable and message.persistent
            self.schedule_drain()
        return self.durable and message.persistent

    # ---- consumers -----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._had_consumer = True
        self.schedule_drain()

    def remove_consumer(self, consumer: Consumer) -> None:
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        if self.auto_delete and self._had_consumer and not self.consumers and not self.deleted:
            self.vhost.delete_queue(self)

    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self.consumers)

    def _next_consumer(self) -> Consumer | None:
        consumers = self.consumers
        count = len(consumers)
        for _ in range(count):
            consumer = consumers[self._rr % count]
            self._rr += 1
            if consumer.can_take():
                return consumer
        return None

    def schedule_drain(self) -> None:
        if not self._drain_scheduled and self.consumers and len(self.store):
            self._drain_scheduled = True
            self.vhost.broker.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self.deleted:
            return
        store = self.store
        for _ in range(DRAIN_BATCH):
            if not len(store):
                return
            consumer = self._next_consumer()
            if consumer is None:
                return
            item = store.take()
            if item is None:
                return
            message_id, message, redelivered = item
            consumer.deliver(self, message_id, message, redelivered)
        self.schedule_drain()

    # ---- acknowledgements ------------------------------------------------------------------

    def get(self) -> tuple[int, Message, bool] | None:
        """basic.get: the next ready message, if any."""
        return self.store.take()

    def ack(self, message_id: int) -> None:
        if not self.deleted:
            self.store.ack(message_id)
            self.vhost.broker.mark_dirty(self)

    def reject(self, message_id: int) -> None:
        """A message rejected without requeue is dropped."""
        self.ack(message_id)

    def requeue(self, message_ids: Iterable[int]) -> None:
        if self.deleted:
            return
        self.store.requeue(sorted(message_ids))
        self.schedule_drain()

    def purge(self) -> int:
        count = self.store.purge()
        self.vhost.broker.mark_dirty(self)
        return count

    def flush_store(self) -> list[int]:
        """Group commit: hand buffered writes to the OS, return fds to fsync."""
        return [] if self.deleted else self.store.flush()

    # ---- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Release files; data stays for the next start."""
        self.deleted = True
        self.store.close()
