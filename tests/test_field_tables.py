"""Field tables as the broker decodes and encodes them (lavin.api.field_table).

The decoder gives pamqp's Python types, refuses what does not fit the bytes around it,
takes time in proportion to a table's size and refuses nesting past MAX_DEPTH instead of
running out of stack. The encoder takes back everything the decoder gives. The broker's
side of the same inputs is in test_bad_input.py.
"""

from __future__ import annotations

import datetime
import decimal
import random
import struct

import pytest
from lavin.api.field_table import MAX_DEPTH, decode_table, encode_table
from lavin.api.message import decode_properties, encode_properties
from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

U32 = struct.Struct(">I")


def table(*fields: bytes) -> bytes:
    """A table from fields already encoded: key (shortstr), type octet, value."""
    body = b"".join(fields)
    return U32.pack(len(body)) + body


def field(key: bytes, kind: bytes, value: bytes) -> bytes:
    return bytes((len(key),)) + key + kind + value


def nested(depth: int, kind: bytes = b"F") -> bytes:
    """`depth` levels: a table whose one value is a table (F) or an array (A) of one ..."""
    inner = U32.pack(0)  # the innermost, empty: a table or an array, both a zero size
    for _ in range(depth - 2):
        inner = table(field(b"n", b"F", inner)) if kind == b"F" else U32.pack(len(inner) + 1) + b"A" + inner
    return table(field(b"n", kind, inner))


EVERY_TYPE = table(
    field(b"bool", b"t", b"\x01"),
    field(b"int8", b"b", b"\xff"),
    field(b"uint8", b"B", b"\xff"),
    field(b"int16", b"s", b"\xff\xfe"),
    field(b"uint16", b"u", b"\xff\xfe"),
    field(b"int32", b"I", b"\xff\xff\xff\xfe"),
    field(b"uint32", b"i", b"\xff\xff\xff\xfe"),
    field(b"int64", b"l", b"\xff" * 7 + b"\xfe"),
    field(b"int64-L", b"L", b"\x00" * 7 + b"\x07"),
    field(b"float", b"f", struct.pack(">f", 1.5)),
    field(b"double", b"d", struct.pack(">d", 1e300)),
    field(b"decimal", b"D", b"\x02" + struct.pack(">i", -12345)),
    field(b"text", b"S", U32.pack(9) + "naïve✓".encode()),
    field(b"not-utf8", b"S", U32.pack(2) + b"\xff\xfe"),
    field(b"seconds", b"T", struct.pack(">Q", 1_700_000_000)),
    field(b"milliseconds", b"T", struct.pack(">Q", 1_700_000_000_250)),
    field(b"table", b"F", table(field(b"inner", b"V", b""))),
    field(b"array", b"A", U32.pack(7) + b"b\x01S" + U32.pack(0)),
    field(b"bytes", b"x", U32.pack(3) + b"\x00\x01\x02"),
    field(b"void", b"V", b""),
    field(b"nul", b"\x00", b""),
)
EXPECTED = {
    "bool": True,
    "int8": -1,
    "uint8": 255,
    "int16": -2,
    "uint16": 65534,
    "int32": -2,
    "uint32": 2**32 - 2,
    "int64": -2,
    "int64-L": 7,
    "float": 1.5,
    "double": 1e300,
    "decimal": decimal.Decimal("-123.45"),
    "text": "naïve✓",
    "not-utf8": b"\xff\xfe",
    "seconds": datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.UTC),
    "milliseconds": datetime.datetime.fromtimestamp(1_700_000_000.25, tz=datetime.UTC),
    "table": {"inner": None},
    "array": [1, ""],
    "bytes": bytearray(b"\x00\x01\x02"),
    "void": None,
    "nul": None,
}


