"""Properties are checked when a message is published: malformed ones close the connection
with 502 SYNTAX_ERROR naming basic.publish, and nothing is stored (so nothing can fail to
decode later, on delivery or requeue)."""

from __future__ import annotations

import struct

import pika
import pytest
from broker_process import BrokerProcess
from helpers import message_count, unique_name
from lavin.api.message import Message, check_properties, encode_properties
from lavin.client.wire import FRAME_HEADER, connect, content_body_frame, method_frame, raw_frame
from pamqp import commands

CHANNEL = 1
BASIC_PUBLISH = (60, 40)
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")

MALFORMED = {
    "trailing-junk": U16.pack(0x1000) + b"\x02" + b"junk",
    "truncated-shortstr": U16.pack(0x8000) + b"\x10abc",
    "missing-delivery-mode": U16.pack(0x1000),
    "unknown-field-type-in-headers": U16.pack(0x2000) + U32.pack(6) + b"\x03keyZ?",
    "headers-longer-than-the-properties": U16.pack(0x2000) + U32.pack(100) + b"\x03keyt\x01",
    "flag-bit-no-field-uses": U16.pack(0x0002),
}


def publish_frames(queue: str, properties: bytes, body: bytes) -> bytes:
    header = struct.pack(">HHQ", 60, 0, len(body)) + properties
    frames = method_frame(CHANNEL, commands.Basic.Publish(exchange="", routing_key=queue))
    frames += raw_frame(FRAME_HEADER, CHANNEL, header)
    return frames + (content_body_frame(CHANNEL, body) if body else b"")


@pytest.mark.parametrize("body", [b"payload", b""], ids=["with-body", "empty-body"])
@pytest.mark.parametrize("properties", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_properties_are_a_syntax_error_and_nothing_is_stored(
    broker: BrokerProcess, properties: bytes, body: bytes
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        queue = unique_name("props")
        channel.queue_declare(queue, durable=True)
        with connect(broker.url, channels=(CHANNEL,)) as raw:
            raw.send_raw(publish_frames(queue, properties, body))
            close = raw.expect_connection_close()
        assert close.reply_code == 502, close.reply_text
        assert close.reply_text.startswith("SYNTAX_ERROR - malformed properties in basic.publish"), close.reply_text
        assert (close.class_id, close.method_id) == BASIC_PUBLISH
        assert message_count(channel, queue) == 0
        channel.queue_delete(queue)
    finally:
        connection.close()


def test_well_formed_properties_of_every_kind_pass() -> None:
    every_field = {
        "content_type": "text/plain",
        "content_encoding": "utf-8",
        "headers": {"a": 1, "nested": {"b": [1, "two"]}, "flag": True},
        "delivery_mode": 2,
        "priority": 5,
        "correlation_id": "c",
        "reply_to": "r",
        "expiration": "1000",
        "message_id": "m",
        "timestamp": 1_700_000_000,
        "type": "t",
        "user_id": "guest",
        "app_id": "app",
        "cluster_id": "",
    }
    for props in ({}, {"delivery_mode": 2}, {"timestamp": 1, "priority": 1}, {"reply_to": "x"}, every_field):
        check_properties(Message("", "q", encode_properties(props), b""))
    for raw in MALFORMED.values():
        with pytest.raises(ValueError):
            check_properties(Message("", "q", raw, b""))
