"""The log of one stream queue: append-only segment files, read by offset.

Records use the segment-store format (`lavin.storage.segments.record`). A message's offset is
implicit: its segment's first offset plus its place in the segment; offsets start at 0,
have no gaps and are never reused. Each segment keeps a sparse index in memory (see
`lavin.storage.streams.stream_index`), saved as `index.N` once the segment is sealed and synced.
Retention deletes whole segments from the front, never the one being written, and only
segments whose records are all on disk.

`first_segment` holds the id and first offset of the oldest kept segment; it is replaced
(synced) before segments are deleted, so recovery numbers the remaining segments exactly as
before. Nothing is read from the write buffer by cursors: callers read below the offset
they know is on disk. docs/streams.md describes the files and the recovery rules.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import zlib
from bisect import bisect_left, bisect_right
from collections import deque
from pathlib import Path
from typing import ClassVar

from lavin.api.message import Message, is_persistent
from lavin.api.queue import Retention, StreamType
from lavin.storage import changes, quarantine
from lavin.storage.changes import CHANGES
from lavin.storage.disk import ensure_directory
from lavin.storage.segments.open_files import OPEN_FILES, PooledDirectory
from lavin.storage.segments.record import (
    DAMAGED,
    FILE_HEADER_BYTES,
    FILE_HEADER_SIZE,
    FIXED_SIZE,
    FLAG_HOLE,
    FLAG_PERSISTENT,
    RecordEncoder,
    decode_record,
    hole_records,
    intact_flags,
    now_ms,
    record_size,
)
from lavin.storage.segments.segment_files import (
    ReadWindow,
    UnsupportedSegment,
    check_header,
    create_segment_file,
    list_segments,
    rolled_over,
    segment_path,
    write_at,
)
from lavin.storage.streams.segment_walk import Locate, after_damage, first_arrived_at, seek
from lavin.storage.streams.stream_index import (
    INDEX_PREFIX,
    SegmentIndex,
    describes,
    index_path,
    load_index,
    save_index,
    scan_index,
)

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_SIZE = 8 << 20
FIRST_SEGMENT_FILE = "first_segment"
_FIRST_SEGMENT = struct.Struct("<QQ")  # segment id, its first offset; then a crc32 of both
_CRC = struct.Struct("<I")
_WRITE_BUFFER_LIMIT = 1 << 20
_NEVER = 1 << 64  # sorts after every timestamp: the empty segment being written


class _Segment:
    """One segment file; an entry of the open-file pool (OPEN_FILES)."""

    __slots__ = ("fd", "id", "index")

    def __init__(self, segment_id: int, fd: int, index: SegmentIndex) -> None:
        self.id = segment_id
        self.fd = fd  # -1 while closed: not written yet, given back to the pool, or deleted
        self.index = index

    def take_fds(self) -> list[int]:
        """The pool takes the fd back; the store reopens the file when it next reads it."""
        fd, self.fd = self.fd, -1
        return [fd] if fd >= 0 else []


class LogCursor:
    """One reader's position in the log: sequential reads cost one pread per 128 KiB."""

    __slots__ = ("_position", "_segment", "_store", "_window", "offset")

    def __init__(self, store: StreamStore, offset: int) -> None:
        self._store = store
        self._segment: _Segment | None = None  # found lazily: the offset may not exist yet
        self._position = 0
        self._window = ReadWindow()
        self.offset = offset

    def next(self, limit: int) -> tuple[int, Message] | None:
        """(offset, message) at the cursor, then advance; None once the cursor reaches
        `limit`. Offsets that retention deleted, holes and damaged records are passed over."""
        store = self._store
        if self.offset < store.first_offset:
            self.offset, self._segment = store.first_offset, None
        offset = self.offset
        while offset < limit:
            segment = self._segment
            if segment is None or offset >= segment.index.end_offset:
                segment = self._segment = store._segment_for(offset)
                offset, self._position = store._seek(segment, offset, self._window)
                self.offset = offset
                continue  # the seek may have passed damaged records, and the limit
            position = self._position
            buffer, start, size = store._locate(segment, position, self._window)
            flags = intact_flags(buffer, start, size)
            if flags == DAMAGED:
                offset, self._position = store._after_damage(segment, offset, position, size, self._window)
                self.offset = offset
                continue
            self._position = position + size
            self.offset = offset + 1
            if not flags & FLAG_HOLE:
                return offset, decode_record(buffer, start)
            offset += 1
        return None


