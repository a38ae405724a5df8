"""Frame encoding for the hot path, by hand; everything else through pamqp. Control
methods are decoded here into pamqp's classes.

Deliveries, content headers, bodies and confirms are spliced from pre-built pieces so
that sending a message costs a few bytes operations, not a pamqp object per frame.
"""

from __future__ import annotations

import struct
from typing import Final

from lavin.api.field_table import decode_table
from lavin.api.message import Body, Message
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.base import Frame as PamqpMethod

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = b"\xce"
FRAME_END_BYTE: Final = 0xCE
FRAME_OVERHEAD: Final = 8  # 7-byte header + frame-end octet

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

FRAME_HEAD: Final = struct.Struct(">BHI")
METHOD_ID: Final = struct.Struct(">I")
U16: Final = struct.Struct(">H")
U32: Final = struct.Struct(">I")
_DECLARE_OK_COUNTS: Final = struct.Struct(">II")
U64: Final = struct.Struct(">Q")
HEADER_HEAD: Final = struct.Struct(">BHIHHQ")  # frame head + class, weight, body size
DELIVER_TAIL: Final = struct.Struct(">QB")
ACK_FRAME: Final = struct.Struct(">BHIIQBB")  # full basic.ack / basic.nack frame

BASIC_CLASS: Final = 60
BASIC_PUBLISH: Final = 60 << 16 | 40
BASIC_PUBLISH_METHOD: Final = 40  # the method id alone, as its payload's fourth octet holds it
BASIC_ACK: Final = 60 << 16 | 80
BASIC_DELIVER_ID: Final = b"\x00\x3c\x00\x3c"
BASIC_GET_OK_ID: Final = b"\x00\x3c\x00\x47"
BASIC_RETURN_ID: Final = b"\x00\x3c\x00\x32"
QUEUE_DECLARE_OK_ID: Final = b"\x00\x32\x00\x0b"
BASIC_ACK_ID: Final = 60 << 16 | 80
BASIC_NACK_ID: Final = 60 << 16 | 120


# channel.open-ok with RabbitMQ's reserved field, an empty long string: pamqp insists on "0".
CHANNEL_OPEN_OK: Final = b"\x00\x14\x00\x0b\x00\x00\x00\x00"


def encoded_method_frame(channel: int, payload: bytes) -> bytes:
    """A method frame around a payload (method id and arguments) encoded by hand."""
    return b"".join((FRAME_HEAD.pack(FRAME_METHOD, channel, len(payload)), payload, FRAME_END))


def channel_open_ok_frame(channel: int) -> bytes:
    return encoded_method_frame(channel, CHANNEL_OPEN_OK)


def declare_ok_frame(channel: int, queue: str, message_count: int, consumer_count: int) -> bytes:
    """queue.declare-ok encoded here: pamqp would refuse names RabbitMQ allows (any UTF-8)."""
    counts = _DECLARE_OK_COUNTS.pack(message_count, consumer_count)
    return encoded_method_frame(channel, QUEUE_DECLARE_OK_ID + shortstr(queue) + counts)


def method_frame(channel: int, method: PamqpMethod) -> bytes:
    """Encode a method frame through pamqp (control path only)."""
    return pamqp_frame.marshal(method, channel)


_shortstr_cache: Final[dict[str, bytes]] = {}
_SHORTSTR_CACHE_MAX: Final = 4096


def shortstr(value: str) -> bytes:
    """Length-prefixed UTF-8; exchange names and routing keys repeat, so they are cached."""
    encoded = _shortstr_cache.get(value)
    if encoded is not None:
        return encoded
    data = value.encode()
    if len(data) > 255:
        raise ValueError("short string longer than 255 bytes")
    encoded = bytes((len(data),)) + data
    if len(_shortstr_cache) >= _SHORTSTR_CACHE_MAX:
        _shortstr_cache.clear()
    _shortstr_cache[value] = encoded
    return encoded


def frame_end(buffer: bytearray) -> int:
    """Where the frame at the start of `buffer` ends (its size from the header, plus the
    header and end octet); 0 while the header is incomplete."""
    if len(buffer) < 7:
        return 0
    size: int = FRAME_HEAD.unpack_from(buffer, 0)[2]
    return 8 + size


def content_frames(channel: int, properties: bytes, body: Body, frame_max: int) -> bytes:
    """Content header plus body frames split at frame_max."""
    head = HEADER_HEAD.pack(FRAME_HEADER, channel, 12 + len(properties), BASIC_CLASS, 0, len(body))
    size = len(body)
    chunk = frame_max - FRAME_OVERHEAD
    if size <= chunk:
        if not size:
            return b"".join((head, properties, FRAME_END))
        return b"".join((head, properties, FRAME_END, FRAME_HEAD.pack(FRAME_BODY, channel, size), body, FRAME_END))
    parts: list[bytes | memoryview] = [head, properties, FRAME_END]
    add_body_frames(parts, channel, body, chunk)
    return b"".join(parts)


