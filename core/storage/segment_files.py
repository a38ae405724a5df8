"""Files of segment stores and stream logs: names, reads and writes of records, the
recovery scan; and the ack files of segment stores.

`msgs.0000000001` holds records (see lavin.storage.record); `acks.0000000001` holds the
u32 little-endian byte positions of the records of that segment that were acked.
"""

from __future__ import annotations

import logging
import os
import sys
from array import array
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from lavin.storage.record import (
    FILE_HEADER,
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    LENGTH,
    check_record,
    record_size,
)

log = logging.getLogger(__name__)

SEGMENT_PREFIX: Final = "msgs."
ACK_PREFIX: Final = "acks."
_ID_DIGITS: Final = 10
_POSITION_SIZE: Final = 4
_READ_AHEAD: Final = 128 << 10
_SCAN_CHUNK: Final = 1 << 20
_BIG_ENDIAN_HOST: Final = sys.byteorder == "big"


def numbered_path(directory: Path, prefix: str, segment_id: int) -> Path:
    """The file of one segment named prefix + 10 digits, as `list_ids` finds it."""
    return directory / f"{prefix}{segment_id:0{_ID_DIGITS}d}"


def segment_path(directory: Path, segment_id: int) -> Path:
    return numbered_path(directory, SEGMENT_PREFIX, segment_id)


def ack_path(directory: Path, segment_id: int) -> Path:
    return numbered_path(directory, ACK_PREFIX, segment_id)


def list_ids(directory: Path, prefix: str, digits: int = _ID_DIGITS) -> list[int]:
    """Ids of the entries named prefix + `digits` digits, ascending."""
    ids = []
    for name in os.listdir(directory):
        number = name[len(prefix) :]
        if name.startswith(prefix) and len(number) == digits and number.isdigit():
            ids.append(int(number))
    return sorted(ids)


