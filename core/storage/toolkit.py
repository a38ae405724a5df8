"""The storage engines as queue types receive them (`lavin.api.StorageToolkit`)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from lavin.api.queue import QueueType, Retention, StreamType
from lavin.storage.disk import ensure_directory, recreate_directory
from lavin.storage.segments.segment_files import list_ids
from lavin.storage.segments.segment_store import DEFAULT_SEGMENT_SIZE, SegmentStore
from lavin.storage.streams.stream_store import StreamStore

# The segment store is compiled, and a compiled class cannot subclass the interpreted
# QueueType: it is one by registration.
QueueType.register(SegmentStore)


class SegmentStorage:
    """Segment-file stores: FIFO queues and stream logs, in segments of `segment_size`
    bytes (the `[main] segment_size` setting) unless a stream asks for its own size."""

    max_stream_segment_size = StreamStore.MAX_SEGMENT_SIZE

    def __init__(self, segment_size: int = DEFAULT_SEGMENT_SIZE) -> None:
        self.segment_size = segment_size
        # While the broker recovers from a clean shutdown: stores skip the records' crcs.
        self.closed_cleanly = False

    def fifo_store(self, path: Path, durable: bool) -> QueueType:
        return cast(QueueType, SegmentStore(path, durable, self.segment_size, self.closed_cleanly))

    def stream_store(self, path: Path, segment_size: int | None, retention: Retention) -> StreamType:
        return StreamStore(path, segment_size=segment_size or self.segment_size, retention=retention)

    def ensure_directory(self, path: Path) -> None:
        ensure_directory(path)

    def recreate_directory(self, path: Path) -> None:
        recreate_directory(path)

    def numbered_entries(self, directory: Path, prefix: str, digits: int) -> list[int]:
        return list_ids(directory, prefix, digits)
