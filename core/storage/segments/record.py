"""The message record of segment files: how one message is laid out on disk.

A segment file starts with a u32 format version, then records back to back. Integers are
little-endian:

    u32  length      bytes after this 9-byte header
    u32  crc32       of the flags byte and everything after it
    u8   flags       FLAG_PERSISTENT, FLAG_HOLE
    u64  timestamp   broker receive time, ms since the epoch
    u8 + bytes       exchange
    u8 + bytes       routing key
    u32 + bytes      properties (flag word + fields, as in the AMQP content header)
    u64 + bytes      body
"""

from __future__ import annotations

import struct
import time
import zlib
from typing import Final

from lavin.api.message import Body, Message

FORMAT_VERSION: Final = 1
FILE_HEADER: Final = struct.Struct("<I")
FILE_HEADER_SIZE: Final = FILE_HEADER.size
FILE_HEADER_BYTES: Final = FILE_HEADER.pack(FORMAT_VERSION)

HEADER_SIZE: Final = 9  # length, crc32, flags
FLAG_PERSISTENT: Final = 0x01
# Written by recovery over damaged bytes: stands for a lost record, so that the records
# after it keep their positions (and a stream's offsets); readers pass over it.
FLAG_HOLE: Final = 0x02
DAMAGED: Final = -1  # `intact_flags` of a record that fails its crc
LENGTH: Final = struct.Struct("<I")  # the record length, and those of properties

_LENGTH_CRC: Final = struct.Struct("<II")
_CRC: Final = struct.Struct("<I")
_TIMESTAMP_EXCHANGE_SIZE: Final = struct.Struct("<9xQB")  # read past the header
_U64: Final = struct.Struct("<Q")
_CRC_START: Final = 8  # the crc covers the record from the flags byte on
_crc32: Final = zlib.crc32  # compiled, a module attribute is looked up at every call

# Header, timestamp and the length fields of exchange, routing key, properties and body.
FIXED_SIZE: Final = HEADER_SIZE + 8 + 1 + 1 + 4 + 8

# Names round-trip whatever bytes the publisher sent.
TEXT_ENCODING: Final = "utf-8"
TEXT_ERRORS: Final = "surrogateescape"

# A record's head (everything before the body) as one Struct per size of exchange, routing
# key and properties: one pack call instead of nine appends. Publishers reuse a handful of
# sizes, most often one: the last one used is kept aside, so that a run of alike messages
# skips the cache lookup too; the cap keeps odd traffic from growing the cache without bound.
_LayoutKey = tuple[int, int, int]
_layouts: Final[dict[_LayoutKey, struct.Struct]] = {}
_LAYOUTS_MAX: Final = 4096


class _LastLayout:
    __slots__ = ("exchange_size", "layout", "properties_size", "routing_key_size")

    def __init__(self) -> None:
        self.exchange_size = self.routing_key_size = self.properties_size = -1
        self.layout = _LENGTH_CRC


_last_layout: Final = _LastLayout()


