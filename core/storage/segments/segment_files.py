"""Files of segment stores and stream logs: names, reads and writes of records, the
recovery scan; and the ack files of segment stores.

`msgs.0000000001` holds records (see lavin.storage.segments.record); `acks.0000000001` holds the
u32 little-endian byte positions of the records of that segment that were acked.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import sys
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from lavin.storage import changes
from lavin.storage.changes import CHANGES
from lavin.storage.quarantine import copy_aside
from lavin.storage.segments.record import (
    DAMAGED,
    FILE_HEADER,
    FILE_HEADER_SIZE,
    FIXED_SIZE,
    FLAG_PERSISTENT,
    FORMAT_VERSION,
    HEADER_SIZE,
    LENGTH,
    checked_body_size,
    hole_records,
    record_size,
    u32_at,
)

log = logging.getLogger(__name__)

SEGMENT_PREFIX: Final = "msgs."
ACK_PREFIX: Final = "acks."
_ID_DIGITS: Final = 10
_POSITION_SIZE: Final = 4
_READ_AHEAD: Final = 128 << 10
_SCAN_CHUNK: Final = 1 << 20
_BIG_ENDIAN_HOST: Final = sys.byteorder == "big"
_TIMESTAMP: Final = struct.Struct("<Q")  # follows a record's header


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
    """An fd of a segment file, created when missing, for reading and for writes at given
    positions (`write_at`): not O_APPEND, so that a failed write is written over."""
    return os.open(segment_path(directory, segment_id), os.O_RDWR | os.O_CREAT, 0o644)


def list_segments(directory: Path, companion_prefix: str) -> list[int]:
    """Ids of the segment files, ascending. Companion files (acks, indexes) whose segment
    is gone are deleted."""
    segment_ids = list_ids(directory, SEGMENT_PREFIX)
    for orphan in set(list_ids(directory, companion_prefix)).difference(segment_ids):
        changes.remove_file(numbered_path(directory, companion_prefix, orphan))
    return segment_ids


def rolled_over(write_failing: bool, roll: Callable[[], None]) -> bool:
    """Roll a store over to a new write segment unless its writes fail (then the write
    segment grows past `segment_size` until a flush writes it again); whether it rolled."""
    if write_failing:
        return False
    try:
        roll()
    except OSError:
        return False
    return True


_IOV_MAX: Final = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024


def write_at(fd: int, data: bytes | bytearray, offset: int) -> None:
    """Write all of `data` at `offset`, where the file's last whole record ends.

    On failure (a full disk, an I/O error, the file size limit) the file is cut back to
    `offset` and the error raised. The caller keeps `data` and writes it at the same
    offset again: should the cut fail too, that write covers the torn bytes, which are a
    prefix of it, and a torn record is never followed by a second copy.
    """
    write_parts_at(fd, [data], offset)


def write_parts_at(fd: int, parts: list[bytes | bytearray], offset: int) -> None:
    """`write_at` for data held in pieces (records whose large bodies are kept apart): one
    gathered write per IOV_MAX pieces instead of joining them first."""
    position = offset
    try:
        for start in range(0, len(parts), _IOV_MAX):
            batch = parts[start : start + _IOV_MAX]
            expected = sum(len(part) for part in batch)
            written = os.pwritev(fd, batch, position)
            if written < expected:  # only on signals or a full disk: the rest one piece at a time
                with memoryview(b"".join(batch)) as view:
                    while written < expected:
                        written += os.pwrite(fd, view[written:], position + written)
            position += expected
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, offset)
        raise


class SegmentFile(Protocol):
    """A segment whose file a `ReadWindow` reads."""

    fd: int


class ReadWindow:
    """Bytes of one segment file around the last read, so that neighbouring records share
    one pread.

    Keyed by the segment, not its fd: the fd number of a deleted segment is reused.
    """

    __slots__ = ("data", "reads", "segment", "start")

    def __init__(self) -> None:
        self.segment: SegmentFile | None = None
        self.start = 0
        self.data = b""
        self.reads = 0  # preads so far (a queue's disk reads)

    def locate(self, segment: SegmentFile, position: int) -> tuple[bytes, int, int]:
        """A buffer holding the whole record at `position`, its offset there, its size.
        The buffer ends before the record when the file does: `record.intact_flags` tells."""
        data = self.data
        offset = position - self.start
        if self.segment is segment and 0 <= offset <= len(data) - HEADER_SIZE:
            length: int = LENGTH.unpack_from(data, offset)[0]
            size = HEADER_SIZE + length
            if offset + size <= len(data):
                return data, offset, size
        data = os.pread(segment.fd, _READ_AHEAD, position)
        self.reads += 1
        size = record_size(data, 0)
        if size > len(data):
            self.reads += 1
            # Capped at the file's end: a damaged length field must not allocate gigabytes.
            data = os.pread(segment.fd, min(size, os.fstat(segment.fd).st_size - position), position)
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
        sink = CHANGES.sink
        if sink is not None:
            sink.truncated(path, usable)
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


# Called for each valid record: its position, a buffer holding it, its offset there, its
# size and its body size.
RecordVisitor = Callable[[int, bytes, int, int, int], None]


class RecordWalk:
    """The records of a segment file in order, read a chunk at a time: `check` the one at
    `position`, then `advance` past it."""

    __slots__ = ("_fd", "_verify_crc", "chunk", "chunk_start", "file_size", "position", "size")

    def __init__(self, fd: int, file_size: int, verify_crc: bool = True) -> None:
        self._fd = fd
        self._verify_crc = verify_crc
        self.file_size = file_size
        self.position = FILE_HEADER_SIZE
        self.chunk = b""
        self.chunk_start = FILE_HEADER_SIZE
        self.size = 0  # of the record at `position` as its length field says; 0 before it is read

    @property
    def offset(self) -> int:
        """Where the record at `position` starts in `chunk`."""
        return self.position - self.chunk_start

    def check(self) -> int:
        """The body size of the record at `position`, or DAMAGED when it fails its checks
        or runs past the end of the file."""
        position = self.position
        offset = position - self.chunk_start
        if offset + HEADER_SIZE > len(self.chunk):
            self._read(_SCAN_CHUNK)
            offset = 0
        if len(self.chunk) - offset < HEADER_SIZE:
            self.size = 0
            return DAMAGED
        self.size = HEADER_SIZE + u32_at(self.chunk, offset)
        if position + self.size > self.file_size:
            return DAMAGED
        if offset + self.size > len(self.chunk):
            self._read(max(_SCAN_CHUNK, self.size))
            offset = 0
        return checked_body_size(self.chunk, offset, self._verify_crc)

    def advance(self) -> None:
        self.position += self.size

    def resume_at(self, position: int) -> None:
        """Go on from `position`, reading afresh: the file changed under the chunk."""
        self.position, self.chunk, self.chunk_start = position, b"", position

    def _read(self, size: int) -> None:
        self.chunk, self.chunk_start = os.pread(self._fd, size, self.position), self.position


class UnsupportedSegment(ValueError):
    """A segment file whose format version this broker does not know."""


def check_header(fd: int, path: Path) -> bool:
    """Whether a segment file holds its format header: False when it is too short (the
    broker stopped while creating it). Raises UnsupportedSegment for an unknown version."""
    header = os.pread(fd, FILE_HEADER_SIZE, 0)
    if len(header) < FILE_HEADER_SIZE:
        return False
    (version,) = FILE_HEADER.unpack(header)
    if version != FORMAT_VERSION:
        raise UnsupportedSegment(f"{path}: unsupported segment format version {version}")
    return True


def scan_records(fd: int, path: Path, visit: RecordVisitor, *, sync_truncation: bool) -> int | None:
    """Validate the records of a segment file in order, handing each to `visit`; return
    the size of the valid data.

    A damaged record followed by intact ones is passed over: the file is first copied
    aside (`*.corrupt`), then the damaged bytes are overwritten with holes (see
    `lavin.storage.segments.record.FLAG_HOLE`, visited like records), and an ERROR names the
    file and the counts. A damaged record with nothing intact after it is a torn tail:
    the file is truncated there (synced if `sync_truncation`) with a WARNING. Returns
    None for a file too short to hold its format header (the broker stopped while
    creating it); raises UnsupportedSegment for an unknown format version.
    """
    file_size = os.fstat(fd).st_size
    if not check_header(fd, path):
        log.warning("%s: segment without a header; removing it", path)
        return None
    repair = _Repair(path)
    walk = RecordWalk(fd, file_size)
    problem = ""
    while walk.position < file_size:
        body = walk.check()
        if body == DAMAGED:
            resume = _next_intact_record(fd, walk.position + FIXED_SIZE, file_size)
            if resume is None:
                problem = "truncated" if not walk.size or walk.position + walk.size > file_size else "corrupt"
                break
            repair.fill(fd, walk.position, resume, visit)
            walk.resume_at(resume)
            continue
        visit(walk.position, walk.chunk, walk.offset, walk.size, body)
        repair.intact += 1
        walk.advance()
    position = walk.position
    if problem:
        log.warning("%s: %s record at byte %d; truncating the segment there", path, problem, position)
        os.ftruncate(fd, position)
        sink = CHANGES.sink
        if sink is not None:
            sink.truncated(path, position)
    if repair.damaged or problem:
        if sync_truncation:
            os.fsync(fd)
        repair.report()
    return position


class _Repair:
    """Damaged stretches of one segment file, overwritten with holes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.intact = 0  # records visited as they were
        self.damaged = 0  # records the holes stand for
        self.damaged_bytes = 0
        self.first_damage = -1
        self.kept: Path | None = None  # the copy of the file as it was

    def fill(self, fd: int, start: int, end: int, visit: RecordVisitor) -> None:
        """Overwrite the bytes from `start` to the intact record at `end` with holes, one
        per record that was there when its length fields tell, and visit them."""
        if self.kept is None:
            self.kept = copy_aside(self.path)
            self.first_damage = start
        count = _records_between(fd, start, end)
        sizes = [FIXED_SIZE] * (count - 1) + [end - start - (count - 1) * FIXED_SIZE]
        timestamp: int = _TIMESTAMP.unpack(os.pread(fd, _TIMESTAMP.size, end + HEADER_SIZE))[0]
        holes = hole_records(sizes, timestamp)
        writer = os.open(self.path, os.O_WRONLY)  # `fd` may be O_APPEND, which pwrite obeys on Linux
        try:
            if os.pwrite(writer, holes, start) != len(holes):
                raise OSError(f"{self.path}: short write of holes at byte {start}")
        finally:
            os.close(writer)
        sink = CHANGES.sink
        if sink is not None:
            sink.written(self.path, start, holes)
        offset = 0
        for size in sizes:
            body = checked_body_size(holes, offset)
            assert body != DAMAGED  # holes are records by construction
            visit(start + offset, holes, offset, size, body)
            offset += size
        self.damaged += count
        self.damaged_bytes += end - start

    def report(self) -> None:
        if self.kept is None:
            return
        log.error(
            "%s: %d damaged record(s) (%d bytes, the first at byte %d) passed over, %d intact record(s) kept; "
            "the file as it was is kept as %s",
            self.path,
            self.damaged,
            self.damaged_bytes,
            self.first_damage,
            self.intact,
            self.kept.name,
        )


