"""A stream consumer of a follower's read session: it reads the follower's replica of the
stream queue (lavin.storage.streams.stream_replica) in a worker thread, never more than
its prefetch allows nor beyond what every in-sync replica has (lavin.clustering.
read_horizon), and at the stream's tail waits for the replication to extend it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from lavin.amqp import codec
from lavin.api import Message
from lavin.broker.queues.stream_consumer import with_offset
from lavin.clustering.read_horizon import ReadHorizon, ReadHorizons
from lavin.storage.streams.stream_replica import StreamReplica, find_stream

log = logging.getLogger(__name__)

TAIL_POLL: Final = 0.1  # seconds between looks at a replica while a consumer waits at its tail
BATCH_BYTES: Final = 4 << 20  # read at most this much at a time (one larger record is still read)
SETTLE_TIMEOUT: Final = 2.0  # seconds an opened replica waits for the in-sync replicas to have what it saw


class ReplicaStream:
    """One stream queue's replica, named for the errors about it; what
    `lavin.broker.queues.stream_consumer.offset_in` needs to place a consumer."""

    def __init__(self, replica: StreamReplica, queue: str, vhost: str, horizon: ReadHorizon) -> None:
        self.replica = replica
        self.queue = queue
        self.vhost = vhost
        self.horizon = horizon

    @classmethod
    async def open(cls, data_dir: Path, vhost: str, queue: str, horizons: ReadHorizons) -> ReplicaStream | None:
        """The replica of stream queue `queue`, looked at once, and shown as far as the
        in-sync replicas have it (within SETTLE_TIMEOUT); None when there is none."""
        found = await asyncio.to_thread(_find, data_dir, vhost, queue, horizons)
        if found is None:
            return None
        stream = cls(StreamReplica(found[0]), queue, vhost, found[1])
        await asyncio.to_thread(stream.look)
        deadline = asyncio.get_running_loop().time() + SETTLE_TIMEOUT
        while not stream.horizon.advance() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(TAIL_POLL / 2)
        return stream

    def look(self) -> None:
        """Look at the files again (blocking)."""
        before = self.horizon.before_look()
        self.replica.refresh()
        self.horizon.looked(before, self.replica.next_offset)

    @property
    def first_offset(self) -> int:
        return self.replica.first_offset

    @property
    def next_offset(self) -> int:
        """The next offset that may be shown."""
        return max(self.first_offset, min(self.replica.next_offset, self.horizon.visible))

    def offset_at(self, timestamp: int) -> int:
        return self.replica.offset_at(timestamp)

    def resource(self) -> str:
        return f"queue '{self.queue}' in vhost '{self.vhost}'"

    def info(self) -> Mapping[str, int]:
        """The stream-info reply's headers, as the leader's stream queue gives them (blocking)."""
        first, end = self.first_offset, self.next_offset
        info = {"x-stream-first-offset": first, "x-stream-next-offset": end, "x-stream-message-count": end - first}
        if end > first:
            oldest, newest = self.replica.read(first, 1, 1), self.replica.read(end - 1, 1, 1)
            if oldest and newest:
                info["x-stream-first-timestamp"] = oldest[0][1].timestamp
                info["x-stream-last-timestamp"] = newest[0][1].timestamp
        return info


def _find(data_dir: Path, vhost: str, queue: str, horizons: ReadHorizons) -> tuple[Path, ReadHorizon] | None:
    directory = find_stream(data_dir, vhost, queue)
    if directory is None:
        return None
    try:
        return directory, horizons.of(directory)
    except FileNotFoundError:
        return None  # deleted meanwhile


Deliver = Callable[["ReplicaConsumer", int, Message], None]  # the consumer, the offset, the message


class ReplicaConsumer:
    """Reads from `offset` on and hands each message to `deliver`, up to `prefetch` unsettled."""

    def __init__(
        self, tag: str, stream: ReplicaStream, offset: int, prefetch: int, deliver: Deliver, failed: Callable[[], None]
    ) -> None:
        self.tag = tag
        self.encoded_tag = codec.shortstr(tag)
        self.stream = stream
        self.offset = offset
        self.prefetch = prefetch
        self.unsettled = 0
        self._deliver = deliver
        self._failed = failed
        self._credit = asyncio.Event()
        self._reading: asyncio.Future[list[tuple[int, Message]]] | None = None
        self._task = asyncio.ensure_future(self._run())

    def settled(self, count: int) -> None:
        """`count` deliveries acked, nacked or rejected: as much prefetch credit back."""
        self.unsettled = max(0, self.unsettled - count)
        self._credit.set()

    def stop(self) -> None:
        self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                room = self.prefetch - self.unsettled
                if room <= 0:
                    self._credit.clear()
                    await self._credit.wait()
                    continue
                self._reading = loop.run_in_executor(None, self._read, room)
                batch = await asyncio.shield(self._reading)
                self._reading = None
                if not batch:
                    await asyncio.sleep(TAIL_POLL)
                    continue
                for offset, message in batch:
                    self.unsettled += 1
                    self._deliver(self, offset, with_offset(message, offset))
                self.offset = batch[-1][0] + 1
        except OSError as exc:
            log.warning("Reading %s on this follower failed: %s", self.stream.resource(), exc)
            self._failed()
        finally:
            self._close_after_read()

    def _read(self, count: int) -> list[tuple[int, Message]]:
        stream = self.stream
        stream.look()
        visible = stream.next_offset
        if self.offset >= visible:
            return []
        return [record for record in stream.replica.read(self.offset, count, BATCH_BYTES) if record[0] < visible]

    def _close_after_read(self) -> None:
        """Close the replica, once a read still running in its worker thread is done."""
        reading = self._reading
        if reading is None or reading.done():
            self.stream.replica.close()
            return

        def close(done: asyncio.Future[list[tuple[int, Message]]]) -> None:
            if not done.cancelled():
                done.exception()  # retrieved: the consumer is gone, nobody else asks
            self.stream.replica.close()

        reading.add_done_callback(close)
