"""The message as the broker carries it: routing data plus raw, still-encoded properties.

Properties stay the bytes the publisher sent (flag word + fields, as in the content header)
until something needs a field; `PropertyView` decodes them once, on demand.
"""

from __future__ import annotations

import struct
from typing import Any, Final, TypeAlias

from lavin.api.field_table import decode_table, encode_table

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")

# Flag bit, name and wire kind of each basic property, in wire order.
PROPERTY_FIELDS: Final[tuple[tuple[int, str, str], ...]] = (
    (0x8000, "content_type", "shortstr"),
    (0x4000, "content_encoding", "shortstr"),
    (0x2000, "headers", "table"),
    (0x1000, "delivery_mode", "octet"),
    (0x0800, "priority", "octet"),
    (0x0400, "correlation_id", "shortstr"),
    (0x0200, "reply_to", "shortstr"),
    (0x0100, "expiration", "shortstr"),
    (0x0080, "message_id", "shortstr"),
    (0x0040, "timestamp", "timestamp"),
    (0x0020, "type", "shortstr"),
    (0x0010, "user_id", "shortstr"),
    (0x0008, "app_id", "shortstr"),
    (0x0004, "cluster_id", "shortstr"),
)

EMPTY_PROPERTIES: Final = b"\x00\x00"


# Bits of the property flag word's first byte. Message.persistent and Message.props decode
# every property; the readers below run for each stored message and allocate nothing.
_CONTENT_TYPE: Final = 0x80
_CONTENT_ENCODING: Final = 0x40
HEADERS_FLAG: Final = 0x20
_DELIVERY_MODE: Final = 0x10
_PRIORITY: Final = 0x08
_SIZED_FIELDS: Final = _CONTENT_TYPE | _CONTENT_ENCODING | HEADERS_FLAG


def headers_offset(properties: bytes) -> int:
    """Offset of the headers table (or of where it would go), just past the flag word,
    content_type and content_encoding."""
    flags = properties[0]
    offset = 2
    if flags & _CONTENT_TYPE:
        offset += 1 + properties[offset]
    if flags & _CONTENT_ENCODING:
        offset += 1 + properties[offset]
    return offset


def _after_sized_fields(properties: bytes) -> int:
    """Offset of delivery_mode, just past content_type, content_encoding and headers."""
    offset = headers_offset(properties)
    if properties[0] & HEADERS_FLAG:
        offset += 4 + _U32.unpack_from(properties, offset)[0]
    return offset


def is_persistent(properties: bytes) -> bool:
    """delivery_mode == 2, found by skipping the fields before it."""
    if len(properties) < 3 or not properties[0] & _DELIVERY_MODE:
        return False
    offset = _after_sized_fields(properties) if properties[0] & _SIZED_FIELDS else 2
    return offset < len(properties) and properties[offset] == 2


def message_priority(properties: bytes) -> int:
    """The priority property, 0 when absent, found by skipping the fields before it."""
    if len(properties) < 3 or not properties[0] & _PRIORITY:
        return 0
    offset = _after_sized_fields(properties) if properties[0] & _SIZED_FIELDS else 2
    if properties[0] & _DELIVERY_MODE:
        offset += 1
    return properties[offset] if offset < len(properties) else 0


# The property flag word: each field's bit, in wire order; which of them are octets, the
# timestamp and the headers table (the others are shortstrs); the bits no field uses.
_FIELD_BITS: Final[tuple[int, ...]] = (
    0x8000, 0x4000, 0x2000, 0x1000, 0x0800, 0x0400, 0x0200, 0x0100, 0x0080, 0x0040, 0x0020, 0x0010, 0x0008, 0x0004
)  # fmt: skip
_OCTET_BITS: Final = 0x1000 | 0x0800
_TIMESTAMP_BIT: Final = 0x0040
_TABLE_BIT: Final = 0x2000
_SHORTSTR_BITS: Final = 0xFFFC & ~(_OCTET_BITS | _TIMESTAMP_BIT | _TABLE_BIT)
_UNUSED_BITS: Final = 0x0003


