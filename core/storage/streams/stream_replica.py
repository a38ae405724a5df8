"""A read-only view of one stream queue's directory that another writer keeps extending: on
a follower, the replication applier writes the leader's changes into it.

The view never writes, repairs or creates a file. It numbers the segments as the stream
store does (`first_segment`, then each segment's record count; see docs/streams.md) and
sees only whole records: a record whose bytes are not all there yet, or whose crc does not
check out at the end of the file, is not counted until a later `refresh` finds it whole.
A damaged record followed by an intact one is counted (it keeps its offset) and passed
over when read, as the store does.

What never changes is cached: a segment followed by another is complete, so its index
(from its `index.N` when that describes it, else one scan) is kept, and `refresh` only
looks at `first_segment`, the directory listing and the last segment. Calls block on file
reads: run them in a worker thread. One lock orders them, so any thread may call.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_left, bisect_right
from pathlib import Path

from lavin.api.message import Message
from lavin.storage.metadata.access_files import vhost_directory_name
from lavin.storage.metadata.definitions_store import DEFINITIONS_FILE, DefinitionsStore
from lavin.storage.queue_directories import queue_directory
from lavin.storage.segments.record import (
    DAMAGED,
    FIXED_SIZE,
    FLAG_HOLE,
    HEADER_SIZE,
    decode_record,
    intact_flags,
    record_size,
)
from lavin.storage.segments.segment_files import (
    SEGMENT_PREFIX,
    ReadWindow,
    UnsupportedSegment,
    check_header,
    list_ids,
    segment_path,
)
from lavin.storage.streams.segment_walk import Locate, after_damage, first_arrived_at, seek
from lavin.storage.streams.stream_index import SegmentIndex, describes, index_path, load_index, record_timestamp
from lavin.storage.streams.stream_store import FIRST_SEGMENT_FILE, load_first_segment

log = logging.getLogger(__name__)

STREAM_TYPE = "stream"
_SCAN_CHUNK = 1 << 20
_NEVER = 1 << 64  # sorts after every timestamp: a segment without records


class _CutBack(Exception):
    """A segment file is shorter than the records counted in it: it is not the file that
    was numbered (the writer cut it back, or the stream was made again)."""


class _Segment:
    """One segment file as far as whole records go; `fd` is open only during a read."""

    __slots__ = ("complete", "fd", "id", "index", "readable")

    def __init__(self, segment_id: int, index: SegmentIndex) -> None:
        self.id = segment_id
        self.index = index
        self.fd = -1
        self.complete = False  # another segment follows it: it never grows again
        self.readable = False  # its format header was found and is known


class StreamReplica:
    """The stream in `directory` as its files show it, as of the last `refresh`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []  # ascending ids and offsets, from the first kept
        self._start = (0, 0)  # `first_segment`: the first kept segment's id and first offset
        self._start_seen: tuple[int, int, int] | None = None  # inode, mtime, size of `first_segment`
        self._directory_inode = -1
        self.refresh()

    @property
    def first_offset(self) -> int:
        """Offset of the oldest kept record; the next offset when there is none."""
        segments = self._segments
        return segments[0].index.first_offset if segments else self._start[1]

    @property
    def next_offset(self) -> int:
        """One past the last whole record."""
        segments = self._segments
        return segments[-1].index.end_offset if segments else self._start[1]

    # -- looking at the files again ------------------------------------------------------

    def refresh(self) -> None:
        """See new segments, records appended to the last one, and segments that retention
        removed. A directory that is gone leaves the view as it was."""
        with self._lock:
            try:
                try:
                    self._segments = self._refreshed(self._segments)
                except _CutBack:
                    self._start_seen = None
                    self._segments = self._refreshed([])
            except FileNotFoundError:
                pass  # the stream was deleted, or a file went between two of our calls
            except _CutBack:
                pass  # cut back again while we numbered it: the next refresh looks again

    def _refreshed(self, known: list[_Segment]) -> list[_Segment]:
        """The segments as the files now show them, `known` reused where they still hold.
        Built aside: `first_offset` and `next_offset` are read without the lock."""
        directory_inode = os.stat(self.directory).st_ino
        if directory_inode != self._directory_inode:  # a new stream of the same name: start over
            self._directory_inode, known, self._start_seen = directory_inode, [], None
        start = self._read_start()
        if start is None:
            return known
        first_id, first_offset = start
        segments = [segment for segment in known if segment.id >= first_id]  # retention removed the others
        ids = [segment_id for segment_id in list_ids(self.directory, SEGMENT_PREFIX) if segment_id >= first_id]
        if ids[: len(segments)] != [segment.id for segment in segments] or (
            segments and segments[0].index.first_offset != first_offset
        ):
            segments = []  # not the files we numbered: number them again
        self._start = start
        if segments and not segments[-1].complete:
            self._extend(segments[-1])
        for segment_id in ids[len(segments) :]:
            if segments:
                self._extend(segments[-1])  # whatever it gained before the next one began
                segments[-1].complete = True
            segment = self._open_segment(segment_id, segments[-1].index.end_offset if segments else first_offset)
            segments.append(segment)
            self._extend(segment)
        return segments

    def _read_start(self) -> tuple[int, int] | None:
        """`first_segment` (read again only when it was replaced); None while it is not
        readable, which keeps the view as it was."""
        try:
            stat = os.stat(self.directory / FIRST_SEGMENT_FILE)
        except FileNotFoundError:  # as the store numbers a log without one
            ids = list_ids(self.directory, SEGMENT_PREFIX)
            return (ids[0] if ids else 1, 0)
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen == self._start_seen:
            return self._start
        try:
            start = load_first_segment(self.directory)
        except ValueError:
            return None  # replaced whole by a rename: damage is not ours to repair
        if start is not None:
            self._start_seen = seen
        return start

    def _open_segment(self, segment_id: int, first_offset: int) -> _Segment:
        """A segment seen for the first time: its saved index when that describes it."""
        path = segment_path(self.directory, segment_id)
        saved = load_index(index_path(self.directory, segment_id))
        if saved is not None and describes(saved, first_offset, os.stat(path).st_size):
            segment = _Segment(segment_id, saved)
            segment.readable = True
            return segment
        return _Segment(segment_id, SegmentIndex(first_offset))

    def _extend(self, segment: _Segment) -> None:
        """Count the whole records the segment's file gained since the last look."""
        path = segment_path(self.directory, segment.id)
        fd = os.open(path, os.O_RDONLY)
        try:
            if not segment.readable:
                try:
                    segment.readable = check_header(fd, path)
                except UnsupportedSegment as exc:
                    log.error("%s; its records are not read", exc)
                    segment.complete = True  # read no further: the leader sets it aside
                if not segment.readable:
                    return
            file_size = os.fstat(fd).st_size
            if file_size < segment.index.size:
                raise _CutBack(path)
            _count_whole_records(fd, segment.index, file_size)
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------------

    def offset_at(self, timestamp: int) -> int:
        """The first offset whose message arrived at or after `timestamp` (ms), else the
        next offset."""
        with self._lock:
            segments = self._segments
            found = bisect_left(segments, timestamp, key=lambda s: s.index.last_timestamp if s.index.count else _NEVER)
            if found == len(segments) or not segments[found].index.count:
                return self.next_offset
            segment = segments[found]
            try:
                with _Opened(self.directory, segment) as locate:
                    return first_arrived_at(segment.index, timestamp, locate, segment_path(self.directory, segment.id))
            except FileNotFoundError:  # removed by retention: what is kept all arrived later
                return segment.index.end_offset

    def read(self, offset: int, max_count: int, max_bytes: int) -> list[tuple[int, Message]]:
        """Up to `max_count` messages with their offsets from `offset` (from the first kept
        one when `offset` is below it), holes and damaged records passed over, stopping
        before `max_bytes` of records; at least one when there is one."""
        with self._lock:
            found: list[tuple[int, Message]] = []
            offset = max(offset, self.first_offset)
            taken_bytes = 0
            while offset < self.next_offset and len(found) < max_count:
                segment = self._segments[bisect_right(self._segments, offset, key=lambda s: s.index.first_offset) - 1]
                index = segment.index
                path = segment_path(self.directory, segment.id)
                try:
                    with _Opened(self.directory, segment) as locate:
                        offset, position = seek(index, offset, locate, path)
                        while offset < index.end_offset and len(found) < max_count:
                            buffer, start, size = locate(position)
                            flags = intact_flags(buffer, start, size)
                            if flags == DAMAGED:
                                offset, position = after_damage(index, offset, position, size, locate, path)
                                continue
                            if not flags & FLAG_HOLE:
                                if found and taken_bytes + size > max_bytes:
                                    return found
                                found.append((offset, decode_record(buffer, start)))
                                taken_bytes += size
                            offset, position = offset + 1, position + size
                except FileNotFoundError:  # retention removed it since the last refresh
                    offset = index.end_offset
            return found

    def close(self) -> None:
        """Forget the segments; no file stays open between calls."""
        with self._lock:
            self._segments = []


