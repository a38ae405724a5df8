"""The sparse index of one stream segment: where every Nth record starts and when it arrived.

A stream's offsets are implicit (the segment's first offset plus the record's place in it),
so finding offset N or the first message at time T needs a map from offsets to byte
positions. Every `STRIDE`-th record of a segment gets an entry (its position and
timestamp); a lookup jumps to the nearest entry and walks at most `STRIDE` records.

Once a segment is sealed and on disk its index is written next to it, `index.N`, so that
recovery does not read the segment again:

    4s   magic "LSX1"
    u64  first offset         u32  record count     u32  data size (bytes, header included)
    u32  stride               u64  first timestamp  u64  last timestamp
    u32 * n  entry positions  u64 * n  entry timestamps   (n = ceil(count / stride))
    u32  crc32 of everything before it

A missing, damaged or stale index file (size or first offset disagree with the segment)
is not used to read the segment, which is scanned instead; an intact stale one still tells
recovery which offsets the segment held (see `lavin.storage.streams.stream_store`).
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from bisect import bisect_left
from pathlib import Path

from lavin.storage import changes
from lavin.storage.segments.record import FILE_HEADER_SIZE, HEADER_SIZE
from lavin.storage.segments.segment_files import numbered_path, scan_records

STRIDE = 128
INDEX_PREFIX = "index."
_MAGIC = b"LSX1"
_HEADER = struct.Struct("<4sQIIIQQ")
_CRC = struct.Struct("<I")
_TIMESTAMP = struct.Struct("<Q")
_BIG_ENDIAN_HOST = sys.byteorder == "big"


def record_timestamp(buffer: bytes | bytearray | memoryview, offset: int) -> int:
    """Arrival time (ms) of the record at `offset`: it follows the 9-byte record header."""
    return int(_TIMESTAMP.unpack_from(buffer, offset + HEADER_SIZE)[0])


class SegmentIndex:
    """Offsets, positions and timestamps of one segment's records."""

    __slots__ = ("count", "first_offset", "first_timestamp", "last_timestamp", "positions", "size", "timestamps")

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset
        self.count = 0
        self.size = FILE_HEADER_SIZE  # bytes of the segment up to the end of its last record
        self.first_timestamp = 0
        self.last_timestamp = 0
        self.positions = array("I")  # of records 0, STRIDE, 2 * STRIDE, ...
        self.timestamps = array("Q")

    @property
    def end_offset(self) -> int:
        """The offset after the segment's last record."""
        return self.first_offset + self.count

    def add(self, position: int, size: int, timestamp: int) -> None:
        """A record of `size` bytes was appended at `position`."""
        if not self.count % STRIDE:
            self.positions.append(position)
            self.timestamps.append(timestamp)
        if not self.count:
            self.first_timestamp = timestamp
        self.count += 1
        self.last_timestamp = timestamp
        self.size = position + size

    def entry_for_offset(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the nearest entry at or before `offset`, in this segment."""
        entry = (offset - self.first_offset) // STRIDE
        return self.first_offset + entry * STRIDE, self.positions[entry]

    def entry_for_timestamp(self, timestamp: int) -> tuple[int, int]:
        """(offset, position) of an entry from which the first record arriving at or after
        `timestamp` is at most STRIDE records away. Timestamps never decrease in a stream."""
        entry = max(bisect_left(self.timestamps, timestamp) - 1, 0)
        return self.first_offset + entry * STRIDE, self.positions[entry]

    # -- the index file ---------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        positions, timestamps = array("I", self.positions), array("Q", self.timestamps)
        if _BIG_ENDIAN_HOST:
            positions.byteswap()
            timestamps.byteswap()
        data = (
            _HEADER.pack(
                _MAGIC, self.first_offset, self.count, self.size, STRIDE, self.first_timestamp, self.last_timestamp
            )
            + positions.tobytes()
            + timestamps.tobytes()
        )
        return data + _CRC.pack(zlib.crc32(data))

    @classmethod
    def from_bytes(cls, data: bytes) -> SegmentIndex | None:
        """The index a file holds, or None when it is damaged or built with another stride."""
        if len(data) < _HEADER.size + _CRC.size:
            return None
        if zlib.crc32(data[: -_CRC.size]) != _CRC.unpack_from(data, len(data) - _CRC.size)[0]:
            return None
        magic, first_offset, count, size, stride, first_timestamp, last_timestamp = _HEADER.unpack_from(data)
        entries = -(-count // STRIDE)
        if magic != _MAGIC or stride != STRIDE or len(data) != _HEADER.size + entries * 12 + _CRC.size:
            return None
        index = cls(first_offset)
        index.count, index.size = count, size
        index.first_timestamp, index.last_timestamp = first_timestamp, last_timestamp
        start = _HEADER.size
        index.positions.frombytes(data[start : start + entries * 4])
        index.timestamps.frombytes(data[start + entries * 4 : start + entries * 12])
        if _BIG_ENDIAN_HOST:
            index.positions.byteswap()
            index.timestamps.byteswap()
        return index


def index_path(directory: Path, segment_id: int) -> Path:
    return numbered_path(directory, INDEX_PREFIX, segment_id)


def load_index(path: Path) -> SegmentIndex | None:
    """The index file of a segment when it exists and is intact, whether or not it still
    describes the segment (`describes`): a stale one still tells where offsets stood."""
    try:
        return SegmentIndex.from_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def describes(index: SegmentIndex | None, first_offset: int, segment_size: int) -> bool:
    """Whether a saved index is the one of a segment starting at `first_offset` with
    `segment_size` bytes, so that the segment need not be scanned."""
    return index is not None and index.first_offset == first_offset and index.size == segment_size and index.count > 0


def save_index(path: Path, index: SegmentIndex) -> None:
    """Write the index of a sealed segment whose data is on disk. No fsync: an index lost in
    a crash only costs a scan at the next start."""
    changes.write_whole(path, index.to_bytes())


def scan_index(fd: int, path: Path, first_offset: int) -> SegmentIndex | None:
    """Build the index of a segment by validating every record; see `scan_records` for
    damaged files. A truncation is not synced: the stream store syncs every scanned segment
    it keeps."""
    index = SegmentIndex(first_offset)

    def add(position: int, chunk: bytes, offset: int, size: int, _body_size: int) -> None:
        index.add(position, size, record_timestamp(chunk, offset))

    return None if scan_records(fd, path, add, sync_truncation=False) is None else index