def same(left: object, right: object) -> bool:
    """Equal values of the same types, all the way down."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict) and isinstance(right, dict):
        return list(left) == list(right) and all(same(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def test_every_field_type_decodes_to_pamqps_python_type() -> None:
    decoded, end = decode_table(EVERY_TYPE)
    assert same(decoded, EXPECTED), decoded
    assert end == len(EVERY_TYPE)
    assert same(decoded, pamqp_decode.field_table(EVERY_TYPE)[1])


def test_decoding_starts_at_an_offset_and_says_where_the_table_ends() -> None:
    data = b"junk" + EVERY_TYPE + b"tail"
    decoded, end = decode_table(data, 4)
    assert same(decoded, EXPECTED)
    assert data[end:] == b"tail"


def test_random_tables_decode_as_pamqp_decodes_them() -> None:
    rng = random.Random(7)
    kinds = [b"t\x00", b"b\x80", b"u\x00\x01", b"I\x00\x00\x00\x05", b"l" + bytes(8), b"d" + bytes(8), b"V"]
    kinds += [b"S" + U32.pack(3) + b"abc", b"S" + U32.pack(1) + b"\xc3", b"T" + bytes(8), b"D\x01" + bytes(4)]
    for _ in range(300):
        fields = [field(b"k%d" % i, *_split(rng.choice(kinds))) for i in range(rng.randrange(8))]
        fields.append(field(b"sub", b"F", table(*fields)))
        fields.append(field(b"list", b"A", U32.pack(sum(map(len, kinds))) + b"".join(kinds)))
        data = table(*fields)
        assert same(decode_table(data)[0], pamqp_decode.field_table(data)[1])


def _split(value: bytes) -> tuple[bytes, bytes]:
    return value[:1], value[1:]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(table(field(b"k", b"S", U32.pack(10) + b"short")), id="string-past-the-table"),
        pytest.param(U32.pack(100) + field(b"k", b"t", b"\x01"), id="table-past-the-data"),
        pytest.param(table(field(b"k", b"I", b"\x00\x01")), id="truncated-integer"),
        pytest.param(table(b"\x05key"), id="truncated-key"),
        pytest.param(table(field(b"k", b"Z", b"")), id="unknown-type"),
        pytest.param(table(field(b"\xff", b"V", b"")), id="key-not-utf8"),
        pytest.param(table(field(b"k", b"T", b"\xff" * 8)), id="timestamp-out-of-range"),
        pytest.param(table(field(b"k", b"A", U32.pack(9) + b"t\x01")), id="array-past-the-table"),
        pytest.param(U32.pack(3)[:3], id="truncated-size"),
    ],
)
def test_malformed_tables_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_table(data)


@pytest.mark.parametrize("kind", [b"F", b"A"])
def test_nesting_is_bounded(kind: bytes) -> None:
    assert decode_table(nested(MAX_DEPTH, kind))[1] == len(nested(MAX_DEPTH, kind))
    for depth in (MAX_DEPTH + 1, 500, 20_000):
        with pytest.raises(ValueError, match=f"nested more than {MAX_DEPTH} deep"):
            decode_table(nested(depth, kind))


@pytest.mark.timeout(60)
def test_a_table_of_a_hundred_thousand_keys_and_three_million_values_decodes() -> None:
    """Each field is read where it lies: a decoder that copies the rest of the table for
    every field (pamqp's) would take hours here, this one about a second."""
    keys, values = 100_000, 3_000_000
    entries = b"".join(field(b"k%06d" % i, b"B", bytes((i % 256,))) for i in range(keys))
    data = table(entries, field(b"array", b"A", U32.pack(2 * values) + b"B\x07" * values))
    decoded, end = decode_table(data)
    assert end == len(data)
    assert len(decoded) == keys + 1
    assert all(decoded[f"k{i:06d}"] == i % 256 for i in range(keys))
    assert decoded["array"] == [7] * values


# A milliseconds timestamp comes back in seconds, as from pamqp's encoder.
ROUND_TRIP = {key: value for key, value in EXPECTED.items() if key != "milliseconds"}


def test_what_the_decoder_gives_encodes_back() -> None:
    """bytes (a long string that is not UTF-8) and doubles beyond a float's range encode
    back as they came; pamqp's encoder refuses the first and overflows on the second."""
    assert same(decode_table(encode_table(ROUND_TRIP))[0], ROUND_TRIP)
    wide = {"raw": b"\xff\xfe", "wide": 1e300, "list": [b"\x80", {"deep": 2**40}], "when": EXPECTED["seconds"]}
    assert same(decode_table(encode_table(wide))[0], wide)


def test_encoding_keeps_the_order_of_the_keys() -> None:
    headers = {"b": 1, "a": 2, "c": {"z": 1, "y": 2}}
    assert list(decode_table(encode_table(headers))[0]) == ["b", "a", "c"]
    assert encode_table({"k": "v"}) == pamqp_encode.field_table({"k": "v"})


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(object(), id="unknown-type"),
        pytest.param(2**64, id="integer-beyond-64-bits"),
        pytest.param({"k" * 256: 1}, id="key-longer-than-255-bytes"),
        pytest.param(decimal.Decimal("NaN"), id="decimal-nan"),
    ],
)
def test_values_no_table_can_hold_raise_value_error(value: object) -> None:
    with pytest.raises(ValueError):
        encode_table({"k": value})


def test_properties_with_headers_of_every_type_round_trip() -> None:
    props = {"content_type": "a", "headers": ROUND_TRIP, "delivery_mode": 2, "reply_to": "r"}
    assert same(decode_properties(encode_properties(props)), props)
