"""Where named stream consumers resume: `consumer_offsets`, an append-only file per stream.

Each record is `u32 crc32 | u8 tag length | tag | u64 offset` (little-endian, the crc
covering everything after it); the last record of a tag wins. A torn or damaged tail (a
crash mid-write) is cut off. The file is rewritten with one record per tag when it opens
with superseded records, and at runtime once it holds many more records than tags;
tags whose offset retention has passed are dropped then.

Records are handed to the OS at each flush without an fsync: a stored offset that lags
after a power loss makes a consumer read some messages twice, never skip one.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path

from lavin.storage import changes
from lavin.storage.changes import CHANGES
from lavin.storage.disk import fsync_directory

log = logging.getLogger(__name__)

OFFSETS_FILE = "consumer_offsets"
_CRC = struct.Struct("<I")
_OFFSET = struct.Struct("<Q")
_COMPACT_MIN_RECORDS = 1024
_COMPACT_FACTOR = 8  # records per live tag that trigger a rewrite


def _record(tag: bytes, offset: int) -> bytes:
    payload = bytes((len(tag),)) + tag + _OFFSET.pack(offset)
    return _CRC.pack(zlib.crc32(payload)) + payload


class ConsumerOffsets:
    """The resume offset of each consumer tag that asked for server-side tracking."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / OFFSETS_FILE
        self._offsets: dict[bytes, int] = {}
        self._pending: dict[bytes, int] = {}  # stored since the last flush
        records = self._load()
        if records > len(self._offsets):
            self._rewrite(self._offsets)
        self._records = len(self._offsets)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sink = CHANGES.sink
        if sink is not None:
            sink.written(self.path, 0, b"")  # creates the file when it is new

    def get(self, tag: str) -> int | None:
        return self._offsets.get(tag.encode())

    def store(self, tag: str, offset: int) -> None:
        key = tag.encode()
        self._offsets[key] = offset
        self._pending[key] = offset

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def flush(self, first_offset: int) -> None:
        """Append the offsets stored since the last flush; compact when the file has grown
        far beyond one record per tag (dropping tags below `first_offset`)."""
        if not self._pending:
            return
        data = b"".join(_record(tag, offset) for tag, offset in self._pending.items())
        self._records += len(self._pending)
        self._pending.clear()
        changes.append(self._fd, self.path, data)
        if self._records > max(_COMPACT_MIN_RECORDS, _COMPACT_FACTOR * len(self._offsets)):
            self._offsets = {tag: offset for tag, offset in self._offsets.items() if offset >= first_offset}
            os.close(self._fd)
            self._rewrite(self._offsets)
            self._records = len(self._offsets)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def close(self) -> None:
        self.flush(0)
        os.fsync(self._fd)
        os.close(self._fd)

    def _load(self) -> int:
        """Read the file into `_offsets`; return how many records it held."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        position = records = 0
        while position + _CRC.size + 1 <= len(data):
            end = position + _CRC.size + 1 + data[position + _CRC.size] + _OFFSET.size
            payload = data[position + _CRC.size : end]
            if end > len(data) or zlib.crc32(payload) != _CRC.unpack_from(data, position)[0]:
                break
            self._offsets[payload[1 : -_OFFSET.size]] = _OFFSET.unpack_from(payload, len(payload) - _OFFSET.size)[0]
            records += 1
            position = end
        if position != len(data):
            log.warning("%s: damaged record at byte %d; dropping the rest", self.path, position)
            records += 1  # forces the rewrite that cuts it off
        return records

    def _rewrite(self, offsets: dict[bytes, int]) -> None:
        temporary = self.path.with_name(OFFSETS_FILE + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        data = b"".join(_record(tag, offset) for tag, offset in offsets.items())
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        changes.install(temporary, self.path, data)
        fsync_directory(self.path.parent)
