"""The replication protocol's frames, between a leader and its followers.

A frame is a kind byte, a u32 payload length and the payload. The leader sends the data
dir's changes as frames (the stream), and during a full sync the files a follower lacks as
the same changes; the follower acknowledges how many bytes of the stream it has written.
Every integer is big-endian.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

# Changes (leader -> follower), as lavin.storage.changes reports them.
WRITE: Final = ord("W")  # path, u64 offset, data
TRUNCATE: Final = ord("T")  # path, u64 size
REPLACE: Final = ord("R")  # path, data
REMOVE: Final = ord("D")  # path
RENAME: Final = ord("M")  # path, target path
CHANGE_KINDS: Final = frozenset((WRITE, TRUNCATE, REPLACE, REMOVE, RENAME))

# The handshake and the sync.
CHALLENGE: Final = ord("c")  # leader: 32 random bytes
AUTH: Final = ord("a")  # follower: JSON {"node", "proof"}: proof = HMAC-SHA256(secret, challenge)
INDEX: Final = ord("i")  # leader: JSON [[path, size, checksum], ...], the data dir as it is
WANT: Final = ord("w")  # follower: JSON [path, ...], the files it lacks or holds otherwise
SYNCED: Final = ord("s")  # leader: the wanted files are all sent; u64 stream bytes until the data dir is whole
ACK: Final = ord("k")  # follower: u64 bytes of the stream written and fsynced
TICK: Final = ord("t")  # leader, 5 times a second: a `Tick`

HEADER: Final = struct.Struct(">BI")
_PATH: Final = struct.Struct(">H")
_U64: Final = struct.Struct(">Q")
MAX_FRAME: Final = 64 * 1024 * 1024  # an index of a very large data dir; changes are split below it
CHUNK: Final = 4 * 1024 * 1024  # a write larger than this goes as several frames


class ProtocolError(Exception):
    """The peer sent something this protocol does not allow."""


def frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def json_frame(kind: int, value: Any) -> bytes:
    return frame(kind, json.dumps(value, separators=(",", ":")).encode())


def u64_frame(kind: int, value: int) -> bytes:
    return frame(kind, _U64.pack(value))


def _path(path: str) -> bytes:
    encoded = path.encode()
    return _PATH.pack(len(encoded)) + encoded


def write_frames(path: str, offset: int, data: bytes | memoryview) -> Iterator[bytes]:
    """A write, as frames of at most CHUNK bytes of data each (each one still idempotent)."""
    head = _path(path)
    view = memoryview(data)
    for start in range(0, max(len(view), 1), CHUNK):
        piece = view[start : start + CHUNK]
        yield HEADER.pack(WRITE, len(head) + 8 + len(piece)) + head + _U64.pack(offset + start) + piece


def truncate_frame(path: str, size: int) -> bytes:
    return frame(TRUNCATE, _path(path) + _U64.pack(size))


def replace_frame(path: str, data: bytes) -> bytes:
    return frame(REPLACE, _path(path) + data)


def remove_frame(path: str) -> bytes:
    return frame(REMOVE, _path(path))


def rename_frame(source: str, target: str) -> bytes:
    return frame(RENAME, _path(source) + _path(target))


@dataclass(frozen=True)
class Change:
    kind: int
    path: str
    offset: int = 0  # WRITE: where; TRUNCATE: the size
    data: bytes = b""  # WRITE, REPLACE
    target: str = ""  # RENAME


def decode_change(kind: int, payload: bytes) -> Change:
    try:
        (length,) = _PATH.unpack_from(payload)
        path = payload[2 : 2 + length].decode()
        rest = payload[2 + length :]
        if kind == WRITE:
            return Change(kind, path, _U64.unpack_from(rest)[0], rest[8:])
        if kind == TRUNCATE:
            return Change(kind, path, _U64.unpack_from(rest)[0])
        if kind == REPLACE:
            return Change(kind, path, data=rest)
        if kind == RENAME:
            (target_length,) = _PATH.unpack_from(rest)
            return Change(kind, path, target=rest[2 : 2 + target_length].decode())
        return Change(kind, path)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed change frame: {exc}") from None


TICK_PAYLOAD: Final = struct.Struct(">QQB")


@dataclass(frozen=True)
class Tick:
    sent: int  # stream bytes the leader sent this follower
    replicated: int  # how many of them every in-sync replica has written
    in_sync: bool


def tick_frame(tick: Tick) -> bytes:
    return frame(TICK, TICK_PAYLOAD.pack(tick.sent, tick.replicated, tick.in_sync))


def decode_tick(payload: bytes) -> Tick:
    if len(payload) != TICK_PAYLOAD.size:
        raise ProtocolError("malformed tick frame")
    sent, replicated, in_sync = TICK_PAYLOAD.unpack(payload)
    return Tick(int(sent), int(replicated), bool(in_sync))


def decode_u64(payload: bytes) -> int:
    if len(payload) != 8:
        raise ProtocolError("malformed counter frame")
    return int(_U64.unpack(payload)[0])


def decode_json(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed JSON frame: {exc}") from None


class FrameReader:
    """Splits received bytes into frames; refuses a frame over `max_frame` before buffering it."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buffer = self._buffer
        buffer += data
        frames = []
        start = 0
        while len(buffer) - start >= HEADER.size:
            kind, length = HEADER.unpack_from(buffer, start)
            if length > self.max_frame:
                raise ProtocolError(f"frame of {length} bytes is over the limit of {self.max_frame}")
            end = start + HEADER.size + length
            if len(buffer) < end:
                break
            frames.append((kind, bytes(buffer[start + HEADER.size : end])))
            start = end
        del buffer[:start]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)
