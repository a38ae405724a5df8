"""The core queue: consumers, delivery order, TTL, limits, dead-lettering, lifecycle.

Storage and ordering belong to the queue-type plugin (`store`); these classes decide who
gets the next message, when a message dies and when the queue goes away.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from lavin.api import Message, QueueType
from lavin.api.message import is_persistent
from lavin.broker.policy.arguments import QueueSettings, queue_type_name
from lavin.broker.policy.policy_rules import queue_settings
from lavin.broker.queues.consumer import Consumer
from lavin.broker.queues.delivery_counts import DeliveryCounts
from lavin.broker.queues.expiry import EXPIRATION_FLAG, ExpiryIndex, expires_at
from lavin.broker.queues.flow import PublisherFlow
from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    import asyncio

    from lavin.broker.queues.host import QueueHost

# Deliveries per drain call before yielding to the loop, so one busy queue cannot starve
# the rest of the broker or grow a connection's write buffer without bound.
DRAIN_BATCH: Final = 256

# Queue.publish results, or-ed together
STORED: Final = 0
NEEDS_SYNC: Final = 1  # the publisher's confirm waits for the fsync
REJECTED: Final = 2  # overflow refused it: the publisher gets a nack
BEHIND: Final = 4  # consumers are waiting but the backlog grows: the publisher should pause

# Publisher flow control: while a queue with consumers has a backlog above FLOW_HIGH
# messages or FLOW_HIGH_BYTES of bodies, its publishers stop reading until deliveries empty
# it. A single event loop would otherwise spend nearly every tick reading publishes while
# consumers get a trickle. The byte bound keeps a backlog of large messages within the
# store's decoded window (lavin.storage.segments.decoded_window), so that they are delivered without
# being read back. Consumers that take nothing for FLOW_STALL seconds (full prefetch, no
# acks) are the client's business: then the publishers go on, as they would with no
# consumers at all.
FLOW_HIGH: Final = 8192
FLOW_HIGH_BYTES: Final = 4 << 20
FLOW_STALL: Final = 0.05


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class QueueDeclaration:
    """What queue.declare asked for; `exclusive_owner` is the connection of an exclusive queue."""

    name: str
    durable: bool
    exclusive_owner: object | None
    auto_delete: bool
    arguments: dict[str, Any]


# StreamQueue subclasses it, and setup.py may compile this module.
@mypyc_attr(allow_interpreted_subclasses=True)
class Queue:
    """A queue in a vhost: its consumers, bindings, flow control and lifecycle.

    `MessageQueue` (a `QueueType` store) and `StreamQueue` (a `StreamType` log) are the
    two kinds; the vhost and the protocol layer see only this class.
    """

    kind = "queue"  # as a routing destination (lavin.api.Destination)

    def __init__(self, vhost: QueueHost, declaration: QueueDeclaration, settings: QueueSettings) -> None:
        self.vhost = vhost
        self.loop = vhost.loop
        self._mark_dirty = vhost.group_commit.mark_dirty
        self.name = declaration.name
        self.settings = settings
        self.durable = declaration.durable
        self.exclusive_owner = declaration.exclusive_owner
        self.auto_delete = declaration.auto_delete
        self.arguments = declaration.arguments
        self.consumers: list[Consumer] = []
        self.deleted = False
        self._had_consumer = False
        self._drain_scheduled = False
        self._held_publishers: set[PublisherFlow] = set()
        self._deliveries = 0  # drained deliveries, so flow control can tell progress from a stall
        self.unacked = 0  # deliveries that channels hold with an ack to come, basic.get's too
        # Message statistics (lavin.broker.runtime.stats): only ever incremented.
        self.published = 0
        self.delivered = 0
        self.delivered_no_ack = 0
        self.got = 0
        self.got_no_ack = 0
        self.redelivered = 0
        self.acked = 0
        self._flow_timer: asyncio.TimerHandle | None = None
        self._unused_timer: asyncio.TimerHandle | None = None

    @property
    def persistent(self) -> bool:
        """Its messages and definition survive a restart (durable, not exclusive)."""
        return self.durable and self.exclusive_owner is None

    @property
    def message_count(self) -> int:
        raise NotImplementedError

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def message_counts(self) -> dict[str, int]:
        """Its statistics counters under RabbitMQ's `message_stats` names."""
        return {
            "publish": self.published,
            "deliver": self.delivered,
            "deliver_no_ack": self.delivered_no_ack,
            "get": self.got,
            "get_no_ack": self.got_no_ack,
            "redeliver": self.redelivered,
            "ack": self.acked,
        }

    def publish(self, message: Message) -> int:
        """Store a message and deliver it if a consumer can take it now: STORED, or-ed
        with NEEDS_SYNC, REJECTED and BEHIND."""
        raise NotImplementedError

    def flush_store(self) -> list[int]:
        """Group commit: hand buffered writes to the OS, return fds to fsync."""
        raise NotImplementedError

    def _can_deliver(self) -> bool:
        raise NotImplementedError

    def _deliver_batch(self) -> None:
        """Up to DRAIN_BATCH deliveries; a full batch schedules the next drain."""
        raise NotImplementedError

    # ---- consumers -----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        if not self.settings.single_active_consumer:
            # Highest priority first; sort is stable, so equals stay in arrival order.
            self.consumers.sort(key=lambda c: -c.priority)
        self._had_consumer = True
        self._cancel_unused_timer()
        self.schedule_drain()

    def remove_consumer(self, consumer: Consumer) -> None:
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        if self.consumers or self.deleted:
            self.schedule_drain()  # a single active consumer may have handed over
            return
        self.release_publishers()
        if self.auto_delete and self._had_consumer:
            self.vhost.delete_queue(self)
        else:
            self.touch()

    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self.consumers)

    def schedule_drain(self) -> None:
        """Deliver in a later loop step, at most one drain pending at a time."""
        if not self._drain_scheduled and self._can_deliver():
            self._drain_scheduled = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        if not self.deleted:
            self._deliver_batch()

    def hold_publisher(self, publisher: PublisherFlow) -> None:
        """`publisher` paused reading because of this queue; resume it once we catch up."""
        self._held_publishers.add(publisher)
        if self._flow_timer is None:
            self._flow_timer = self.loop.call_later(FLOW_STALL, self._check_flow, self._deliveries)

    def _check_flow(self, deliveries_before: int) -> None:
        self._flow_timer = None
        if not self._held_publishers:
            return
        if self._deliveries == deliveries_before:
            self.release_publishers()  # the consumers stalled: nothing to wait for
        else:
            self._flow_timer = self.loop.call_later(FLOW_STALL, self._check_flow, self._deliveries)

    def release_publishers(self) -> None:
        if self._flow_timer is not None:
            self._flow_timer.cancel()
            self._flow_timer = None
        held, self._held_publishers = self._held_publishers, set()
        for publisher in held:
            publisher.resume()

    # ---- lifecycle -----------------------------------------------------------------------

    def touch(self) -> None:
        """The queue was used: restart the x-expires countdown (only while it has no consumers)."""
        expires = self.settings.expires
        if expires is None or self.consumers or self.deleted:
            return
        self._cancel_unused_timer()
        self._unused_timer = self.loop.call_later(expires / 1000, self._expire_unused)

    def apply_policy(self, definition: Mapping[str, Any]) -> None:
        """The effective definition of the policies that now match it ({} for none)."""
        raise NotImplementedError

    def apply_settings(self, settings: QueueSettings) -> None:
        """A policy changed what the queue acts on: the x-expires countdown starts again."""
        self.settings = settings
        self._cancel_unused_timer()
        self.touch()

    def _cancel_unused_timer(self) -> None:
        if self._unused_timer is not None:
            self._unused_timer.cancel()
            self._unused_timer = None

    def _expire_unused(self) -> None:
        self._unused_timer = None
        if not self.consumers and not self.deleted:
            self.vhost.delete_queue(self)

    def _stop_timers(self) -> None:
        self.release_publishers()
        self._cancel_unused_timer()

    def close(self) -> None:
        """Release files; data stays for the next start."""
        raise NotImplementedError

    def delete(self) -> None:
        """Remove the data for good."""
        raise NotImplementedError


