"""The message store of one queue: append-only segment files read by a sequential cursor.

Ready messages are not held in memory. A cursor walks the segments in publish order; ids
handed back with `requeue` sit in a min-heap and come out before the cursor's next one.
A message id is `segment_id << 32 | byte_position`, so ids sort in publish order.
Only the ready messages that `remove` dropped out of turn are remembered one by one, until
the cursor or the heap reaches them.
docs/storage.md describes the files, the recovery rules and the group-commit contract.
"""

from __future__ import annotations

import contextlib
import logging
import os
from array import array
from collections.abc import Iterable
from heapq import heappop, heappush
from pathlib import Path
from typing import Final

from lavin.api.message import Message, is_persistent
from lavin.storage import changes, quarantine
from lavin.storage.changes import CHANGES
from lavin.storage.disk import ensure_directory, recreate_directory
from lavin.storage.segments.decoded_window import WINDOW_MESSAGES, DecodedWindow
from lavin.storage.segments.open_files import OPEN_FILES, PooledDirectory
from lavin.storage.segments.record import (
    DAMAGED,
    FILE_HEADER_BYTES,
    FILE_HEADER_SIZE,
    FLAG_PERSISTENT,
    RecordEncoder,
    body_size,
    decode_record,
    intact_flags,
    now_ms,
    record_flags,
    record_size,
)
from lavin.storage.segments.segment_files import (
    ACK_PREFIX,
    ReadWindow,
    UnsupportedSegment,
    ack_path,
    create_segment_file,
    list_segments,
    load_acks,
    positions_bytes,
    rolled_over,
    scan_segment,
    segment_path,
    write_at,
    write_parts_at,
)
from mypy_extensions import mypyc_attr

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_SIZE: Final = 8 << 20
_POSITION_MASK: Final = 0xFFFFFFFF
_WRITE_BUFFER_LIMIT: Final = 1 << 20  # a burst within one tick goes to the OS before it grows further
_NO_SKIP: Final = -1
# Empty containers shared by every store and segment that has nothing in them yet, and never
# added to (each is replaced by one of its own first): an empty array is 80 bytes and an empty
# set 216, and most of a broker's queues (100,000 of them, say) may never need one.
_NO_POSITIONS: Final[array[int]] = array("I")
_NO_IDS: Final[set[int]] = set()
_BODY_APART: Final = 16 << 10  # bodies of this size and more are not copied into the write buffer
# Records of non-durable stores stay in memory while they are in flight: a segment whose
# records are all acked before it has to be written is dropped without ever reaching the
# page cache (writing into new pages, and deleting them again, was a quarter of the CPU time
# of 1 MiB messages). A store writes all of its records once every such store of the process
# together holds RESIDENT_BYTES, or once its own backlog of ready messages grows past what
# publisher flow control lets through to a queue with consumers (lavin.broker.queues.queue): a
# backlog is read much later, if at all, and would only pin memory.
RESIDENT_BYTES: Final = 64 << 20
RESIDENT_READY_MESSAGES: Final = 8192
RESIDENT_READY_BYTES: Final = 32 << 20


class _Resident:
    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = 0


_resident: Final = _Resident()


def resident_bytes() -> int:
    """Bytes of non-durable stores' records held in memory, not written yet."""
    return _resident.used


class _Segment:
    """One segment file and its ack file; an entry of the open-file pool (OPEN_FILES)."""

    __slots__ = (
        "ack_fd",
        "ack_size",
        "base",
        "crc_unchecked",
        "fd",
        "id",
        "live",
        "pending_acks",
        "persistent",
        "size",
        "skip",
        "unwritten",
        "unwritten_size",
    )

    def __init__(self, segment_id: int, fd: int, size: int, live: int, skip: array[int]) -> None:
        self.id = segment_id
        self.base = segment_id << 32  # id of the record at position 0
        self.fd = fd  # -1 while closed: not written yet, given back to the pool, or deleted
        self.size = size  # bytes handed to the OS
        # The bytes after those, not handed to the OS yet, in pieces: runs of small records,
        # and the head and the body (not copied) of each large one.
        self.unwritten: list[bytes | bytearray] = []
        self.unwritten_size = 0
        self.live = live  # records not acked yet: ready or taken
        self.persistent = False  # holds persistent records of a durable store: acks are written
        self.skip = skip  # recovered segments: ascending positions the cursor passes over
        self.ack_fd = -1
        self.ack_size = -1  # bytes of whole entries in the ack file; -1: it has none
        self.pending_acks = _NO_POSITIONS  # positions acked since the last flush
        # Recovered after a clean shutdown, its records' crcs not checked: each is checked
        # when first read instead (`SegmentStore._peek_intact`).
        self.crc_unchecked = False

    def take_fds(self) -> list[int]:
        """The pool takes the fds back; the store reopens the files when it next uses them."""
        fds = [fd for fd in (self.fd, self.ack_fd) if fd >= 0]
        self.fd = self.ack_fd = -1
        return fds


