"""The core side of a stream queue: declare rules, consumers reading at their own offsets,
what is visible, and the offsets that named consumers resume from.

The queue type plugin (a `StreamType`) stores the log. Messages become visible to
consumers, and to stream-info requests, only once they are on disk: a commit is one
group-commit fsync, after which `committed_offset` moves on. So an offset that anybody
saw can never be lost in a crash and handed out again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lavin.api import Message, StreamType, errors
from lavin.api.printable import printable
from lavin.broker.policy.arguments import QueueSettings, check_durable_declaration
from lavin.broker.policy.policies import stream_retention
from lavin.broker.policy.queue_arguments import refused_by
from lavin.broker.queues.consumer import Consumer
from lavin.broker.queues.queue import DRAIN_BATCH, NEEDS_SYNC, Queue, QueueDeclaration
from lavin.broker.queues.stream_consumer import (
    OFFSET_ARGUMENT,
    StreamReader,
    parse_filter,
    start_offset,
    tracking,
)
from lavin.storage.streams.stream_offsets import ConsumerOffsets

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from lavin.broker.queues.host import QueueHost

log = logging.getLogger(__name__)

RETENTION_INTERVAL = 60.0  # seconds between retention checks of an idle stream

# Arguments that make no sense for a log, refused at declare as RabbitMQ refuses them.
UNSUPPORTED_ARGUMENTS = refused_by("stream")


def check_stream_declaration(
    name: str, vhost: str, *, durable: bool, exclusive: bool, auto_delete: bool, arguments: dict[str, Any]
) -> None:
    """406 for what a stream cannot be, with RabbitMQ's texts and in its order."""
    resource = f"queue '{name}' in vhost '{vhost}'"
    for argument in arguments:  # the first refused one in the client's order, as RabbitMQ reports
        if argument in UNSUPPORTED_ARGUMENTS:
            raise errors.PreconditionFailed(f"invalid arg '{argument}' for {resource} of queue type stream")
    check_durable_declaration(name, vhost, durable=durable, exclusive=exclusive, auto_delete=auto_delete)


class StreamQueue(Queue):
    """A queue whose messages stay after ack; each consumer reads from its own offset."""

    def __init__(
        self, vhost: QueueHost, declaration: QueueDeclaration, settings: QueueSettings, store: StreamType
    ) -> None:
        super().__init__(vhost, declaration, settings)
        self.store = store
        self._readers: dict[Consumer, StreamReader] = {}
        self._offsets = ConsumerOffsets(store.path)
        self._committed = store.written_offset  # a recovered log is on disk
        self._commit_requested = False
        self._retention_timer: asyncio.TimerHandle = self.loop.call_later(RETENTION_INTERVAL, self._retention_tick)

    def __repr__(self) -> str:
        return f"<StreamQueue {self.name!r}>"

    @property
    def committed_offset(self) -> int:
        """Messages below this offset are on disk and visible."""
        return self._committed

    @property
    def message_count(self) -> int:
        return self._committed - self.store.first_offset

    def apply_policy(self, definition: Mapping[str, Any]) -> None:
        """A policy sets a stream's retention (`max-length-bytes`, `max-age`)."""
        self.store.apply_retention_policy(stream_retention(definition))

    def resource(self) -> str:
        return f"queue '{self.name}' in vhost '{self.vhost.name}'"

    # ---- publishing and commits ------------------------------------------------------------

    def publish(self, message: Message) -> int:
        """Append; consumers see the message after the fsync that also confirms it."""
        self.published += 1
        self.store.push(message)
        self._mark_dirty(self)
        if not self._commit_requested:
            self._commit_requested = True
            self.vhost.group_commit.wait_for_sync(self._prepare_commit)
        return NEEDS_SYNC

    def _prepare_commit(self) -> Callable[[bool], None]:
        """Runs right after this tick's flush: what has reached the OS is what the sync covers."""
        self._commit_requested = False
        upto = self.store.written_offset
        return lambda ok: self._commit(upto, ok)

    def _commit(self, upto: int, ok: bool) -> None:
        if self.deleted:
            return
        if not ok:
            # The publishers get nacks; the messages show once a later sync covers them.
            log.error(
                "stream %s: fsync failed; offsets from %d wait for the next sync",
                printable(self.resource()),
                self._committed,
            )
            return
        if upto > self._committed:
            self._committed = upto
            self.store.synced(upto)
            self.schedule_drain()

    def flush_store(self) -> list[int]:
        if self.deleted:
            return []
        fds = self.store.flush()
        self._offsets.flush(self.store.first_offset)
        return fds

    def _retention_tick(self) -> None:
        self.store.enforce_retention()
        self._retention_timer = self.loop.call_later(RETENTION_INTERVAL, self._retention_tick)

    # ---- consumers -----------------------------------------------------------------------

    def prepare_reader(self, consumer: Consumer) -> None:
        """Check a new consumer against the stream's rules and place its cursor; called
        before consume-ok, so that a refusal comes instead of it."""
        resource = self.resource()
        if not consumer.prefetch:
            raise errors.PreconditionFailed(f"consumer prefetch count is not set for stream {resource}")
        if consumer.no_ack:
            raise errors.NotImplemented_(f"automatic acknowledgement not supported by stream {resource}")
        if consumer.shares_credit():
            raise errors.NotImplemented_(f"{resource} does not support global qos")
        tracked = tracking(self, consumer)
        # Checked even when a stored offset wins, so that a bad argument is always refused.
        start = start_offset(self, consumer.arguments.get(OFFSET_ARGUMENT))
        stored = self._offsets.get(consumer.tag) if tracked else None
        if stored is not None:  # a tracked consumer resumes where it acked, whatever it asked for
            start = min(max(stored, self.store.first_offset), self._committed)
        cursor = self.store.cursor(start)
        self._readers[consumer] = StreamReader(self, consumer, cursor, parse_filter(consumer.arguments), tracked)

    def remove_consumer(self, consumer: Consumer) -> None:
        reader = self._readers.pop(consumer, None)
        if reader is not None:
            reader.active = False
        super().remove_consumer(consumer)

    def store_offset(self, tag: str, offset: int) -> None:
        """A tracked consumer acked up to `offset`; written at the next flush."""
        self._offsets.store(tag, offset)
        self._mark_dirty(self)

    def _can_deliver(self) -> bool:
        if self.deleted:
            return False
        committed = self._committed
        readers = self._readers
        return any(readers[consumer].has_pending(committed) for consumer in self.consumers)

    def _deliver_batch(self) -> None:
        committed = self._committed
        unfinished = False
        for consumer in list(self.consumers):
            reader = self._readers.get(consumer)
            if reader is not None and reader.drain(committed, DRAIN_BATCH):
                unfinished = True
        if unfinished:
            self.schedule_drain()

    # ---- stream info -----------------------------------------------------------------------

    def stream_info(self) -> dict[str, int]:
        """The visible range: first and next offset, message count and, unless empty, the
        arrival times (ms) of the first and the last message."""
        first, end = self.store.first_offset, self._committed
        info = {"x-stream-first-offset": first, "x-stream-next-offset": end, "x-stream-message-count": end - first}
        if end > first:
            info["x-stream-first-timestamp"] = self.store.read(first).timestamp
            info["x-stream-last-timestamp"] = self.store.read(end - 1).timestamp
        return info

    # ---- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._stop()
        self.store.close()

    def delete(self) -> None:
        self._stop()
        self.store.delete()

    def _stop(self) -> None:
        self.deleted = True
        self._stop_timers()
        self._retention_timer.cancel()
        self._offsets.close()