def _layout(exchange_size: int, routing_key_size: int, properties_size: int) -> struct.Struct:
    last = _last_layout
    if (
        last.exchange_size == exchange_size
        and last.routing_key_size == routing_key_size
        and last.properties_size == properties_size
    ):
        return last.layout
    key = (exchange_size, routing_key_size, properties_size)
    layout = _layouts.get(key)
    if layout is None:
        if len(_layouts) >= _LAYOUTS_MAX:
            _layouts.clear()
        layout = _layouts[key] = struct.Struct(f"<IIBQB{exchange_size}sB{routing_key_size}sI{properties_size}sQ")
    last.exchange_size, last.routing_key_size, last.properties_size = key
    last.layout = layout
    return layout


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class RecordEncoder:
    """Encodes the records of one store. Publishers repeat themselves: a run of messages
    carries the same exchange and routing key objects (a publisher's channel hands the same
    ones on while its basic.publish does not change), the same properties, and often the
    same body size and receive time (taken once per socket read). So the names are encoded
    once per run, and a head equal to the last one is not packed again."""

    __slots__ = (
        "_body_size",
        "_exchange",
        "_exchange_bytes",
        "_flags",
        "_head",
        "_head_crc",
        "_head_exchange",
        "_head_routing_key",
        "_properties",
        "_routing_key",
        "_routing_key_bytes",
        "_timestamp",
    )

    def __init__(self) -> None:
        self._exchange = self._routing_key = ""
        self._exchange_bytes = self._routing_key_bytes = b""
        # The last head, and what it was made of
        self._head = self._head_exchange = self._head_routing_key = self._properties = b""
        self._timestamp = self._body_size = self._flags = -1
        self._head_crc = -1  # crc32 of the head from the flags byte on; -1 until a checksum needs it

    def prepare(self, message: Message) -> tuple[bytes, bytes, int]:
        """(exchange, routing key, size of the message's record): what `append` needs to
        know first."""
        exchange = message.exchange
        if exchange is not self._exchange:
            self._exchange = exchange
            self._exchange_bytes = exchange.encode(TEXT_ENCODING, TEXT_ERRORS)
        routing_key = message.routing_key
        if routing_key is not self._routing_key:
            self._routing_key = routing_key
            self._routing_key_bytes = routing_key.encode(TEXT_ENCODING, TEXT_ERRORS)
        exchange_bytes = self._exchange_bytes
        routing_key_bytes = self._routing_key_bytes
        size = FIXED_SIZE + len(exchange_bytes) + len(routing_key_bytes) + len(message.properties) + len(message.body)
        return exchange_bytes, routing_key_bytes, size

    def append_head(
        self,
        buffer: bytearray,
        timestamp: int,
        exchange: bytes,
        routing_key: bytes,
        properties: bytes,
        body: Body,
        flags: int,
        checksum: bool = True,
    ) -> None:
        """Encode the head of one record, everything before its body, at the end of
        `buffer`; the caller appends the body, to the same buffer or (a large body, kept as
        it is) as a piece of its own. Without `checksum` the crc field is 0: for stores that
        are never recovered, where nothing would check it.

        Raises ValueError, leaving `buffer` as it was, for a name longer than 255 bytes.
        """
        head = self._head_of(timestamp, exchange, routing_key, properties, len(body), flags)
        start = len(buffer)
        buffer += head
        if checksum:
            _CRC.pack_into(buffer, start + 4, zlib.crc32(body, self._crc_of_head()))

    def _head_of(
        self, timestamp: int, exchange: bytes, routing_key: bytes, properties: bytes, body_size: int, flags: int
    ) -> bytes:
        if (
            timestamp == self._timestamp
            and body_size == self._body_size
            and flags == self._flags
            and exchange is self._head_exchange
            and routing_key is self._head_routing_key
            and properties == self._properties
        ):
            return self._head
        head = self._head = _head(timestamp, exchange, routing_key, properties, body_size, flags)
        self._timestamp, self._body_size, self._flags = timestamp, body_size, flags
        self._head_exchange, self._head_routing_key, self._properties = exchange, routing_key, properties
        self._head_crc = -1
        return head

    def _crc_of_head(self) -> int:
        if self._head_crc < 0:
            self._head_crc = zlib.crc32(self._head[_CRC_START:])
        return self._head_crc


def _head(timestamp: int, exchange: bytes, routing_key: bytes, properties: bytes, body_size: int, flags: int) -> bytes:
    """A record's head with its crc field 0."""
    layout = _layout(len(exchange), len(routing_key), len(properties))
    try:
        head: bytes = layout.pack(
            layout.size - HEADER_SIZE + body_size,
            0,
            flags,
            timestamp,
            len(exchange),
            exchange,
            len(routing_key),
            routing_key,
            len(properties),
            properties,
            body_size,
        )
    except struct.error:
        raise ValueError("exchange and routing key are limited to 255 bytes") from None
    return head


def record_size(buffer: bytes | bytearray, offset: int) -> int:
    """Size of the record at `offset`, header included."""
    size: int = HEADER_SIZE + LENGTH.unpack_from(buffer, offset)[0]
    return size