def check_properties(message: Message) -> None:
    """Raise ValueError unless the message's raw properties are well formed, so that nothing
    malformed is stored and fails to decode later. A headers table is decoded (and the
    result kept on the message); other fields are only measured, which costs a few integer
    operations for the usual persistent-only or empty properties."""
    raw = message.properties
    size = len(raw)
    if size < 2:
        raise ValueError("property flags missing")
    flags = raw[0] << 8 | raw[1]
    if flags & _UNUSED_BITS:
        raise ValueError(f"unknown property flags {flags & _UNUSED_BITS:#06x}")
    if flags & _TABLE_BIT:
        message.props  # noqa: B018 - decoding is the check
        return
    offset = 2
    if flags & _SHORTSTR_BITS:
        for bit in _FIELD_BITS:
            if not flags & bit:
                continue
            if bit & _OCTET_BITS:
                offset += 1
            elif bit == _TIMESTAMP_BIT:
                offset += 8
            elif offset < size:
                offset += 1 + raw[offset]
            else:
                raise ValueError("truncated properties")
    else:
        offset += (flags >> 12 & 1) + (flags >> 11 & 1) + (8 if flags & _TIMESTAMP_BIT else 0)
    if offset != size:
        raise ValueError("truncated properties" if offset > size else "trailing bytes after properties")


def decode_properties(raw: bytes) -> dict[str, Any]:
    """Decode a property flag word and its fields into a dict of the fields present.

    Raises ValueError on truncated or malformed input.
    """
    if len(raw) < 2:
        raise ValueError("property flags missing")
    (flags,) = _U16.unpack_from(raw, 0)
    if flags & 0x0001:
        raise ValueError("property flag continuation is not supported")
    offset = 2
    result: dict[str, Any] = {}
    try:
        for bit, name, kind in PROPERTY_FIELDS:
            if not flags & bit:
                continue
            if kind == "shortstr":
                size = raw[offset]
                value_bytes = raw[offset + 1 : offset + 1 + size]
                if len(value_bytes) != size:
                    raise ValueError(f"truncated {name}")
                result[name] = value_bytes.decode("utf-8", "surrogateescape")
                offset += 1 + size
            elif kind == "octet":
                result[name] = raw[offset]
                offset += 1
            elif kind == "timestamp":
                (result[name],) = _U64.unpack_from(raw, offset)
                offset += 8
            else:
                result[name], offset = decode_table(raw, offset)
    except (IndexError, struct.error) as exc:
        raise ValueError(f"truncated properties: {exc}") from exc
    if offset != len(raw):
        raise ValueError("trailing bytes after properties")
    return result


def encode_properties(props: dict[str, Any]) -> bytes:
    """Encode a dict of basic properties into a flag word and fields.

    Raises ValueError for a headers value no field table can hold."""
    flags = 0
    parts: list[bytes] = []
    for bit, name, kind in PROPERTY_FIELDS:
        value = props.get(name)
        if value is None:
            continue
        flags |= bit
        if kind == "shortstr":
            data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
            parts.append(bytes((len(data),)) + data)
        elif kind == "octet":
            parts.append(bytes((int(value),)))
        elif kind == "timestamp":
            parts.append(_U64.pack(int(value.timestamp()) if hasattr(value, "timestamp") else int(value)))
        else:
            parts.append(encode_table(value))
    return _U16.pack(flags) + b"".join(parts)


# A body as the broker holds it: bytes, or the bytearray a body of several frames was
# received into (copying it into bytes would cost as much as receiving it). Read-only
# either way: nothing may change a body once it is published.
Body: TypeAlias = bytes | bytearray


class Message:
    """One published message. `properties` is the raw flag word + fields; `body` is a
    read-only `Body`."""

    __slots__ = ("_decoded", "body", "exchange", "properties", "routing_key", "timestamp")

    def __init__(self, exchange: str, routing_key: str, properties: bytes, body: Body, timestamp: int = 0) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.timestamp = timestamp  # broker receive time, ms since the epoch
        self._decoded: dict[str, Any] | None = None

    @property
    def props(self) -> dict[str, Any]:
        """All properties, decoded once."""
        decoded = self._decoded
        if decoded is None:
            decoded = self._decoded = decode_properties(self.properties)
        return decoded

    @property
    def headers(self) -> dict[str, Any]:
        """The headers table, or an empty dict; cheap when the flag says there are none."""
        if len(self.properties) < 2 or not self.properties[0] & 0x20:
            return {}
        return self.props.get("headers") or {}

    @property
    def persistent(self) -> bool:
        """delivery_mode == 2. Reads the flag word first so most messages decode nothing."""
        if len(self.properties) < 2 or not self.properties[0] & 0x10:
            return False
        return self.props.get("delivery_mode") == 2

    def replace_properties(self, props: dict[str, Any]) -> None:
        """Swap in new properties (e.g. with BCC removed or x-death added)."""
        self.properties = encode_properties(props)
        self._decoded = props