def create_segment_file(directory: Path, segment_id: int) -> int:
    """An fd of a new, empty segment file, opened for appending and reading."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND
    return os.open(segment_path(directory, segment_id), flags, 0o644)


def list_segments(directory: Path, companion_prefix: str) -> list[int]:
    """Ids of the segment files, ascending. Companion files (acks, indexes) whose segment
    is gone are deleted."""
    segment_ids = list_ids(directory, SEGMENT_PREFIX)
    for orphan in set(list_ids(directory, companion_prefix)).difference(segment_ids):
        numbered_path(directory, companion_prefix, orphan).unlink()
    return segment_ids


def write_fully(fd: int, data: bytes | bytearray) -> None:
    """Write all of `data`: one os.write may take only part of it."""
    written = os.write(fd, data)
    if written < len(data):  # only on signals or a full disk
        with memoryview(data) as view:
            while written < len(data):
                written += os.write(fd, view[written:])


class RetiredFds:
    """Fds of deleted segment files. The core may still be syncing one in another thread,
    so each stays open until the second flush after its segment was deleted."""

    __slots__ = ("_closing", "_retired")

    def __init__(self) -> None:
        self._retired: list[int] = []  # since the last flush
        self._closing: list[int] = []  # closed at the next flush

    def retire(self, fds: Iterable[int]) -> None:
        self._retired.extend(fds)

    def flushing(self) -> None:
        """A flush begins: close the fds retired before the previous one."""
        for fd in self._closing:
            os.close(fd)
        self._closing, self._retired = self._retired, []

    def close_all(self, others: list[int]) -> None:
        """The store closes: close every retired fd now, and `others` with them."""
        fds = self._closing + self._retired + others
        self._closing, self._retired = [], []
        for fd in fds:
            os.close(fd)


class SegmentFile(Protocol):
    """A segment whose file a `ReadWindow` reads."""

    fd: int


class ReadWindow:
    """Bytes of one segment file around the last read, so that neighbouring records share
    one pread.

    Keyed by the segment, not its fd: the fd number of a deleted segment is reused.
    """

    __slots__ = ("data", "segment", "start")

    def __init__(self) -> None:
        self.segment: SegmentFile | None = None
        self.start = 0
        self.data = b""

    def locate(self, segment: SegmentFile, position: int) -> tuple[bytes, int, int]:
        """A buffer holding the whole record at `position`, its offset there, its size."""
        data = self.data
        offset = position - self.start
        if self.segment is segment and 0 <= offset <= len(data) - HEADER_SIZE:
            length: int = LENGTH.unpack_from(data, offset)[0]
            size = HEADER_SIZE + length
            if offset + size <= len(data):
                return data, offset, size
        data = os.pread(segment.fd, _READ_AHEAD, position)
        size = record_size(data, 0)
        if size > len(data):
            data = os.pread(segment.fd, size, position)
        self.segment, self.start, self.data = segment, position, data
        return data, 0, size


def positions_bytes(positions: array[int]) -> bytes:
    """Ack-file bytes of u32 positions."""
    if _BIG_ENDIAN_HOST:
        positions = array("I", positions)
        positions.byteswap()
    return positions.tobytes()


def load_acks(path: Path) -> set[int]:
    """Acked positions of one ack file; a torn last entry (crash mid-write) is cut off."""
    data = path.read_bytes()
    usable = len(data) - len(data) % _POSITION_SIZE
    if usable != len(data):
        log.warning("%s: torn ack entry at byte %d; truncating the file there", path, usable)
        os.truncate(path, usable)
    positions = array("I")
    positions.frombytes(data[:usable])
    if _BIG_ENDIAN_HOST:
        positions.byteswap()
    return set(positions)


class ScannedSegment(NamedTuple):
    size: int  # bytes of valid data; the file was truncated to this
    live: int  # persistent records not acked: ready again after the restart
    live_bytes: int  # their body bytes
    skip: array[int]  # ascending positions of the records to pass over: acked or transient


# Called for each valid record: its position, a buffer holding it, its offset there, and
# what `check_record` found: (size, persistent, body size).
RecordVisitor = Callable[[int, memoryview, int, tuple[int, bool, int]], None]


def scan_records(fd: int, path: Path, visit: RecordVisitor, *, sync_truncation: bool) -> int | None:
    """Validate the records of a segment file in order, handing each to `visit`; return
    the size of the valid data.

    A record that is cut short or fails its crc ends the segment: the file is truncated
    there, and synced if `sync_truncation`. Returns None for a file too short to hold its
    format header (the broker stopped while creating it); raises ValueError for an unknown
    format version.
    """
    file_size = os.fstat(fd).st_size
    header = os.pread(fd, FILE_HEADER_SIZE, 0)
    if len(header) < FILE_HEADER_SIZE:
        log.warning("%s: segment without a header; removing it", path)
        return None
    (version,) = FILE_HEADER.unpack(header)
    if version != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported segment format version {version}")
    position = FILE_HEADER_SIZE
    chunk, chunk_start = memoryview(b""), position
    problem = ""
    while position < file_size:
        offset = position - chunk_start
        if offset + HEADER_SIZE > len(chunk):
            chunk, chunk_start, offset = memoryview(os.pread(fd, _SCAN_CHUNK, position)), position, 0
            if len(chunk) < HEADER_SIZE:
                problem = "truncated"
                break
        size = HEADER_SIZE + LENGTH.unpack_from(chunk, offset)[0]
        if position + size > file_size:
            problem = "truncated"
            break
        if offset + size > len(chunk):
            chunk = memoryview(os.pread(fd, max(_SCAN_CHUNK, size), position))
            chunk_start, offset = position, 0
        checked = check_record(chunk, offset)
        if checked is None:
            problem = "corrupt"
            break
        visit(position, chunk, offset, checked)
        position += size
    if problem:
        log.warning("%s: %s record at byte %d; truncating the segment there", path, problem, position)
        os.ftruncate(fd, position)
        if sync_truncation:
            os.fsync(fd)
    return position


def scan_segment(fd: int, path: Path, acked: set[int]) -> ScannedSegment | None:
    """Validate every record of a segment and sort them into live and skipped; see
    `scan_records` for damaged files."""
    live = live_bytes = 0
    skip = array("I")

    def sort_record(position: int, _chunk: memoryview, _offset: int, checked: tuple[int, bool, int]) -> None:
        nonlocal live, live_bytes
        _, persistent, body_size = checked
        if persistent and position not in acked:
            live += 1
            live_bytes += body_size
        else:
            skip.append(position)

    size = scan_records(fd, path, sort_record, sync_truncation=True)
    return None if size is None else ScannedSegment(size, live, live_bytes, skip)