# Queue-type plugins subclass it, and setup.py may compile this module.
@mypyc_attr(allow_interpreted_subclasses=True)
class SegmentStore:
    """Messages of one queue in `path`: durable stores recover on open, others start empty."""

    _write: _Segment  # the segment appended to
    _write_end: int  # position of its next record
    _cursor: _Segment  # the segment read next
    _cursor_id: int  # id of the record read next
    _next_skip: int  # in the cursor's segment: next skipped position, or _NO_SKIP
    _skip_index: int

    __slots__ = (
        "_acks_dirty",
        "_cursor",
        "_cursor_id",
        "_cursor_reader",
        "_dir_changed",
        "_dir_made",
        "_directory",
        "_disk_writes",
        "_idle_after_sync",
        "_last_push_body_size",
        "_last_push_end",
        "_last_push_id",
        "_last_push_persistent",
        "_next_skip",
        "_persistent_ready",
        "_persistent_ready_bytes",
        "_random_reader",
        "_ready",
        "_ready_bytes",
        "_records",
        "_removed_ahead",
        "_removed_requeued",
        "_requeued",
        "_requeued_ready",
        "_segments",
        "_skip_index",
        "_sync_acks",
        "_sync_segments",
        "_window",
        "_write",
        "_write_buffer",
        "_write_dirty",
        "_write_end",
        "_write_failing",
        "durable",
        "path",
        "segment_size",
    )

    def __init__(
        self, path: Path, durable: bool, segment_size: int = DEFAULT_SEGMENT_SIZE, closed_cleanly: bool = False
    ) -> None:
        """`closed_cleanly`: the files are as a clean shutdown left them, so recovery need
        not check each record's crc (`lavin.storage.clean_shutdown`)."""
        if not FILE_HEADER_SIZE < segment_size <= 1 << 32:
            raise ValueError(f"segment_size must be between 5 bytes and 4 GiB, not {segment_size}")
        self.path = path
        self.durable = durable
        self.segment_size = segment_size
        self._segments: dict[int, _Segment] = {}  # ascending ids: insertion order
        self._write_buffer = bytearray()  # the last piece of the write segment's `unwritten`
        self._write_dirty = False  # persistent records in the write segment since the last flush
        self._cursor_reader = ReadWindow()
        self._random_reader = ReadWindow()
        self._disk_writes = 0  # writes of records to segment files
        self._requeued: list[int] = []  # heap of ids before the cursor; its top is never removed
        self._removed_requeued = _NO_IDS  # ids in the heap that `remove` dropped
        self._requeued_ready = 0  # ids in the heap not removed
        self._removed_ahead: list[int] = []  # heap of ids past the cursor that `remove` dropped
        self._ready = 0  # live requeued ids plus unread records past the cursor
        self._ready_bytes = 0
        # Ready messages a durable store keeps across a restart, and their body bytes: only
        # ever non-zero in a durable store, so a take elsewhere tests one integer.
        self._persistent_ready = 0
        self._persistent_ready_bytes = 0
        self._last_push_persistent = False
        self._last_push_id = -1
        self._last_push_end = 0
        self._last_push_body_size = 0
        self._acks_dirty: list[_Segment] = []  # segments with pending acks
        # Written since the last flush that returned their fds: segments with persistent
        # records, and segments whose ack files received acks.
        self._sync_segments: list[_Segment] = []
        # Rolled-over segments nobody reads yet, whose fds go back to the pool once the
        # fsync of their last records has them pinned: a backlog holds no fd per segment.
        self._idle_after_sync: list[_Segment] = []
        self._sync_acks: list[_Segment] = []
        self._dir_changed = False  # a file was created since the directory was last synced
        self._write_failing = False  # the last write failed: the buffer waits for the next flush
        self._window = DecodedWindow()
        self._records = RecordEncoder()
        self._directory = PooledDirectory(path)
        if durable:
            ensure_directory(path)
            self._recover(closed_cleanly)
        self._dir_made = durable  # a non-durable store's directory appears with its first write
        self._create_write_segment(max(self._segments, default=0) + 1)
        self._move_cursor(next(iter(self._segments.values())))

    # -- the queue's operations ------------------------------------------------------------

    def push(self, message: Message) -> int:
        """Append a ready message and return its id."""
        message_id = self._append(message)
        # Not with a timestamp of 0: the record's own then differs from the object's. Nor
        # behind a backlog larger than the window: the message would be evicted before the
        # cursor gets to it, as long as the publisher goes on (publish-only, a slow consumer).
        if message.timestamp and self._ready <= WINDOW_MESSAGES:
            self._window.remember(message_id, self._last_push_end - message_id, message)
        return message_id

    def push_taken(self, message: Message) -> int:
        """`push` and `skip` in one: the message goes straight to a consumer, so the window
        of recent appends, which only saves a later read, never holds it."""
        message_id = self._append(message)
        if self._ready - self._requeued_ready == 1:
            self._skip_last_push()
        else:
            self.skip(message_id)  # others wait ahead of it: taken if next in line, else refused
        return message_id

    def _skip_last_push(self) -> None:
        """The only message past the cursor is the one just pushed: jump behind it."""
        if self._removed_ahead:
            self._removed_ahead.clear()  # all of them lie between the cursor and this message
            self._next_skip = _NO_SKIP
        if self._cursor is not self._write:
            self._move_cursor(self._write)
        self._cursor_id = self._last_push_end
        self._ready -= 1
        self._ready_bytes -= self._last_push_body_size
        if self._last_push_persistent:
            self._no_longer_ready_persistent(self._last_push_body_size)

    def _append(self, message: Message) -> int:
        """Write a ready message's record (buffered) and count it; returns its id."""
        exchange, routing_key, size = self._records.prepare(message)
        properties = message.properties
        body = message.body
        position = self._write_end
        if position + size > self.segment_size and position > FILE_HEADER_SIZE and self._rolled():
            position = FILE_HEADER_SIZE
        persistent = is_persistent(properties)
        timestamp = message.timestamp
        flags = FLAG_PERSISTENT if persistent else 0
        checksum = self.durable  # a non-durable store is never recovered: its crcs would go unread
        segment = self._write
        large = len(body) >= _BODY_APART
        head = bytearray() if large else self._write_buffer
        self._records.append_head(head, timestamp or now_ms(), exchange, routing_key, properties, body, flags, checksum)
        if large:  # kept as it is, between its record's head and a new run for what follows
            self._write_buffer = bytearray()
            segment.unwritten += (head, body, self._write_buffer)
        else:
            head += body
        segment.unwritten_size += size
        segment.live += 1
        kept = persistent and self.durable
        if kept:
            segment.persistent = True
            self._write_dirty = True
            self._persistent_ready += 1
            self._persistent_ready_bytes += len(body)
        self._write_end = position + size
        self._ready += 1
        self._ready_bytes += len(body)
        message_id = segment.base | position
        self._last_push_id = message_id
        self._last_push_end = message_id + size
        self._last_push_body_size = len(body)
        self._last_push_persistent = kept
        if not self.durable:
            _resident.used += size
        if segment.unwritten_size > _WRITE_BUFFER_LIMIT and not self._write_failing:
            if self.durable:
                with contextlib.suppress(OSError):  # the buffer waits for the flush, which reports it
                    self._write_out()
            elif self._must_write_resident():
                with contextlib.suppress(OSError):  # what is not written stays, and is tried again
                    self._write_resident_out()
        return message_id

    def take(self) -> tuple[int, Message, bool] | None:
        """Remove the next ready message: (id, message, redelivered), or None."""
        if self._requeued:
            message_id = heappop(self._requeued)
            if self._removed_requeued:
                self._drop_removed_requeued()
            self._requeued_ready -= 1
            message = self.read(message_id)
            self._ready -= 1
            self._ready_bytes -= len(message.body)
            if self._persistent_ready and is_persistent(message.properties):
                self._no_longer_ready_persistent(len(message.body))
            return message_id, message, True
        if not self._ready:
            return None
        message_id = self._cursor_id
        held = self._window.take(message_id) if message_id & _POSITION_MASK != self._next_skip else None
        if held is not None:
            size, message = held
        else:
            located = self._peek_intact()
            if located is None:
                return None
            buffer, offset, size = located
            message_id = self._cursor_id
            message = decode_record(buffer, offset)
        self._advance(size)
        self._ready -= 1
        self._ready_bytes -= len(message.body)
        if self._persistent_ready and is_persistent(message.properties):
            self._no_longer_ready_persistent(len(message.body))
        return message_id, message, False

    def peek(self) -> tuple[int, Message, bool] | None:
        """What `take` would return next, left in place."""
        if self._requeued:
            message_id = self._requeued[0]
            return message_id, self.read(message_id), True
        if not self._ready:
            return None
        located = self._peek_intact()
        return None if located is None else (self._cursor_id, decode_record(located[0], located[1]), False)

    def remove(self, message_id: int) -> None:
        """Drop a ready message wherever it waits, as if it was taken and acked.

        The id must be ready: the store does not search its heap to check.
        """
        segment = self._segments[message_id >> 32]
        position = message_id & _POSITION_MASK
        buffer, offset, _ = self._locate(segment, position, self._random_reader)
        size = body_size(buffer, offset)
        self._ready_bytes -= size
        self._ready -= 1
        if self._persistent_ready and record_flags(buffer, offset) & FLAG_PERSISTENT:
            self._no_longer_ready_persistent(size)
        if message_id < self._cursor_id:  # behind the cursor only requeued ids are ready
            self._requeued_ready -= 1
            if self._removed_requeued is _NO_IDS:
                self._removed_requeued = set()
            self._removed_requeued.add(message_id)
            self._drop_removed_requeued()
        else:
            heappush(self._removed_ahead, message_id)
            if segment is self._cursor and (self._next_skip == _NO_SKIP or position < self._next_skip):
                self._next_skip = position
        self.ack(message_id)

    def skip(self, message_id: int) -> None:
        """Mark the next ready message taken without reading it: the core delivered it
        straight from `push`. Raises ValueError for any other id."""
        if message_id == self._last_push_id and self._ready - self._requeued_ready == 1:
            self._skip_last_push()
            self._window.forget_last(message_id)
            return
        if self._ready == self._requeued_ready:
            raise ValueError(f"message {message_id:#x} is not next in line: none is")
        buffer, offset, size = self._peek()
        if message_id != self._cursor_id:
            raise ValueError(f"message {message_id:#x} is not next in line: {self._cursor_id:#x} is")
        body = body_size(buffer, offset)
        self._ready_bytes -= body
        self._ready -= 1
        if self._persistent_ready and record_flags(buffer, offset) & FLAG_PERSISTENT:
            self._no_longer_ready_persistent(body)
        self._advance(size)

    def ack(self, message_id: int) -> None:
        """Forget a taken message for good; a finished segment file is deleted."""
        segment = self._segments[message_id >> 32]
        if segment.persistent:
            pending = segment.pending_acks
            if pending is _NO_POSITIONS:
                pending = segment.pending_acks = array("I")
            pending.append(message_id & _POSITION_MASK)
            if len(pending) == 1:
                self._acks_dirty.append(segment)
        segment.live -= 1
        if not segment.live and segment is not self._write:
            self._delete_segment(segment)

    def requeue(self, message_ids: Iterable[int]) -> None:
        """Make taken messages ready again, ahead of the cursor, in publish order."""
        for message_id in message_ids:
            segment = self._segments[message_id >> 32]
            position = message_id & _POSITION_MASK
            buffer, offset, _ = self._locate(segment, position, self._random_reader)
            size = body_size(buffer, offset)
            self._ready_bytes += size
            self._ready += 1
            self._requeued_ready += 1
            if self.durable and record_flags(buffer, offset) & FLAG_PERSISTENT:
                self._persistent_ready += 1
                self._persistent_ready_bytes += size
            heappush(self._requeued, message_id)

    def read(self, message_id: int) -> Message:
        """The message with this id, whether ready or taken."""
        segment = self._segments[message_id >> 32]
        position = message_id & _POSITION_MASK
        buffer, offset, _ = self._locate(segment, position, self._random_reader)
        return decode_record(buffer, offset)

    def purge(self) -> int:
        """Drop every ready message and return how many there were.

        Segments past the cursor hold only ready messages and go as whole files; in the
        cursor's segment and for requeued ids, acks are written.
        """
        count = self._ready
        if not count:
            return 0
        if self._write_end > FILE_HEADER_SIZE:
            self._roll()  # now every ready record lies in a segment that may be deleted
        later = [segment for segment in self._segments.values() if segment.id > self._cursor.id]
        removed = self._removed_requeued
        unread_in_cursor_segment = count - self._requeued_ready - sum(s.live for s in later)
        to_ack = [message_id for message_id in self._requeued if message_id not in removed]
        for _ in range(unread_in_cursor_segment):
            size = self._peek()[2]
            to_ack.append(self._cursor_id)
            self._advance(size)
        self._requeued = []
        self._removed_requeued = _NO_IDS
        self._window.clear()
        self._requeued_ready = 0
        self._ready = self._ready_bytes = 0
        self._persistent_ready = self._persistent_ready_bytes = 0
        self._move_cursor(self._write)
        for segment in later:
            if segment is not self._write:
                self._delete_segment(segment)
        for message_id in to_ack:
            self.ack(message_id)
        return count

    def __len__(self) -> int:
        return self._ready

    @property
    def disk_reads(self) -> int:
        return self._cursor_reader.reads + self._random_reader.reads

    @property
    def disk_writes(self) -> int:
        return self._disk_writes

    @property
    def ready_bytes(self) -> int:
        """Body bytes of the ready messages."""
        return self._ready_bytes

    @property
    def ready_persistent(self) -> tuple[int, int]:
        """(messages, body bytes) of the ready messages a restart keeps: the persistent
        ones of a durable store."""
        return self._persistent_ready, self._persistent_ready_bytes

    @property
    def ready_in_memory(self) -> tuple[int, int]:
        """(messages, body bytes) of the ready messages held decoded in memory (the
        window of recent appends), which a consumer gets without a read."""
        return self._window.held(self._cursor_id, frozenset(self._removed_ahead))

    def taken_totals(self, message_ids: Iterable[int]) -> tuple[int, int, int]:
        """(body bytes, persistent messages, their body bytes) of these taken messages,
        read from their records, through a reader of its own: a look like this is not
        one of the queue's disk reads."""
        reader = ReadWindow()
        body_bytes = persistent = persistent_bytes = 0
        for message_id in sorted(message_ids):
            segment = self._segments[message_id >> 32]
            buffer, offset, _ = self._locate(segment, message_id & _POSITION_MASK, reader)
            size = body_size(buffer, offset)
            body_bytes += size
            if self.durable and record_flags(buffer, offset) & FLAG_PERSISTENT:
                persistent += 1
                persistent_bytes += size
        return body_bytes, persistent, persistent_bytes

    def flush(self) -> list[int]:
        """Hand buffered records and acks to the OS; return the fds that need an fsync.

        Only durable stores return fds, and only after persistent records or their acks
        were written. Raises OSError when a write fails: what was not written stays
        buffered (records) or pending (acks), the files end at their last whole record or
        entry, and the next flush writes it again and returns every fd still to fsync.
        """
        if self._idle_after_sync:
            self._release_idle_segments()
        if self.durable:
            self._write_out()
        elif self._must_write_resident():
            self._write_resident_out()
        if self._write_dirty:
            self._sync_segments.append(self._write)
            self._write_dirty = False
        self._write_acks()
        if not (self._sync_segments or self._sync_acks):
            return []
        OPEN_FILES.hold()  # opening one must not close another returned here
        try:
            fds = {self._segment_fd(segment) for segment in self._sync_segments}
            fds.update([self._ack_fd(segment) for segment in self._sync_acks])
            if self._dir_changed:
                fds.add(self._directory.open())
        finally:
            OPEN_FILES.unhold()
        self._sync_segments.clear()
        self._sync_acks.clear()
        self._dir_changed = False
        return list(fds)

    def close(self) -> None:
        """Write and sync everything, then release the files; the data stays. What a
        failing disk does not take is lost: it was never confirmed."""
        try:
            for fd in self.flush():
                os.fsync(fd)
        except OSError as exc:
            log.error("%s: could not write everything before closing: %s", self.path, exc)
        self._close_files()

    def delete(self) -> None:
        """Release the files and remove the directory."""
        self._close_files()
        changes.remove_tree(self.path)

    # -- cursor ----------------------------------------------------------------------------

    def _locate(self, segment: _Segment, position: int, reader: ReadWindow) -> tuple[bytes, int, int]:
        """A buffer holding the whole record at `position`, its offset there, its size."""
        if position >= segment.size:  # not handed to the OS yet
            return _unwritten_record(segment.unwritten, position - segment.size)
        if segment.fd < 0:  # the pool took it back
            self._segment_fd(segment)
        return reader.locate(segment, position)

    def _peek(self) -> tuple[bytes, int, int]:
        """Where the next ready record past the cursor is; one must exist."""
        while True:
            position = self._cursor_id & _POSITION_MASK
            located = self._locate(self._cursor, position, self._cursor_reader)
            if position != self._next_skip:
                return located
            removed = self._removed_ahead
            if removed and removed[0] == self._cursor_id:
                heappop(removed)
            else:
                self._skip_index += 1
                if self._skip_index == len(self._cursor.skip):
                    self._cursor.skip = _NO_POSITIONS  # the cursor never comes back: free the list
                    self._skip_index = 0
            self._find_next_skip()
            self._advance(located[2])

    def _peek_intact(self) -> tuple[bytes, int, int] | None:
        """`_peek`, but a record of a segment recovered without checking crcs is checked
        first. One that fails is dropped as if taken and acked, so a damaged message is
        never delivered; None when that leaves no ready record past the cursor."""
        while self._ready > self._requeued_ready:
            located = self._peek()
            if not self._cursor.crc_unchecked or intact_flags(located[0], located[1], located[2]) != DAMAGED:
                return located
            message_id = self._cursor_id
            log.error(
                "%s: the record at byte %d fails its crc; passed over, not delivered",
                segment_path(self.path, message_id >> 32),
                message_id & _POSITION_MASK,
            )
            self.skip(message_id)
            self.ack(message_id)
        return None

    def _no_longer_ready_persistent(self, size: int) -> None:
        self._persistent_ready -= 1
        self._persistent_ready_bytes -= size

    def _advance(self, size: int) -> None:
        self._cursor_id += size
        cursor = self._cursor
        if cursor is not self._write and self._cursor_id & _POSITION_MASK >= cursor.size + cursor.unwritten_size:
            self._move_cursor(self._segment_after(cursor))

    def _move_cursor(self, segment: _Segment) -> None:
        self._cursor = segment
        self._cursor_id = segment.base | FILE_HEADER_SIZE
        self._skip_index = 0
        removed = self._removed_ahead
        while removed and removed[0] < segment.base:  # in segments deleted as fully acked
            heappop(removed)
        self._find_next_skip()

    def _find_next_skip(self) -> None:
        """The cursor segment's next position to pass over: skipped at recovery or removed."""
        skip = self._cursor.skip
        next_skip = skip[self._skip_index] if self._skip_index < len(skip) else _NO_SKIP
        removed = self._removed_ahead
        if removed and removed[0] >> 32 == self._cursor.id:
            position = removed[0] & _POSITION_MASK
            if next_skip == _NO_SKIP or position < next_skip:
                next_skip = position
        self._next_skip = next_skip

    def _drop_removed_requeued(self) -> None:
        """Pop removed ids off the heap's top, so that its top is always ready."""
        requeued, removed = self._requeued, self._removed_requeued
        while requeued and requeued[0] in removed:
            removed.discard(heappop(requeued))

    def _segment_after(self, segment: _Segment) -> _Segment:
        return self._segments[min(i for i in self._segments if i > segment.id)]

    # -- files -----------------------------------------------------------------------------

    def _create_write_segment(self, segment_id: int) -> None:
        """A new segment to append to; its file is created by its first write."""
        segment = _Segment(segment_id, -1, 0, 0, _NO_POSITIONS)
        self._write_buffer = bytearray(FILE_HEADER_BYTES)
        segment.unwritten.append(self._write_buffer)
        segment.unwritten_size = FILE_HEADER_SIZE
        if not self.durable:
            _resident.used += FILE_HEADER_SIZE
        self._segments[segment_id] = segment
        self._write = segment
        self._write_end = FILE_HEADER_SIZE

    def _rolled(self) -> bool:
        return rolled_over(self._write_failing, self._roll)

    def _roll(self) -> None:
        """Start a new write segment; a durable store writes the old one's buffer first,
        a non-durable one keeps it in memory (RESIDENT_BYTES)."""
        old = self._write
        end = old.size + old.unwritten_size
        if self.durable:
            self._write_out()
        if self._write_dirty:
            self._sync_segments.append(old)
            self._write_dirty = False
        self._create_write_segment(old.id + 1)
        if self._cursor is old and self._cursor_id & _POSITION_MASK == end:
            self._move_cursor(self._write)
        if not old.live:
            self._delete_segment(old)
        elif self._cursor is not old:
            if old in self._sync_segments:
                self._idle_after_sync.append(old)
            else:
                OPEN_FILES.release(old)

    def _release_idle_segments(self) -> None:
        """Give back the fds of rolled-over segments that an earlier flush handed over
        for fsync (pinned by the caller since, or synced) and that nobody reads yet."""
        waiting = []
        for segment in self._idle_after_sync:
            if segment in self._sync_segments:
                waiting.append(segment)
            elif segment is not self._cursor and segment.id in self._segments:
                OPEN_FILES.release(segment)
        self._idle_after_sync = waiting

    def _segment_fd(self, segment: _Segment) -> int:
        """The segment's fd: opened again when the pool took it, or its file created."""
        fd = segment.fd
        if fd >= 0:
            OPEN_FILES.used(segment)
            return fd
        if segment.size:
            fd = os.open(segment_path(self.path, segment.id), os.O_RDWR)
        else:
            if not self._dir_made:  # a non-durable store: start from an empty directory
                recreate_directory(self.path)
                self._dir_made = True
            fd = create_segment_file(self.path, segment.id)
            self._dir_changed = True
        segment.fd = fd
        OPEN_FILES.opened(segment)
        return fd

    def _ack_fd(self, segment: _Segment) -> int:
        """The fd of the segment's ack file: opened again when the pool took it, or the file created."""
        fd = segment.ack_fd
        if fd >= 0:
            OPEN_FILES.used(segment)
            return fd
        fd = segment.ack_fd = os.open(ack_path(self.path, segment.id), os.O_WRONLY | os.O_CREAT, 0o644)
        if segment.ack_size < 0:
            segment.ack_size = 0
            self._dir_changed = True
        OPEN_FILES.opened(segment)
        return fd

    def _write_out(self) -> None:
        """Hand the write segment's buffer to the OS. When that fails the buffer stays and
        the file is cut back: the next flush writes it again."""
        try:
            self._write_segment_out(self._write)
        except OSError:
            self._write_failing = True
            raise
        self._write_failing = False

    def _must_write_resident(self) -> bool:
        return (
            _resident.used > RESIDENT_BYTES
            or self._ready > RESIDENT_READY_MESSAGES
            or self._ready_bytes > RESIDENT_READY_BYTES
        )

    def _write_resident_out(self) -> None:
        """A non-durable store past RESIDENT_BYTES: hand all its records to the OS, oldest first."""
        for segment in list(self._segments.values()):
            if segment is self._write:
                self._write_out()
            else:
                self._write_segment_out(segment)

    def _write_segment_out(self, segment: _Segment) -> None:
        if segment.unwritten_size:
            write_parts_at(self._segment_fd(segment), segment.unwritten, segment.size)
            sink = CHANGES.sink
            if sink is not None and self.durable:
                sink.written(segment_path(self.path, segment.id), segment.size, b"".join(segment.unwritten))
            self._disk_writes += 1
            segment.size += segment.unwritten_size
            self._forget_unwritten(segment)

    def _forget_unwritten(self, segment: _Segment) -> None:
        if not self.durable:
            _resident.used -= segment.unwritten_size
        segment.unwritten_size = 0
        if segment is self._write:  # its last piece stays the run that records are appended to
            self._write_buffer.clear()
            segment.unwritten = [self._write_buffer]
        else:
            segment.unwritten = []

    def _write_acks(self) -> None:
        """Append the pending acks to the ack files. When a write fails, the acks not
        written stay pending and the file is cut back to its last whole entry."""
        dirty = self._acks_dirty
        while dirty:
            segment = dirty[-1]
            if self._segments.get(segment.id) is segment:  # else deleted: its acks no longer matter
                data = positions_bytes(segment.pending_acks)
                write_at(self._ack_fd(segment), data, segment.ack_size)
                sink = CHANGES.sink
                if sink is not None and self.durable:
                    sink.written(ack_path(self.path, segment.id), segment.ack_size, data)
                segment.ack_size += len(data)
                del segment.pending_acks[:]
                self._sync_acks.append(segment)
            dirty.pop()

    def _delete_segment(self, segment: _Segment) -> None:
        self._forget_unwritten(segment)
        del self._segments[segment.id]
        if self._cursor is segment:
            self._move_cursor(self._segment_after(segment))
        if segment.size or segment.fd >= 0:  # else never written: there is no file
            changes.remove_file(segment_path(self.path, segment.id))
        if segment.ack_size >= 0:
            changes.remove_file(ack_path(self.path, segment.id))
        OPEN_FILES.release(segment)
        if segment in self._sync_segments:
            self._sync_segments.remove(segment)
        if segment in self._sync_acks:
            self._sync_acks.remove(segment)

    def _close_files(self) -> None:
        for segment in self._segments.values():
            self._forget_unwritten(segment)
            OPEN_FILES.release(segment)
        self._directory.close()
        self._segments.clear()
        self._window.clear()

    # -- recovery --------------------------------------------------------------------------

    def _recover(self, closed_cleanly: bool) -> None:
        """Rebuild the counts from the files: persistent records not acked are ready.

        A segment of an unknown format is kept aside (`*.corrupt`, its ack file too) and
        the others are recovered; damaged records are passed over (`scan_records`)."""
        set_aside: list[str] = []
        for segment_id in list_segments(self.path, ACK_PREFIX):
            path = segment_path(self.path, segment_id)
            acks = ack_path(self.path, segment_id)
            has_acks = acks.exists()
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
            try:
                scanned = scan_segment(fd, path, load_acks(acks) if has_acks else set(), not closed_cleanly)
            except UnsupportedSegment as exc:
                os.close(fd)
                set_aside.append(f"{exc}, kept as {quarantine.set_aside(path).name}")
                if has_acks:
                    quarantine.set_aside(acks)
                continue
            if scanned is None or not scanned.live:
                os.close(fd)
                changes.remove_file(path)
                changes.remove_file(acks, missing_ok=True)
                continue
            segment = _Segment(segment_id, fd, scanned.size, scanned.live, scanned.skip)
            segment.persistent = True
            segment.crc_unchecked = closed_cleanly
            if has_acks:  # written at known positions, not appended to: opened when next written
                segment.ack_size = acks.stat().st_size
            self._segments[segment_id] = segment
            # Into the pool one by one: a queue may have more segments than this process has fds.
            OPEN_FILES.opened(segment)
            self._ready += scanned.live
            self._ready_bytes += scanned.live_bytes
            self._persistent_ready += scanned.live  # only persistent records are recovered
            self._persistent_ready_bytes += scanned.live_bytes
        if set_aside:
            log.error(
                "%s: %d segment(s) not recovered (%s); %d message(s) recovered from %d other segment(s)",
                self.path,
                len(set_aside),
                "; ".join(set_aside),
                self._ready,
                len(self._segments),
            )


def _unwritten_record(parts: list[bytes | bytearray], start: int) -> tuple[bytes, int, int]:
    """The record `start` bytes into a segment's unwritten pieces, as `_locate` returns it.
    A record lies within one piece, or is a head piece followed by its body piece."""
    for index, part in enumerate(parts):
        if start < len(part):
            size = record_size(part, start)
            if start + size <= len(part):
                return bytes(memoryview(part)[start : start + size]), 0, size
            return bytes(part) + parts[index + 1], 0, size
        start -= len(part)
    raise ValueError(f"no record {start} bytes past the last unwritten one")