class _Opened:
    """A segment's file, open for one read: `locate` for `segment_walk`."""

    def __init__(self, directory: Path, segment: _Segment) -> None:
        self._path = segment_path(directory, segment.id)
        self._segment = segment

    def __enter__(self) -> Locate:
        segment = self._segment
        segment.fd = os.open(self._path, os.O_RDONLY)
        window = ReadWindow()
        return lambda position: window.locate(segment, position)

    def __exit__(self, *_: object) -> None:
        os.close(self._segment.fd)
        self._segment.fd = -1


def _count_whole_records(fd: int, index: SegmentIndex, file_size: int) -> None:
    """Add to `index` the records from its end that are whole in the file's first
    `file_size` bytes. One failing its crc counts only when an intact record follows it
    (damage, which keeps its offset); at the end of the file it is still being written."""
    position = index.size
    chunk, chunk_start = b"", position
    while position + HEADER_SIZE <= file_size:
        start = position - chunk_start
        if start + HEADER_SIZE > len(chunk):
            chunk, chunk_start, start = os.pread(fd, min(_SCAN_CHUNK, file_size - position), position), position, 0
            if len(chunk) < HEADER_SIZE:  # cut back since the fstat
                return
        size = record_size(chunk, start)
        if position + size > file_size:
            return
        if start + size > len(chunk):
            chunk, chunk_start, start = os.pread(fd, max(_SCAN_CHUNK, size), position), position, 0
        if intact_flags(chunk, start, size) != DAMAGED:
            timestamp = record_timestamp(chunk, start)
        elif size >= FIXED_SIZE and _intact_record_at(fd, position + size, file_size):
            timestamp = index.last_timestamp
        else:
            return
        index.add(position, size, timestamp)
        position += size


def _intact_record_at(fd: int, position: int, file_size: int) -> bool:
    if position + HEADER_SIZE > file_size:
        return False
    head = os.pread(fd, HEADER_SIZE, position)
    size = record_size(head, 0)
    if position + size > file_size:
        return False
    return intact_flags(os.pread(fd, size, position), 0, size) != DAMAGED


def find_stream(data_dir: Path, vhost: str, queue: str) -> Path | None:
    """The directory of the durable stream queue `queue` of `vhost`, as the definitions in
    `data_dir` declare it (read without writing); None when there is no such queue or it is
    not a stream."""
    vhost_dir = data_dir / vhost_directory_name(vhost)
    definition = DefinitionsStore(vhost_dir / DEFINITIONS_FILE).read().queues.get(queue)
    if definition is None or definition.arguments.get("x-queue-type") != STREAM_TYPE:
        return None
    return queue_directory(vhost_dir, queue)