class MessageQueue(Queue):
    """A queue whose `QueueType` store takes, acks and requeues: TTL, length limits,
    delivery limits and dead-lettering happen here."""

    def __init__(
        self, vhost: QueueHost, declaration: QueueDeclaration, settings: QueueSettings, store: QueueType
    ) -> None:
        super().__init__(vhost, declaration, settings)
        self.store = store
        self._rr: dict[int, int] = {}  # round-robin position per consumer priority
        self._limited = settings.max_length is not None or settings.max_length_bytes is not None
        self._expiry = ExpiryIndex()
        # Per-message expirations were seen, or a queue TTL is set: check at delivery.
        self._may_expire = settings.message_ttl is not None
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._expiry_due = 0
        self._delivery_counts = (
            DeliveryCounts(store.path if store.durable else None, not len(store))
            if settings.delivery_limit is not None
            else None
        )
        self.touch()
        self._arm_expiry()

    def __repr__(self) -> str:
        return f"<MessageQueue {self.name!r}>"

    @property
    def message_count(self) -> int:
        return len(self.store)

    def apply_policy(self, definition: Mapping[str, Any]) -> None:
        """Take the settings its arguments and the definition make, if they changed."""
        type_name = queue_type_name(self.arguments)
        settings = queue_settings(self.name, self.vhost.name, self.arguments, type_name, definition)
        if settings != self.settings:
            self.apply_settings(settings)

    def apply_settings(self, settings: QueueSettings) -> None:
        """A policy changed the limits: enforce them now and re-arm the expiry timer."""
        super().apply_settings(settings)
        self._limited = settings.max_length is not None or settings.max_length_bytes is not None
        self._may_expire = self._may_expire or settings.message_ttl is not None
        counts = self._delivery_counts
        if settings.delivery_limit is None and counts is not None:
            counts.close()
            self._delivery_counts = None
        elif settings.delivery_limit is not None and counts is None:
            self._delivery_counts = DeliveryCounts(self.store.path if self.store.durable else None, not len(self.store))
        if self._limited and settings.overflow == "drop-head":
            self._drop_head_over_limit()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        self._arm_expiry()

    # ---- publishing ----------------------------------------------------------------------

    def publish(self, message: Message) -> int:
        """Store a message and deliver it if a consumer can take it now (STORED, NEEDS_SYNC or REJECTED)."""
        settings = self.settings
        if self._limited and settings.overflow != "drop-head" and self._full_for(message):
            if settings.overflow == "reject-publish-dlx":
                self.vhost.dead_letter(self, message, "maxlen")
            return REJECTED
        self.published += 1
        store = self.store
        consumer = self._next_consumer() if self.consumers and not len(store) else None
        if consumer is not None and consumer.no_ack:
            # Nobody can ask for it back: it need not be stored at all.
            consumer.deliver(self, -1, message, False)
            return STORED
        message_id = store.push(message) if consumer is None else store.push_taken(message)
        self._mark_dirty(self)
        # The flag word's reader: Message.persistent would decode every property of each message.
        status = NEEDS_SYNC if self.durable and is_persistent(message.properties) else STORED
        due = self._due(message)
        if consumer is not None:
            if due is not None:
                self._expiry.add(message_id, due, taken=True)
            consumer.deliver(self, message_id, message, False)
            return status
        if self.consumers:
            self.schedule_drain()
            if len(store) > FLOW_HIGH or store.ready_bytes > FLOW_HIGH_BYTES:
                status |= BEHIND
        if due is not None:
            self._expiry.add(message_id, due, taken=False)
        if self._limited:
            self._drop_head_over_limit()
        # A timer already armed fires no later than any queue-TTL expiry of this message.
        if self._may_expire and (self._expiry_timer is None or (due is not None and due < self._expiry_due)):
            self._arm_expiry(due)
        return status

    def _due(self, message: Message) -> int | None:
        """Expiry time for the per-message index (queue TTL alone needs no entry)."""
        properties = message.properties
        if len(properties) < 2 or not properties[0] & EXPIRATION_FLAG:
            return None
        self._may_expire = True
        return expires_at(message, self.settings.message_ttl)

    def _full_for(self, message: Message) -> bool:
        settings = self.settings
        store = self.store
        if settings.max_length is not None and len(store) >= settings.max_length:
            return True
        limit = settings.max_length_bytes
        return limit is not None and store.ready_bytes + len(message.body) > limit

    def _drop_head_over_limit(self) -> None:
        settings = self.settings
        store = self.store
        while len(store) and (
            (settings.max_length is not None and len(store) > settings.max_length)
            or (settings.max_length_bytes is not None and store.ready_bytes > settings.max_length_bytes)
        ):
            item = store.take()
            if item is None:
                return
            self._discard(item[0], item[1], "maxlen")

    def _discard(self, message_id: int, message: Message, reason: str) -> None:
        """A taken message dies: dead-letter it if the queue says so, then forget it."""
        self.vhost.dead_letter(self, message, reason)
        self.ack(message_id)

    # ---- consumers -----------------------------------------------------------------------

    def _next_consumer(self) -> Consumer | None:
        consumers = self.consumers
        if len(consumers) == 1 or self.settings.single_active_consumer:
            first = consumers[0]  # the only one, or the single active one
            return first if first.can_take() else None
        start = 0
        count = len(consumers)
        while start < count:
            priority = consumers[start].priority
            end = start + 1
            while end < count and consumers[end].priority == priority:
                end += 1
            size = end - start
            position = self._rr.get(priority, 0)
            for step in range(size):
                consumer = consumers[start + (position + step) % size]
                if consumer.can_take():
                    self._rr[priority] = position + step + 1
                    return consumer
            start = end
        return None

    def _can_deliver(self) -> bool:
        return bool(self.consumers) and bool(len(self.store))

    def _deliver_batch(self) -> None:
        """Up to DRAIN_BATCH deliveries; a full batch schedules the next drain."""
        store = self.store
        delivered = 0
        while delivered < DRAIN_BATCH:
            consumer = self._next_consumer() if len(store) else None
            item = self._take_live() if consumer is not None else None
            if item is None:
                break
            message_id, message, redelivered = item
            assert consumer is not None
            consumer.deliver(self, message_id, message, redelivered)
            delivered += 1
        else:
            self.schedule_drain()
        self._deliveries += delivered
        if self._held_publishers and not len(store):
            self.release_publishers()

    def _take_live(self) -> tuple[int, Message, bool] | None:
        """The next ready message that has not expired, with its delivery count header."""
        store = self.store
        while True:
            item = store.take()
            if item is None:
                return None
            message_id, message, _ = item
            if self._may_expire:
                if self._expired(message):
                    self._discard(message_id, message, "expired")
                    continue
                if self._expiry:
                    self._expiry.taken(message_id)
            counts = self._delivery_counts
            if counts is not None and (count := counts.get(message_id)):
                # A copy: the store may hand out the very object other queues got too.
                props = dict(message.props)
                props["headers"] = {**(props.get("headers") or {}), "x-delivery-count": count}
                counted = Message(message.exchange, message.routing_key, b"", message.body, message.timestamp)
                counted.replace_properties(props)
                return message_id, counted, item[2]
            return item

    def _expired(self, message: Message) -> bool:
        due = expires_at(message, self.settings.message_ttl)
        return due is not None and due <= now_ms()

    # ---- basic.get and acknowledgements ----------------------------------------------------

    def get(self) -> tuple[int, Message, bool] | None:
        """basic.get: the next ready message, if any."""
        self.touch()
        return self._take_live()

    def ack(self, message_id: int) -> None:
        if self.deleted:
            return
        self.store.ack(message_id)
        self._mark_dirty(self)
        if self._expiry:
            self._expiry.acked(message_id)
        if self._delivery_counts is not None:
            self._delivery_counts.forget(message_id)

    def check_rejectable(self) -> None:
        """Any delivery of a queue may be nacked or rejected."""

    def reject(self, message_id: int) -> None:
        """Rejected without requeue: dead-lettered when the queue has a DLX, else dropped."""
        if self.deleted:
            return
        if self.settings.dead_letter_exchange is not None:
            self.vhost.dead_letter(self, self.store.read(message_id), "rejected")
        else:  # not read for nothing
            self.vhost.dropped(self, "rejected")
        self.ack(message_id)

    def requeue(self, message_ids: Iterable[int]) -> None:
        if self.deleted:
            return
        ids = sorted(message_ids)
        counts = self._delivery_counts
        if counts is not None:
            limit = self.settings.delivery_limit
            assert limit is not None
            over = [i for i in ids if counts.increment(i) > limit]
            for message_id in over:
                self._discard(message_id, self.store.read(message_id), "delivery_limit")
            if over:
                ids = [i for i in ids if i not in set(over)]
        self.store.requeue(ids)
        if self._expiry:
            for message_id in ids:
                self._expiry.requeued(message_id)
        if self._may_expire:
            self._arm_expiry()
        self.schedule_drain()

    def purge(self) -> int:
        count = self.store.purge()
        self._mark_dirty(self)
        return count

    # ---- expiry --------------------------------------------------------------------------

    def _arm_expiry(self, due: int | None = None) -> None:
        """Make sure a timer fires by the next expiry: the head's (queue TTL) or the index's."""
        if self.deleted:
            return
        candidates = [d for d in (due, self._expiry.next_due(), self._head_due()) if d is not None]
        if not candidates:
            return
        next_due = min(candidates)
        if self._expiry_timer is not None:
            if self._expiry_due <= next_due:
                return
            self._expiry_timer.cancel()
        self._expiry_due = next_due
        delay = max(0.0, (next_due - now_ms()) / 1000)
        self._expiry_timer = self.loop.call_later(delay, self._expire_due)

    def _head_due(self) -> int | None:
        ttl = self.settings.message_ttl
        if ttl is None or not len(self.store):
            return None
        head = self.store.peek()
        return None if head is None else head[1].timestamp + ttl

    def _expire_due(self) -> None:
        self._expiry_timer = None
        if self.deleted:
            return
        now = now_ms()
        store = self.store
        for message_id in self._expiry.pop_due(now):
            message = store.read(message_id)
            store.remove(message_id)
            self._discard_removed(message_id, message)
        ttl = self.settings.message_ttl
        while ttl is not None and (head := store.peek()) is not None and head[1].timestamp + ttl <= now:
            item = store.take()
            assert item is not None
            self._discard(item[0], item[1], "expired")
        self._arm_expiry()

    def _discard_removed(self, message_id: int, message: Message) -> None:
        self.vhost.dead_letter(self, message, "expired")
        self._mark_dirty(self)
        if self._delivery_counts is not None:
            self._delivery_counts.forget(message_id)

    # ---- lifecycle -----------------------------------------------------------------------

    def flush_store(self) -> list[int]:
        return [] if self.deleted else self.store.flush()

    def _stop_timers(self) -> None:
        super()._stop_timers()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if self._delivery_counts is not None:
            self._delivery_counts.close()

    def close(self) -> None:
        self.deleted = True
        self._stop_timers()
        self.store.close()

    def delete(self) -> None:
        self.deleted = True
        self._stop_timers()
        self.store.delete()
