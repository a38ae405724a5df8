"""Files of a segment store: names, ack files and the recovery scan of one segment.

`msgs.0000000001` holds records (see lavin.storage.record); `acks.0000000001` holds the
u32 little-endian byte positions of the records of that segment that were acked.
"""

from __future__ import annotations

import logging
import os
import sys
from array import array
from pathlib import Path
from typing import NamedTuple

from lavin.storage.record import (
    FILE_HEADER,
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    LENGTH,
    check_record,
)

log = logging.getLogger(__name__)

SEGMENT_PREFIX = "msgs."
ACK_PREFIX = "acks."
_ID_DIGITS = 10
_POSITION_SIZE = 4
_SCAN_CHUNK = 1 << 20
_BIG_ENDIAN_HOST = sys.byteorder == "big"


def segment_path(directory: Path, segment_id: int) -> Path:
    return directory / f"{SEGMENT_PREFIX}{segment_id:0{_ID_DIGITS}d}"


def ack_path(directory: Path, segment_id: int) -> Path:
    return directory / f"{ACK_PREFIX}{segment_id:0{_ID_DIGITS}d}"


def list_ids(directory: Path, prefix: str) -> list[int]:
    """Ids of the files named prefix + 10 digits, ascending."""
    ids = []
    for name in os.listdir(directory):
        digits = name[len(prefix) :]
        if name.startswith(prefix) and len(digits) == _ID_DIGITS and digits.isdigit():
            ids.append(int(digits))
    return sorted(ids)


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


def scan_segment(fd: int, path: Path, acked: set[int]) -> ScannedSegment | None:
    """Validate every record of a segment and sort them into live and skipped.

    A record that is cut short or fails its crc ends the segment: the file is truncated
    there. Returns None for a file too short to hold its format header (the broker stopped
    while creating it); raises ValueError for an unknown format version.
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
    live = live_bytes = 0
    skip = array("I")
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
        _, persistent, body_size = checked
        if persistent and position not in acked:
            live += 1
            live_bytes += body_size
        else:
            skip.append(position)
        position += size
    if problem:
        log.warning("%s: %s record at byte %d; truncating the segment there", path, problem, position)
        os.ftruncate(fd, position)
        os.fsync(fd)
    return ScannedSegment(position, live, live_bytes, skip)