def _next_intact_record(fd: int, start: int, file_size: int) -> int | None:
    """Position of the first intact record at or after `start`: where reading resumes
    after damage. None when there is none."""
    if start + FIXED_SIZE > file_size:
        return None
    with mmap.mmap(fd, file_size, prot=mmap.PROT_READ) as mapped, memoryview(mapped) as view:
        for position in range(start, file_size - FIXED_SIZE + 1):
            length: int = LENGTH.unpack_from(view, position)[0]
            if length < FIXED_SIZE - HEADER_SIZE or position + HEADER_SIZE + length > file_size:
                continue  # most positions end here, before any crc
            if checked_body_size(bytes(view[position : position + HEADER_SIZE + length]), 0) != DAMAGED:
                return position
    return None


def _records_between(fd: int, start: int, end: int) -> int:
    """How many records lay from `start` to the intact record at `end`: the hops of their
    length fields when those land exactly on `end` (the damage spared them), else one.
    Never more than holes of FIXED_SIZE that fit."""
    data = os.pread(fd, end - start, start)
    position = count = 0
    while position + HEADER_SIZE <= len(data):
        position += HEADER_SIZE + LENGTH.unpack_from(data, position)[0]
        count += 1
    if position != len(data):
        count = 1
    return max(1, min(count, len(data) // FIXED_SIZE))


class _LiveRecords:
    """A segment's records sorted into live (persistent, not acked) and skipped."""

    def __init__(self, acked: set[int]) -> None:
        self.acked = acked
        self.live = 0
        self.live_bytes = 0
        self.skip = array("I")

    def sort(self, position: int, chunk: bytes, offset: int, _size: int, body_size: int) -> None:
        if chunk[offset + HEADER_SIZE - 1] & FLAG_PERSISTENT and position not in self.acked:  # flags end the header
            self.live += 1
            self.live_bytes += body_size
        else:
            self.skip.append(position)

    def scanned(self, size: int) -> ScannedSegment:
        return ScannedSegment(size, self.live, self.live_bytes, self.skip)


def scan_segment(fd: int, path: Path, acked: set[int], verify_crc: bool = True) -> ScannedSegment | None:
    """Validate every record of a segment and sort them into live and skipped; see
    `scan_records` for damaged files. Without `verify_crc` (the files were closed cleanly,
    `lavin.storage.clean_shutdown`) only the length fields are checked, and a record they
    do not account for still sends the file to the careful scan.

    An intact file, the usual case, is walked without a call per record: a restart with
    a hundred million messages queued spends its time here."""
    file_size = os.fstat(fd).st_size
    if check_header(fd, path):
        records = _LiveRecords(acked)
        walk = RecordWalk(fd, file_size, verify_crc)
        while walk.position < file_size:
            body = walk.check()
            if body == DAMAGED:
                break
            records.sort(walk.position, walk.chunk, walk.offset, walk.size, body)
            walk.advance()
        if walk.position == file_size:
            return records.scanned(file_size)
    # Damaged, or without a header: the careful scan reports and repairs it, from the start.
    records = _LiveRecords(acked)
    size = scan_records(fd, path, records.sort, sync_truncation=True)
    return None if size is None else records.scanned(size)