def add_body_frames(parts: list[bytes | memoryview], channel: int, body: Body, chunk: int) -> None:
    """The body's frames, `chunk` bytes of body each, as slices of it: nothing copied."""
    view = memoryview(body)
    for start in range(0, len(body), chunk):
        piece = view[start : start + chunk]
        parts += (FRAME_HEAD.pack(FRAME_BODY, channel, len(piece)), piece, FRAME_END)


def deliver_parts(
    channel: int, consumer_tag: bytes, delivery_tag: int, redelivered: bool, message: Message, frame_max: int
) -> list[bytes | memoryview]:
    """basic.deliver of a body that takes several frames, as pieces for one gathered write
    (the body is sliced, not copied); deliver_frames for the others."""
    exchange_bytes = shortstr(message.exchange)
    routing_key_bytes = shortstr(message.routing_key)
    properties = message.properties
    body = message.body
    method_size = 13 + len(consumer_tag) + len(exchange_bytes) + len(routing_key_bytes)
    parts: list[bytes | memoryview] = [
        FRAME_HEAD.pack(FRAME_METHOD, channel, method_size),
        BASIC_DELIVER_ID,
        consumer_tag,
        DELIVER_TAIL.pack(delivery_tag, redelivered),
        exchange_bytes,
        routing_key_bytes,
        FRAME_END,
        HEADER_HEAD.pack(FRAME_HEADER, channel, 12 + len(properties), BASIC_CLASS, 0, len(body)),
        properties,
        FRAME_END,
    ]
    add_body_frames(parts, channel, body, frame_max - FRAME_OVERHEAD)
    return parts


def deliver_frames(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    properties: bytes,
    body: Body,
    frame_max: int,
) -> bytes:
    """basic.deliver plus its content, as one bytes; consumer_tag is the encoded shortstr.
    A body of several frames: deliver_parts, which does not copy it."""
    exchange_bytes = shortstr(exchange)
    routing_key_bytes = shortstr(routing_key)
    size = len(body)
    method_size = 13 + len(consumer_tag) + len(exchange_bytes) + len(routing_key_bytes)
    if size and size <= frame_max - FRAME_OVERHEAD:
        # The common case: everything but the body in one pack, with a layout per shape.
        key = (len(consumer_tag), len(exchange_bytes), len(routing_key_bytes), len(properties))
        layout = _deliver_layouts.get(key) or _deliver_layout(key)
        head = layout.pack(
            FRAME_METHOD, channel, method_size, BASIC_DELIVER_ID, consumer_tag, delivery_tag, redelivered,
            exchange_bytes, routing_key_bytes, FRAME_END_BYTE,
            FRAME_HEADER, channel, 12 + len(properties), BASIC_CLASS, 0, size, properties, FRAME_END_BYTE,
            FRAME_BODY, channel, size,
        )  # fmt: skip
        return b"".join((head, body, FRAME_END))
    message = Message(exchange, routing_key, properties, body, 0)
    return b"".join(deliver_parts(channel, consumer_tag, delivery_tag, redelivered, message, frame_max))


class DeliveryFrames:
    """The basic.deliver frames of one consumer. Deliveries in a row mostly differ only in
    their delivery tag (and body): the head of the last shape (exchange, routing key,
    properties, body size) is kept as the bytes before and after the tag, so that a delivery
    packs the tag alone instead of the whole head (a 21-field pack took as long as all the
    rest of a delivery)."""

    __slots__ = ("_after", "_before", "_exchange", "_properties", "_routing_key", "_size", "channel", "consumer_tag")

    def __init__(self, channel: int, consumer_tag: bytes) -> None:
        self.channel = channel
        self.consumer_tag = consumer_tag  # the encoded shortstr
        self._exchange = self._routing_key = ""
        self._properties = self._before = self._after = b""
        self._size = -1

    def encode(self, delivery_tag: int, redelivered: bool, message: Message, frame_max: int) -> bytes:
        """basic.deliver plus its content, as one bytes; for a body of one frame."""
        body = message.body
        size = len(body)
        if not size or size > frame_max - FRAME_OVERHEAD:
            return deliver_frames(
                self.channel, self.consumer_tag, delivery_tag, redelivered, message.exchange,
                message.routing_key, message.properties, body, frame_max,
            )  # fmt: skip
        if not (
            message.exchange == self._exchange
            and message.routing_key == self._routing_key
            and size == self._size
            and message.properties == self._properties
        ):
            self._take_shape(message, size, frame_max)
        return b"".join((self._before, DELIVER_TAIL.pack(delivery_tag, redelivered), self._after, body, FRAME_END))

    def _take_shape(self, message: Message, size: int, frame_max: int) -> None:
        head = deliver_frames(
            self.channel, self.consumer_tag, 0, False, message.exchange, message.routing_key,
            message.properties, bytes(size), frame_max,
        )[:-size - 1]  # fmt: skip
        tag_at = 11 + len(self.consumer_tag)  # frame head, method id, consumer tag
        self._before = head[:tag_at]
        self._after = head[tag_at + DELIVER_TAIL.size :]
        self._exchange, self._routing_key = message.exchange, message.routing_key
        self._properties, self._size = message.properties, size