class StreamStore(StreamType):
    """The segments of one stream in `path`; an existing log is recovered on open."""

    MAX_SEGMENT_SIZE: ClassVar[int] = 1 << 32  # positions in a segment are u32

    def __init__(self, path: Path, *, segment_size: int | None = None, retention: Retention = Retention()) -> None:
        """`segment_size` defaults to 8 MiB; a record larger than it gets a segment of its own."""
        self._records = RecordEncoder()
        if segment_size is not None and not 0 < segment_size <= self.MAX_SEGMENT_SIZE:
            raise ValueError(f"segment_size must be between 1 byte and 4 GiB, not {segment_size}")
        self.path = path
        self.durable = True
        self.segment_size = segment_size or DEFAULT_SEGMENT_SIZE
        self.retention = retention
        self._declared_retention = retention  # from the declare arguments, before any policy
        self._segments: list[_Segment] = []  # ascending ids and offsets
        self._sealed: deque[_Segment] = deque()  # rolled over, index not saved yet
        self._write_buffer = bytearray()
        self._written_bytes = 0  # of the write segment, handed to the OS
        self._write_end = FILE_HEADER_SIZE  # position of the next record
        self._write_dirty = False
        self._end_offset = 0
        self._written_offset = 0
        self._synced_offset = 0
        self._bytes = 0
        self._last_timestamp = 0
        self._sync_segments: list[_Segment] = []  # written since the last flush that returned their fds
        self._dir_changed = False
        self._write_failing = False  # the last write failed: the buffer waits for the next flush
        self._directory = PooledDirectory(path)
        ensure_directory(path)
        next_id = self._recover()
        self._create_write_segment(next_id)

    # -- appending -------------------------------------------------------------------------

    def push(self, message: Message) -> int:
        """Append a message; return its offset."""
        exchange, routing_key, size = self._records.prepare(message)
        position = self._write_end
        if position + size > self.segment_size and position > FILE_HEADER_SIZE and self._rolled():
            position = FILE_HEADER_SIZE
        # Never earlier than the previous record, so that timestamps can be searched.
        timestamp = max(message.timestamp or now_ms(), self._last_timestamp)
        properties = message.properties
        flags = FLAG_PERSISTENT if is_persistent(properties) else 0
        self._records.append_head(self._write_buffer, timestamp, exchange, routing_key, properties, message.body, flags)
        self._write_buffer += message.body
        self._last_timestamp = timestamp
        self._write.index.add(position, size, timestamp)
        self._write_end = position + size
        self._write_dirty = True
        self._bytes += size
        offset = self._end_offset
        self._end_offset = offset + 1
        if len(self._write_buffer) > _WRITE_BUFFER_LIMIT and not self._write_failing:
            with contextlib.suppress(OSError):  # the buffer waits for the flush, which reports it
                self._write_out()
        return offset

    def flush(self) -> list[int]:
        """Hand buffered records to the OS; return the fds to fsync before `synced`.

        Raises OSError when a write fails: the records stay buffered, the file ends at its
        last whole record, and `written_offset` stays until a flush writes them."""
        self._write_out()
        if self._write_dirty:
            self._sync_segments.append(self._write)
            self._write_dirty = False
        OPEN_FILES.hold()  # opening one must not close another returned here
        try:
            fds = {self._segment_fd(segment) for segment in self._sync_segments}
            if self._dir_changed:
                fds.add(self._directory.open())
        finally:
            OPEN_FILES.unhold()
        self._sync_segments.clear()
        self._dir_changed = False
        self._written_offset = self._end_offset
        return list(fds)

    def synced(self, offset: int) -> None:
        """Records below `offset` are on disk: save the index of sealed segments, and let
        retention delete them."""
        self._synced_offset = max(self._synced_offset, offset)
        sealed = self._sealed
        while sealed and sealed[0].index.end_offset <= self._synced_offset:
            segment = sealed.popleft()
            if segment.id >= self._segments[0].id:  # else retention deleted it
                save_index(index_path(self.path, segment.id), segment.index)
        self.enforce_retention()

    def apply_retention_policy(self, policy: Retention) -> None:
        declared = self._declared_retention
        self.retention = Retention(
            max_length=declared.max_length,
            max_bytes=declared.max_bytes if policy.max_bytes is None else policy.max_bytes,
            max_age_ms=declared.max_age_ms if policy.max_age_ms is None else policy.max_age_ms,
        )
        self.enforce_retention()

    def enforce_retention(self) -> None:
        """Delete the oldest segments while the log breaks a limit, keeping the write segment
        and any segment not fully on disk."""
        retention = self.retention
        segments = self._segments
        oldest_kept = now_ms() - retention.max_age_ms if retention.max_age_ms is not None else -1
        count = len(self)
        size = self._bytes
        drop = 0
        while drop < len(segments) - 1:
            index = segments[drop].index
            if index.end_offset > self._synced_offset:
                break
            if not (
                (retention.max_length is not None and count > retention.max_length)
                or (retention.max_bytes is not None and size > retention.max_bytes)
                or index.last_timestamp < oldest_kept
            ):
                break
            count -= index.count
            size -= index.size
            drop += 1
        if drop:
            self._drop_oldest(drop)

    # -- reading ---------------------------------------------------------------------------

    @property
    def first_offset(self) -> int:
        """Offset of the oldest kept message; the next offset when the log is empty."""
        return self._segments[0].index.first_offset

    @property
    def end_offset(self) -> int:
        """The offset the next `push` returns."""
        return self._end_offset

    @property
    def written_offset(self) -> int:
        """Records below this offset were handed to the OS by `flush` (or a roll-over)."""
        return self._written_offset

    def __len__(self) -> int:
        return self._end_offset - self.first_offset

    @property
    def ready_bytes(self) -> int:
        """Bytes of the kept segments, headers included: what x-max-length-bytes limits."""
        return self._bytes

    def cursor(self, offset: int) -> LogCursor:
        return LogCursor(self, offset)

    def read(self, offset: int) -> Message:
        """The message at `offset`; LookupError when retention deleted it or it does not exist."""
        item = LogCursor(self, offset).next(min(offset + 1, self._end_offset))
        if item is None or item[0] != offset:
            raise LookupError(
                f"offset {offset} is not in the stream (first {self.first_offset}, end {self._end_offset})"
            )
        return item[1]

    def offset_at(self, timestamp: int) -> int:
        """The first offset whose message arrived at or after `timestamp` (ms), else the end."""
        segments = self._segments
        found = bisect_left(segments, timestamp, key=lambda s: s.index.last_timestamp if s.index.count else _NEVER)
        if found == len(segments) or not segments[found].index.count:
            return self._end_offset
        segment = segments[found]
        return first_arrived_at(segment.index, timestamp, self._locator(segment, ReadWindow()), self._path_of(segment))

    def _segment_for(self, offset: int) -> _Segment:
        return self._segments[bisect_right(self._segments, offset, key=lambda s: s.index.first_offset) - 1]

    def _seek(self, segment: _Segment, offset: int, window: ReadWindow) -> tuple[int, int]:
        return seek(segment.index, offset, self._locator(segment, window), self._path_of(segment))

    def _after_damage(
        self, segment: _Segment, offset: int, position: int, size: int, window: ReadWindow
    ) -> tuple[int, int]:
        locate = self._locator(segment, window)
        return after_damage(segment.index, offset, position, size, locate, self._path_of(segment))

    def _locator(self, segment: _Segment, window: ReadWindow) -> Locate:
        return lambda position: self._locate(segment, position, window)

    def _path_of(self, segment: _Segment) -> Path:
        return segment_path(self.path, segment.id)

    def _locate(self, segment: _Segment, position: int, window: ReadWindow) -> tuple[bytes, int, int]:
        """(buffer, offset in it, size) of the record at `position` of `segment`."""
        if segment is self._write and position >= self._written_bytes:  # not handed to the OS yet
            start = position - self._written_bytes
            size = record_size(self._write_buffer, start)
            return bytes(self._write_buffer[start : start + size]), 0, size
        if segment.fd < 0:  # the pool took it back
            self._segment_fd(segment)
        return window.locate(segment, position)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Write and sync everything, save every index, release the files; the data stays.
        What a failing disk does not take is lost: it was never confirmed."""
        try:
            for fd in self.flush():
                os.fsync(fd)
            self.synced(self._end_offset)
            if self._write.index.count:  # the next start writes to a new segment: this one is sealed
                save_index(index_path(self.path, self._write.id), self._write.index)
        except OSError as exc:
            log.error("%s: could not write everything before closing: %s", self.path, exc)
        self._close_files()

    def delete(self) -> None:
        """Release the files and remove the directory."""
        self._write_buffer.clear()
        self._close_files()
        changes.remove_tree(self.path)

    # -- files -----------------------------------------------------------------------------

    def _create_write_segment(self, segment_id: int) -> None:
        """A new segment to append to; its file is created by its first write."""
        segment = _Segment(segment_id, -1, SegmentIndex(self._end_offset))
        self._segments.append(segment)
        self._write = segment
        self._write_buffer += FILE_HEADER_BYTES
        self._written_bytes = 0
        self._write_end = FILE_HEADER_SIZE
        self._bytes += FILE_HEADER_SIZE

    def _rolled(self) -> bool:
        return rolled_over(self._write_failing, self._roll)

    def _roll(self) -> None:
        old = self._write
        self._write_out()
        self._sync_segments.append(old)
        self._write_dirty = False
        self._sealed.append(old)
        self._create_write_segment(old.id + 1)

    def _segment_fd(self, segment: _Segment) -> int:
        """The segment's fd: opened again when the pool took it, or its file created."""
        fd = segment.fd
        if fd >= 0:
            OPEN_FILES.used(segment)
            return fd
        if segment is self._write and not self._written_bytes:
            fd = create_segment_file(self.path, segment.id)
            self._dir_changed = True
        else:
            fd = os.open(segment_path(self.path, segment.id), os.O_RDWR)
        segment.fd = fd
        OPEN_FILES.opened(segment)
        return fd

    def _write_out(self) -> None:
        """Hand the buffer to the OS at the end of the write segment. When that fails the
        buffer stays and the file is cut back: the next flush writes it again."""
        buffer = self._write_buffer
        if not buffer:
            return
        try:
            write_at(self._segment_fd(self._write), buffer, self._written_bytes)
        except OSError:
            self._write_failing = True
            raise
        sink = CHANGES.sink
        if sink is not None:
            sink.written(segment_path(self.path, self._write.id), self._written_bytes, bytes(buffer))
        self._write_failing = False
        self._written_bytes += len(buffer)
        buffer.clear()

    def _drop_oldest(self, count: int) -> None:
        """Delete the `count` oldest segments, after recording where the log now starts."""
        segments = self._segments
        new_first = segments[count]
        self._save_first_segment(new_first.id, new_first.index.first_offset)
        for segment in segments[:count]:
            changes.remove_file(segment_path(self.path, segment.id))
            changes.remove_file(index_path(self.path, segment.id), missing_ok=True)
            self._bytes -= segment.index.size
            OPEN_FILES.release(segment)
        del segments[:count]

    def _save_first_segment(self, segment_id: int, first_offset: int) -> None:
        """Replace `first_segment` atomically and durably."""
        data = _FIRST_SEGMENT.pack(segment_id, first_offset)
        content = data + _CRC.pack(zlib.crc32(data))
        temporary = self.path / (FIRST_SEGMENT_FILE + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)
        changes.install(temporary, self.path / FIRST_SEGMENT_FILE, content)
        os.fsync(self._directory.open())

    def _close_files(self) -> None:
        for segment in self._segments:
            OPEN_FILES.release(segment)
        self._directory.close()
        self._segments.clear()

    # -- recovery --------------------------------------------------------------------------

    def _recover(self) -> int:
        """Number the kept segments from `first_segment`; return the id for the next one.

        Offsets never move: a damaged segment that now holds fewer records than its own
        saved index, or the next segment's, says it held gets holes in place of the lost
        ones (a segment of an unknown format is kept aside and replaced by holes)."""
        segment_ids = list_segments(self.path, INDEX_PREFIX)
        first = load_first_segment(self.path)
        if first is None:
            if segment_ids:
                log.warning("%s: no %s; numbering the segments from offset 0", self.path, FIRST_SEGMENT_FILE)
            first = (segment_ids[0] if segment_ids else 1, 0)
            self._save_first_segment(*first)
        first_id, offset = first
        for segment_id in segment_ids:
            if segment_id < first_id:  # retention was deleting it when the broker stopped
                changes.remove_file(segment_path(self.path, segment_id))
                changes.remove_file(index_path(self.path, segment_id), missing_ok=True)
        kept = [segment_id for segment_id in segment_ids if segment_id >= first_id]
        saved = [load_index(index_path(self.path, segment_id)) for segment_id in kept]
        for number, segment_id in enumerate(kept):
            following = saved[number + 1] if number + 1 < len(saved) else None
            held = _offsets_held(offset, saved[number], following)
            segment = self._recover_segment(segment_id, offset, saved[number], held)
            if segment is None:
                continue
            self._segments.append(segment)
            # Into the pool one by one: a stream may have more segments than this process has fds.
            OPEN_FILES.opened(segment)
            self._bytes += segment.index.size
            offset = segment.index.end_offset
        self._end_offset = self._written_offset = self._synced_offset = offset
        if self._segments:
            self._last_timestamp = self._segments[-1].index.last_timestamp
        return max(segment_ids[-1] + 1 if segment_ids else 1, first_id)

    def _recover_segment(
        self, segment_id: int, first_offset: int, saved: SegmentIndex | None, held: int
    ) -> _Segment | None:
        """Open one segment, scanning it unless its saved index describes it; it ends at
        offset `held` or later. None when it holds nothing and was removed."""
        path = segment_path(self.path, segment_id)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        index: SegmentIndex | None
        try:
            if describes(saved, first_offset, os.fstat(fd).st_size) and check_header(fd, path):
                assert saved is not None
                return _Segment(segment_id, fd, saved)
            if saved is not None:
                log.info("%s does not match its segment; scanning it instead", index_path(self.path, segment_id))
            index = scan_index(fd, path, first_offset)
        except UnsupportedSegment as exc:
            os.close(fd)
            log.error("%s, kept as %s; its records are not recovered", exc, quarantine.set_aside(path).name)
            fd, index = -1, None
        if index is None and fd >= 0:  # a file without a header
            os.close(fd)
            changes.remove_file(path)
            fd = -1
        if held > (index.end_offset if index is not None else first_offset):
            fd, index = self._fill_with_holes(segment_id, fd, index or SegmentIndex(first_offset), held)
        if index is None or not index.count:
            if fd >= 0:
                os.close(fd)
                changes.remove_file(path)
            changes.remove_file(index_path(self.path, segment_id), missing_ok=True)
            return None
        os.fsync(fd)  # what recovery hands out must stay, even after a power loss
        save_index(index_path(self.path, segment_id), index)
        return _Segment(segment_id, fd, index)

    def _fill_with_holes(self, segment_id: int, fd: int, index: SegmentIndex, held: int) -> tuple[int, SegmentIndex]:
        """Append holes to a segment (a new file when `fd` is -1) until it ends at offset
        `held`: the offsets of its lost records are never handed out again."""
        lost_from = index.end_offset
        if index.count:
            timestamp = index.last_timestamp
        else:  # never earlier than what precedes it: timestamps are searched
            timestamp = self._segments[-1].index.last_timestamp if self._segments else 0
        count = held - lost_from
        data, position = hole_records([FIXED_SIZE] * count, timestamp), index.size  # where the scan ended it
        if fd < 0:
            fd = create_segment_file(self.path, segment_id)
            data, position = FILE_HEADER_BYTES + data, 0
        if os.pwrite(fd, data, position) != len(data):
            raise OSError(f"{segment_path(self.path, segment_id)}: short write of holes at byte {position}")
        sink = CHANGES.sink
        if sink is not None:
            sink.written(segment_path(self.path, segment_id), position, data)
        for _ in range(count):
            index.add(index.size, FIXED_SIZE, timestamp)
        log.error(
            "%s: %d record(s) lost to damage (offsets %d to %d); holes keep the later offsets in place",
            segment_path(self.path, segment_id),
            count,
            lost_from,
            held - 1,
        )
        return fd, index


def load_first_segment(directory: Path) -> tuple[int, int] | None:
    """The id and first offset of the oldest kept segment, from `first_segment`; None when
    there is no such file. ValueError when it is damaged."""
    try:
        data = (directory / FIRST_SEGMENT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    # Written whole and renamed into place: damage means the disk lost data we synced.
    if len(data) != _FIRST_SEGMENT.size + _CRC.size or zlib.crc32(data[:-4]) != _CRC.unpack_from(data, 16)[0]:
        raise ValueError(f"{directory / FIRST_SEGMENT_FILE} is damaged: the stream's offsets are unknown")
    segment_id, first_offset = _FIRST_SEGMENT.unpack_from(data)
    return segment_id, first_offset


def _offsets_held(first_offset: int, saved: SegmentIndex | None, following: SegmentIndex | None) -> int:
    """The offset a segment starting at `first_offset` held up to, as far as the saved
    indexes tell: where its own ended, or where the next segment's begins."""
    end = first_offset
    if saved is not None:
        end = max(end, saved.end_offset)
    if following is not None:
        end = max(end, following.first_offset)
    return end
