"""DeliveryFrames (a consumer's basic.deliver encoder that keeps the head of the last shape)
gives the bytes of codec.deliver_frames, whatever changes from one delivery to the next."""

from __future__ import annotations

from typing import NamedTuple

from lavin.amqp.codec import DeliveryFrames, deliver_frames, shortstr
from lavin.api.message import Message, encode_properties

FRAME_MAX = 4096


class Shape(NamedTuple):
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


CHOICES: dict[str, list[str] | list[bytes]] = {
    "exchange": ["", "amq.topic", "".join(["amq.", "topic"])],  # the last two equal, as other objects
    "routing_key": ["a", "b.c", "d"],
    "properties": [b"\x00\x00", encode_properties({"content_type": "text/plain", "priority": 3})],
    "body": [b"x", b"yy", b"", b"z" * (FRAME_MAX - 8), b"m" * FRAME_MAX, b"w" * 2],
}


def shapes() -> list[Shape]:
    """From a first shape, one field changed at a time through its choices, each shape twice."""
    shape = Shape("", "a", b"\x00\x00", b"x")
    result = []
    for field, values in CHOICES.items():
        for value in [*values[1:], values[0]]:
            shape = shape._replace(**{field: value})
            result += [shape, shape]
    return result


def test_each_delivery_is_encoded_as_deliver_frames_encodes_it() -> None:
    tag = shortstr("ctag-7")
    frames = DeliveryFrames(3, tag)
    for number, shape in enumerate(shapes(), start=1):
        message = Message(shape.exchange, shape.routing_key, shape.properties, shape.body, 1)
        redelivered = number % 3 == 0
        expected = deliver_frames(3, tag, number, redelivered, *shape, FRAME_MAX)
        assert frames.encode(number, redelivered, message, FRAME_MAX) == expected, shape