# Delivery heads by (consumer tag, exchange, routing key, properties) sizes: consumers reuse a
# handful of shapes; the cap keeps odd traffic from growing the cache without bound.
_deliver_layouts: Final[dict[tuple[int, int, int, int], struct.Struct]] = {}
_DELIVER_LAYOUTS_MAX: Final = 4096


def _deliver_layout(key: tuple[int, int, int, int]) -> struct.Struct:
    if len(_deliver_layouts) >= _DELIVER_LAYOUTS_MAX:
        _deliver_layouts.clear()
    tag, exchange, routing_key, properties = key
    layout = _deliver_layouts[key] = struct.Struct(f">BHI4s{tag}sQB{exchange}s{routing_key}sBBHIHHQ{properties}sBBHI")
    return layout


def get_ok_frame(
    channel: int, delivery_tag: int, redelivered: bool, exchange: str, routing_key: str, message_count: int
) -> bytes:
    tail = b"".join(
        (
            BASIC_GET_OK_ID,
            DELIVER_TAIL.pack(delivery_tag, redelivered),
            shortstr(exchange),
            shortstr(routing_key),
            struct.pack(">I", message_count),
        )
    )
    return encoded_method_frame(channel, tail)


def return_frame(channel: int, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> bytes:
    tail = b"".join(
        (BASIC_RETURN_ID, U16.pack(reply_code), shortstr(reply_text), shortstr(exchange), shortstr(routing_key))
    )
    return encoded_method_frame(channel, tail)


def confirm_frame(channel: int, delivery_tag: int, multiple: bool, ack: bool = True) -> bytes:
    """basic.ack (or basic.nack with requeue=false) from broker to publisher."""
    if ack:
        return ACK_FRAME.pack(FRAME_METHOD, channel, 13, BASIC_ACK_ID, delivery_tag, multiple, FRAME_END_BYTE)
    return ACK_FRAME.pack(FRAME_METHOD, channel, 13, BASIC_NACK_ID, delivery_tag, multiple, FRAME_END_BYTE)


def _arguments(method_class: type[PamqpMethod]) -> tuple[tuple[str, str], ...]:
    """A method's arguments, (attribute, kind) in wire order, as pamqp's class defines them."""
    return tuple((name, method_class.amqp_type(name)) for name in method_class.__slots__)


_ARGUMENTS: Final = {index: _arguments(method_class) for index, method_class in commands.INDEX_MAPPING.items()}
_NUMBERS: Final[dict[str, struct.Struct]] = {
    "octet": struct.Struct(">B"),
    "short": U16,
    "long": U32,
    "longlong": U64,
}


def decode_method(payload: bytes) -> PamqpMethod:
    """Decode a control-path method payload (class, method id, arguments) into pamqp's
    class for it. The arguments are read here in one pass, tables by lavin.api.field_table
    (pamqp's decoder is quadratic in a table's size and recurses without bound), and must
    fill the payload exactly, as RabbitMQ requires.

    Raises KeyError for an unknown method, UnicodeDecodeError for a short string (a name,
    a key) or table key that is not UTF-8, and ValueError for other malformed arguments.
    A long string comes as latin-1 text, whatever its bytes.
    """
    (index,) = METHOD_ID.unpack_from(payload, 0)
    method_class: type[PamqpMethod] = commands.INDEX_MAPPING[index]
    method = object.__new__(method_class)  # every field is set below
    offset = 4
    bits = 0
    bit = 8  # the next bit of `bits`; 8: the next bit argument starts a new octet
    value: object
    try:
        for name, kind in _ARGUMENTS[index]:
            if kind == "bit":
                if bit == 8:
                    bits = payload[offset]
                    offset += 1
                    bit = 0
                value = bool(bits >> bit & 1)
                bit += 1
            else:
                bit = 8
                value, offset = _argument(payload, offset, kind)
            setattr(method, name, value)
    except (IndexError, struct.error):
        raise ValueError("truncated method arguments") from None
    if offset != len(payload):
        raise ValueError("trailing bytes after method arguments")
    return method


def _argument(payload: bytes, offset: int, kind: str) -> tuple[object, int]:
    """The argument of `kind` (any but a bit) at `offset`, and the offset past it."""
    if kind == "shortstr":
        stop = offset + 1 + payload[offset]
        if stop > len(payload):
            raise ValueError("truncated method arguments")
        return payload[offset + 1 : stop].decode(), stop
    if kind == "table":
        return decode_table(payload, offset)
    if kind == "longstr":
        stop = offset + 4 + U32.unpack_from(payload, offset)[0]
        if stop > len(payload):
            raise ValueError("truncated method arguments")
        # Opaque bytes (a login response) in an argument pamqp declares str: latin-1 keeps
        # every byte, and encoding back to latin-1 gives them back.
        return payload[offset + 4 : stop].decode("latin-1"), stop
    number = _NUMBERS[kind]
    return number.unpack_from(payload, offset)[0], offset + number.size
