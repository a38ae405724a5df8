"""AMQP field tables and arrays (headers, declare arguments, client properties): decoded in
one pass over the bytes they arrive in, and encoded back.

The decoder reads at an offset into the caller's bytes and copies only the values, so a
table costs time in proportion to its size (pamqp's decoder copies the rest of the buffer
for every field: a 120 KB headers table took seconds). It gives the Python types pamqp
gives, so code that reads a table sees one set of types whichever decoded it:

    t bool | b B s u I i l L int | f d float | D Decimal | S str, or bytes when not UTF-8
    T datetime (UTC; values past 2**32 taken as milliseconds) | F dict | A list
    x bytearray | V and 0x00 None

Input is untrusted: every size is checked against the bytes around it, and tables and
arrays may nest at most MAX_DEPTH deep, so decoding never recurses without bound.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import struct
import time
from collections.abc import Mapping
from typing import Any, Final

# Tables and arrays inside each other, the outermost included. RabbitMQ sets no limit;
# real tables (x-death, client properties) nest three deep at most.
MAX_DEPTH: Final = 100

_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_DECIMAL: Final = struct.Struct(">Bi")  # scale, then a signed mantissa (as pamqp reads it)
_DOUBLE: Final = struct.Struct(">d")
_TEN: Final = decimal.Decimal(10)
_MILLISECONDS_FROM: Final = 0xFFFFFFFF  # larger timestamps are milliseconds, as in pamqp

# Field types by their type octet.
_BOOLEAN: Final = 0x74  # t
_LONGSTR: Final = 0x53  # S
_TABLE: Final = 0x46  # F
_ARRAY: Final = 0x41  # A
_TIMESTAMP: Final = 0x54  # T
_DECIMAL_TYPE: Final = 0x44  # D
_BYTE_ARRAY: Final = 0x78  # x
_VOID: Final = 0x56  # V
_NUL: Final = 0x00  # void too: some clients send it
_NUMBERS: Final[dict[int, struct.Struct]] = {
    0x62: struct.Struct(">b"),  # b
    0x42: struct.Struct(">B"),  # B
    0x73: struct.Struct(">h"),  # s
    0x75: struct.Struct(">H"),  # u
    0x49: struct.Struct(">i"),  # I
    0x69: struct.Struct(">I"),  # i
    0x6C: struct.Struct(">q"),  # l
    0x4C: struct.Struct(">q"),  # L: signed too, as RabbitMQ and pamqp read it
    0x66: struct.Struct(">f"),  # f
    0x64: _DOUBLE,  # d
}
# The smallest type for an integer, as pamqp chooses it.
_INTEGERS: Final[tuple[tuple[int, int, bytes, struct.Struct], ...]] = (
    (-(2**7), 2**7 - 1, b"b", struct.Struct(">b")),
    (-(2**15), 2**15 - 1, b"s", struct.Struct(">h")),
    (0, 2**16 - 1, b"u", struct.Struct(">H")),
    (-(2**31), 2**31 - 1, b"I", struct.Struct(">i")),
    (0, 2**32 - 1, b"i", struct.Struct(">I")),
    (-(2**63), 2**63 - 1, b"l", struct.Struct(">q")),
)


# ---- decoding ----------------------------------------------------------------------------


def decode_table(data: bytes, offset: int = 0) -> tuple[dict[str, Any], int]:
    """The table at `offset` in `data` (a 4-byte size, then its fields) and the offset just
    past it.

    Raises ValueError when the table is malformed, runs past the end of `data` or nests
    deeper than MAX_DEPTH; UnicodeDecodeError (a ValueError) when a key is not UTF-8.
    """
    return _table(data, offset, len(data), 1)


def _end_of(data: bytes, offset: int, limit: int, depth: int) -> int:
    """Where the table or array whose size is at `offset` ends, within `limit`."""
    if depth > MAX_DEPTH:
        raise ValueError(f"field tables and arrays nested more than {MAX_DEPTH} deep")
    if offset + 4 > limit:
        raise ValueError("truncated field table size")
    end: int = offset + 4 + _U32.unpack_from(data, offset)[0]
    if end > limit:
        raise ValueError("field table or array longer than the data it is in")
    return end


def _table(data: bytes, offset: int, limit: int, depth: int) -> tuple[dict[str, Any], int]:
    end = _end_of(data, offset, limit, depth)
    offset += 4
    table: dict[str, Any] = {}
    while offset < end:
        key_end = offset + 1 + data[offset]
        if key_end >= end:  # the key and at least the type octet of its value
            raise ValueError("truncated field table entry")
        key = data[offset + 1 : key_end].decode()
        value, offset = _value(data, key_end, end, depth)
        table[key] = value
    return table, end


def _array(data: bytes, offset: int, limit: int, depth: int) -> tuple[list[Any], int]:
    end = _end_of(data, offset, limit, depth)
    offset += 4
    items: list[Any] = []
    while offset < end:
        value, offset = _value(data, offset, end, depth)
        items.append(value)
    return items, end


def _value(data: bytes, offset: int, limit: int, depth: int) -> tuple[Any, int]:
    """The value whose type octet is at `offset` (below `limit`), and the offset past it."""
    kind = data[offset]
    offset += 1
    number = _NUMBERS.get(kind)
    if number is not None:
        end = offset + number.size
        if end > limit:
            raise ValueError("truncated field value")
        return number.unpack_from(data, offset)[0], end
    if kind == _LONGSTR:
        end = _end_of(data, offset, limit, depth)
        raw = data[offset + 4 : end]
        try:
            return raw.decode(), end
        except UnicodeDecodeError:
            return raw, end  # as pamqp: the bytes, for the caller to judge
    if kind == _TABLE:
        return _table(data, offset, limit, depth + 1)
    if kind == _ARRAY:
        return _array(data, offset, limit, depth + 1)
    if kind == _BOOLEAN:
        if offset >= limit:
            raise ValueError("truncated field value")
        return data[offset] != 0, offset + 1
    if kind in (_VOID, _NUL):
        return None, offset
    if kind == _TIMESTAMP:
        if offset + 8 > limit:
            raise ValueError("truncated field value")
        return _timestamp(_U64.unpack_from(data, offset)[0]), offset + 8
    if kind == _DECIMAL_TYPE:
        if offset + 5 > limit:
            raise ValueError("truncated field value")
        scale, mantissa = _DECIMAL.unpack_from(data, offset)
        return decimal.Decimal(mantissa) * _TEN**-scale, offset + 5
    if kind == _BYTE_ARRAY:
        end = _end_of(data, offset, limit, depth)
        return bytearray(data[offset + 4 : end]), end
    raise ValueError(f"unknown field type {bytes((kind,))!r}")


def _timestamp(value: int) -> datetime.datetime:
    seconds = value / 1000 if value > _MILLISECONDS_FROM else value
    try:
        return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"timestamp {value} out of range") from None


# ---- encoding ----------------------------------------------------------------------------


def encode_table(table: Mapping[str, Any]) -> bytes:
    """`table` as the wire holds it: a 4-byte size, then each key and typed value.

    Takes every type decode_table gives, so that a decoded table encodes back (bytes, a
    long string that is not UTF-8, go back as they came; a float goes as a double), and
    time.struct_time for a timestamp. Raises ValueError for a value of another type, an
    integer beyond 64 bits or a key longer than 255 bytes.
    """
    fields = b"".join([_key(key) + _encoded(value) for key, value in table.items()])
    return _U32.pack(len(fields)) + fields


def _key(key: str) -> bytes:
    data = key.encode("utf-8", "surrogateescape")
    if len(data) > 255:
        raise ValueError(f"field table key longer than 255 bytes: {key[:40]!r}...")
    return bytes((len(data),)) + data


def _encoded(value: object) -> bytes:
    if isinstance(value, str):
        return _long(b"S", value.encode("utf-8", "surrogateescape"))
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        for low, high, kind, layout in _INTEGERS:
            if low <= value <= high:
                return kind + layout.pack(value)
        raise ValueError(f"integer {value} does not fit a field table")
    if isinstance(value, Mapping):
        return b"F" + encode_table(value)
    if isinstance(value, list):
        items = b"".join([_encoded(item) for item in value])
        return b"A" + _U32.pack(len(items)) + items
    if value is None:
        return b"V"
    if isinstance(value, bytes):
        return _long(b"S", value)
    if isinstance(value, float):
        return b"d" + _DOUBLE.pack(value)
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return b"T" + _U64.pack(int(moment.timestamp()))
    if isinstance(value, time.struct_time):
        return b"T" + _U64.pack(calendar.timegm(value))
    if isinstance(value, decimal.Decimal):
        return b"D" + _decimal(value)
    if isinstance(value, bytearray):
        return _long(b"x", bytes(value))
    raise ValueError(f"a field table cannot hold {type(value).__name__} {value!r}")


def _long(kind: bytes, data: bytes) -> bytes:
    return kind + _U32.pack(len(data)) + data


def _decimal(value: decimal.Decimal) -> bytes:
    """Scale and mantissa, as pamqp encodes a Decimal."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise ValueError(f"decimal {value} has no field table form")
    scale = max(-exponent, 0)
    mantissa = int(value.scaleb(scale)) if scale else int(value)
    if scale > 255 or not -(2**31) <= mantissa < 2**31:
        raise ValueError(f"decimal {value} does not fit a field table")
    return _DECIMAL.pack(scale, mantissa)