def intact_flags(buffer: bytes, offset: int, size: int) -> int:
    """The flags byte of the record at `offset`, `size` bytes as its length field says,
    when it matches its crc; DAMAGED when it does not, or `buffer` ends before it."""
    end = offset + size
    if size < FIXED_SIZE or end > len(buffer):
        return DAMAGED
    return buffer[offset + _CRC_START] if _crc_matches(buffer, offset, end) else DAMAGED


def _crc_matches(data: bytes, offset: int, end: int) -> bool:
    """Whether the record from `offset` to `end` matches the crc in its header."""
    return _crc32(data[offset + _CRC_START : end]) == u32_at(data, offset + 4)


def hole_records(sizes: list[int], timestamp: int) -> bytes:
    """Holes of the given sizes, each at least FIXED_SIZE bytes, back to back."""
    buffer = bytearray()
    encoder = RecordEncoder()
    for size in sizes:
        body = bytes(size - FIXED_SIZE)
        encoder.append_head(buffer, timestamp, b"", b"", b"", body, FLAG_HOLE)
        buffer += body
    return bytes(buffer)


def decode_record(buffer: bytes, offset: int) -> Message:
    """The message of the complete record at `offset`."""
    timestamp: int
    exchange_size: int
    timestamp, exchange_size = _TIMESTAMP_EXCHANGE_SIZE.unpack_from(buffer, offset)
    position = offset + HEADER_SIZE + 9
    end = position + exchange_size
    exchange = buffer[position:end].decode(TEXT_ENCODING, TEXT_ERRORS)
    position = end + 1 + buffer[end]
    routing_key = buffer[end + 1 : position].decode(TEXT_ENCODING, TEXT_ERRORS)
    properties_size: int = LENGTH.unpack_from(buffer, position)[0]
    end = position + 4 + properties_size
    properties = buffer[position + 4 : end]
    body_length: int = _U64.unpack_from(buffer, end)[0]
    position = end + 8 + body_length
    return Message(exchange, routing_key, properties, buffer[end + 8 : position], timestamp)


def _body_length_offset(buffer: bytes | bytearray, offset: int) -> int:
    position = offset + HEADER_SIZE + 8
    position += 1 + buffer[position]
    position += 1 + buffer[position]
    body_length_offset: int = position + 4 + LENGTH.unpack_from(buffer, position)[0]
    return body_length_offset


def record_flags(buffer: bytes | bytearray, offset: int) -> int:
    """The flags byte of the record at `offset` (FLAG_PERSISTENT, FLAG_HOLE)."""
    return buffer[offset + _CRC_START]


def body_size(buffer: bytes | bytearray, offset: int) -> int:
    """Body length of the complete record at `offset`."""
    return int(_U64.unpack_from(buffer, _body_length_offset(buffer, offset))[0])


def checked_body_size(data: bytes, offset: int, verify_crc: bool = True) -> int:
    """Body size of the record at `offset`, or DAMAGED when it fails its crc (unless
    `verify_crc` is False), its field lengths disagree, or `data` ends before it. A recovery
    scan calls this for every record: integers are read octet by octet, which compiled
    allocates nothing (a struct unpack builds a tuple each time)."""
    if offset + HEADER_SIZE > len(data):
        return DAMAGED
    end = offset + HEADER_SIZE + u32_at(data, offset)
    if end - offset < FIXED_SIZE or end > len(data):
        return DAMAGED
    if verify_crc and not _crc_matches(data, offset, end):
        return DAMAGED
    # Walk the length fields; each must land inside the record, the body exactly at its end.
    position = offset + HEADER_SIZE + 8
    position += 1 + data[position]
    if position >= end:
        return DAMAGED
    position += 1 + data[position]
    if position + 4 > end:
        return DAMAGED
    position += 4 + u32_at(data, position)
    if position + 8 > end:
        return DAMAGED
    size = u32_at(data, position) | u32_at(data, position + 4) << 32
    return size if position + 8 + size == end else DAMAGED


def u32_at(data: bytes, offset: int) -> int:
    """The little-endian u32 at `offset` (lengths and crcs in records)."""
    return data[offset] | data[offset + 1] << 8 | data[offset + 2] << 16 | data[offset + 3] << 24
