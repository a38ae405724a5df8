"""The messages a delayed exchange holds until their `x-delay` is over.

Each delayed exchange has a segment store of its own, under `<vhost dir>/delayed/<sha1 of
the exchange name>/` (in the vhost's transient dir when the exchange is not durable). A held
message is pushed and at once marked taken, so it stays on disk until it is released and
acked; recovery takes every persistent one back. In memory there is only a min-heap of
(due time, message id): messages come out by due time, then in publish order.

As in RabbitMQ, the held copy carries `x-delay` negated, which is what receivers see and
what keeps it from being held again on its way out; a delay above 2^32-1 ms, zero, negative
or not a number routes at once.
"""

from __future__ import annotations

import logging
import time
from heapq import heappop, heappush
from pathlib import Path
from typing import TYPE_CHECKING

from lavin.api import Message, errors
from lavin.api.message import encode_properties, is_persistent
from lavin.api.printable import printable
from lavin.broker.queues.queue import NEEDS_SYNC, STORED
from lavin.storage.segments.segment_store import SegmentStore

if TYPE_CHECKING:
    import asyncio

    from lavin.broker.routing.exchange import Exchange

log = logging.getLogger(__name__)

DELAY_HEADER = "x-delay"
MAX_DELAY = (1 << 32) - 1  # ms; RabbitMQ's limit, that of an Erlang timer
# Releases per loop callback, so a backlog coming due at once cannot stall the broker.
RELEASE_BATCH = 256

_HEADERS_FLAG = 0x20  # in the first byte of the property flags


def now_ms() -> int:
    return int(time.time() * 1000)


def header_delay(message: Message) -> int | None:
    """The `x-delay` header as an int (numeric strings included), or None."""
    properties = message.properties
    if len(properties) < 2 or not properties[0] & _HEADERS_FLAG:
        return None
    value = message.headers.get(DELAY_HEADER)
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def requested_delay(message: Message) -> int:
    """How long a message asks to be held, in ms; 0 when it should be routed now."""
    delay = header_delay(message)
    return delay if delay is not None and 0 < delay <= MAX_DELAY else 0


class DelayedMessages:
    """The hold of one delayed exchange; a routing target like a queue."""

    def __init__(self, exchange: Exchange, path: Path, durable: bool) -> None:
        self.exchange = exchange
        # Named like LavinMQ's internal queue; `amq.` names cannot clash with a client's queue.
        self.name = f"amq.delayed-{exchange.name}"
        storage = exchange.vhost.storage
        self.store = SegmentStore(path, durable, storage.segment_size, storage.closed_cleanly)
        self.deleted = False
        self._due: list[tuple[int, int]] = []  # heap of (due ms, message id)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0
        self._recover()

    def __len__(self) -> int:
        return len(self._due)

    def holds(self, message: Message) -> bool:
        return requested_delay(message) > 0

    def publish(self, message: Message) -> int:
        """Hold a message; like Queue.publish, NEEDS_SYNC when its confirm waits for the disk."""
        delay = requested_delay(message)
        props = dict(message.props)
        props["headers"] = {**props["headers"], DELAY_HEADER: -delay}
        received = message.timestamp or now_ms()
        held = Message(message.exchange, message.routing_key, encode_properties(props), message.body, received)
        message_id = self.store.push_taken(held)  # held apart, never ready: taken at once
        heappush(self._due, (received + delay, message_id))
        self._mark_dirty()
        self._arm()
        return NEEDS_SYNC if self.store.durable and is_persistent(message.properties) else STORED

    def flush_store(self) -> list[int]:
        """Group commit: hand buffered writes to the OS, return fds to fsync."""
        return [] if self.deleted else self.store.flush()

    def close(self) -> None:
        """Write everything out and release the files; the messages stay for the next start."""
        self._stop()
        self.store.close()

    def delete(self) -> None:
        """Drop every held message."""
        self._stop()
        self.store.delete()

    def _stop(self) -> None:
        self.deleted = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _recover(self) -> None:
        store = self.store
        while (item := store.take()) is not None:
            message_id, message, _ = item
            stored = header_delay(message)
            delay = -stored if stored is not None and stored < 0 else 0
            heappush(self._due, (message.timestamp + delay, message_id))
        if self._due:
            log.info("exchange '%s': %d delayed messages recovered", printable(self.exchange.name), len(self._due))
            self._arm()

    def _arm(self) -> None:
        """Make sure a timer fires when the earliest held message is due."""
        if not self._due or self.deleted:
            return
        due = self._due[0][0]
        if self._timer is not None:
            if self._timer_due <= due:
                return
            self._timer.cancel()
        self._timer_due = due
        loop = self.exchange.vhost.loop
        self._timer = loop.call_later(max(0.0, (due - now_ms()) / 1000), self._release_due)

    def _release_due(self) -> None:
        self._timer = None
        if self.deleted:
            return
        now = now_ms()
        store = self.store
        for _ in range(RELEASE_BATCH):
            if not self._due or self._due[0][0] > now:
                break
            _, message_id = heappop(self._due)
            message = store.read(message_id)
            store.ack(message_id)
            try:
                self.exchange.publish_now(message)
            except (errors.AMQPError, ValueError) as exc:
                log.warning("exchange '%s': delayed message dropped: %s", printable(self.exchange.name), printable(exc))
        self._mark_dirty()
        self._arm()

    def _mark_dirty(self) -> None:
        self.exchange.vhost.group_commit.mark_dirty(self)
