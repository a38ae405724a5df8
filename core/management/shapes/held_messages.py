"""What a queue holds, in the terms of RabbitMQ's queue fields (`message_bytes_*`,
`messages_persistent`, `messages_*_ram`) and of the Prometheus metrics named after them.

Read when asked, never counted per delivery: the channels' unacknowledged deliveries are
grouped by queue, and the queue's store is asked about those messages and about the
ready messages it keeps. docs/compatibility.md says what "persistent" and "in RAM" mean
for Lavin's stores.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from lavin.api.queue import StreamType
from lavin.broker.queues.queue import MessageQueue, Queue
from lavin.broker.queues.stream_queue import StreamQueue
from lavin.broker.runtime.stats import ConnectionSnapshot


@runtime_checkable
class HoldsDeliveries(Protocol):
    """A live channel (the protocol layer's, a ChannelSnapshot's key): its unacked deliveries."""

    @property
    def unacked(self) -> Mapping[int, tuple[object, int, object]]:
        """Delivery tag -> (where it settles, message id, consumer; None for basic.get)."""


def unacked_deliveries(connections: Iterable[ConnectionSnapshot]) -> dict[Queue, list[int]]:
    """The message ids of each queue's deliveries not acknowledged yet, on every channel:
    those of consumers since cancelled and of basic.get included, as RabbitMQ counts them."""
    by_queue: dict[Queue, list[int]] = {}
    for connection in connections:
        for channel in connection.channels:
            if isinstance(channel.key, HoldsDeliveries):
                for settles, message_id, consumer in channel.key.unacked.values():
                    # A stream's deliveries settle on the consumer's reader.
                    owner = settles if isinstance(settles, Queue) else getattr(consumer, "queue", None)
                    if isinstance(owner, Queue):
                        by_queue.setdefault(owner, []).append(message_id)
    return by_queue


@dataclass(frozen=True)
class HeldMessages:
    """Body bytes, persistent messages and messages in memory, ready and unacknowledged."""

    ready_bytes: int = 0
    unacked_bytes: int = 0
    persistent: int = 0
    persistent_bytes: int = 0
    ready_ram: int = 0
    ready_ram_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.ready_bytes + self.unacked_bytes

    def api_fields(self) -> dict[str, int]:
        """The management API's queue fields. A delivered message is not kept in memory,
        so the unacknowledged ones in RAM are none."""
        return {
            "message_bytes": self.total_bytes,
            "message_bytes_ready": self.ready_bytes,
            "message_bytes_unacknowledged": self.unacked_bytes,
            "message_bytes_persistent": self.persistent_bytes,
            "message_bytes_ram": self.ready_ram_bytes,
            "messages_persistent": self.persistent,
            "messages_ram": self.ready_ram,
            "messages_ready_ram": self.ready_ram,
            "messages_unacknowledged_ram": 0,
        }


def held_messages(queue: Queue, unacked_ids: list[int]) -> HeldMessages:
    """What `queue` holds; `unacked_ids` are its entry of `unacked_deliveries`."""
    stored = [message_id for message_id in unacked_ids if message_id >= 0]  # -1: never stored
    if isinstance(queue, MessageQueue):
        store = queue.store
        unacked_bytes, persistent, persistent_bytes = store.taken_totals(stored) if stored else (0, 0, 0)
        ready_persistent, ready_persistent_bytes = store.ready_persistent
        ram, ram_bytes = store.ready_in_memory
        return HeldMessages(
            store.ready_bytes,
            unacked_bytes,
            ready_persistent + persistent,
            ready_persistent_bytes + persistent_bytes,
            ram,
            ram_bytes,
        )
    if isinstance(queue, StreamQueue):  # its log is read from files by the consumers' readers
        return HeldMessages(queue.store.ready_bytes, _stream_bytes(queue.store, stored))
    return HeldMessages()


def _stream_bytes(stream: StreamType, offsets: list[int]) -> int:
    """Body bytes of the messages at `offsets`; one retention deleted since counts none."""
    total = 0
    for offset in offsets:
        with contextlib.suppress(LookupError):
            total += len(stream.read(offset).body)
    return total
