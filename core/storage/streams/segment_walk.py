"""Walking the records of one stream segment from its sparse index, past damaged records.

Shared by the stream store and the read-only stream replica, which differ only in where a
record's bytes come from: `locate(position)` gives (buffer, offset in it, size) of the
record at a byte position (see `ReadWindow.locate`). A damaged record keeps its offset and
is passed over; every other record keeps its offset too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from lavin.storage.segments.record import DAMAGED, FIXED_SIZE, intact_flags
from lavin.storage.streams.stream_index import STRIDE, SegmentIndex, record_timestamp

log = logging.getLogger(__name__)

Locate = Callable[[int], tuple[bytes, int, int]]


def seek(index: SegmentIndex, offset: int, locate: Locate, path: Path) -> tuple[int, int]:
    """(offset, byte position) of `offset` in the segment of `index`, from the nearest index
    entry; a later offset when damage on the way hides where `offset` starts."""
    entry_offset, position = index.entry_for_offset(offset)
    while entry_offset < offset:
        buffer, start, size = locate(position)
        if intact_flags(buffer, start, size) != DAMAGED:
            entry_offset, position = entry_offset + 1, position + size
        else:
            entry_offset, position = after_damage(index, entry_offset, position, size, locate, path)
    return entry_offset, position


def after_damage(
    index: SegmentIndex, offset: int, position: int, size: int, locate: Locate, path: Path
) -> tuple[int, int]:
    """Where reading resumes after the record at `offset` failed its crc: the next record
    when the length field still leads to an intact one, else the next index entry (or the
    segment's end). Offsets stay where they are either way."""
    following = position + size
    if size >= FIXED_SIZE and (following == index.size or _intact_at(index, following, locate)):
        resume = offset + 1, following
    else:
        entry = (offset - index.first_offset) // STRIDE + 1
        if entry < len(index.positions):
            resume = index.first_offset + entry * STRIDE, index.positions[entry]
        else:
            resume = index.end_offset, index.size
    log.error(
        "%s: the record at offset %d (byte %d) fails its crc; offsets %d to %d are passed over",
        path,
        offset,
        position,
        offset,
        resume[0] - 1,
    )
    return resume


def first_arrived_at(index: SegmentIndex, timestamp: int, locate: Locate, path: Path) -> int:
    """The first offset of the segment whose record arrived at or after `timestamp` (ms),
    else the segment's end offset."""
    offset, position = index.entry_for_timestamp(timestamp)
    while offset < index.end_offset:
        buffer, start, size = locate(position)
        if intact_flags(buffer, start, size) == DAMAGED:
            offset, position = after_damage(index, offset, position, size, locate, path)
        elif record_timestamp(buffer, start) >= timestamp:
            return offset
        else:
            offset += 1
            position += size
    return offset


def _intact_at(index: SegmentIndex, position: int, locate: Locate) -> bool:
    """Whether an intact record starts at `position`, which may be anywhere."""
    if position + FIXED_SIZE > index.size:
        return False
    return intact_flags(*locate(position)) != DAMAGED
