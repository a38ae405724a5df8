"""Malformed frames after a good handshake: the broker closes that connection with the
reply RabbitMQ 3.x gives, and every other connection carries on.

Sources for the expected replies (rabbitmq-server):
- rabbit_reader.erl `handle_input/3`: bad frame end and oversized frames are fatal 501
  FRAME_ERROR "type T, ... octets = ...: {invalid_frame_end_marker,E}" /
  "{frame_too_large,Size,FrameMax-8}"; `handle_frame/4`: unknown frame types are 501
  "...: unknown_frame", heartbeats on a channel 505 UNEXPECTED_FRAME "type 8, ...".
- rabbit_misc.erl `frame_error/2` (called by the generated decoder): method arguments
  that do not decode are 501 "cannot decode <<...>>", naming the method.
- rabbit_command_assembler.erl: content frames out of order are 505 "expected method
  frame, got non method frame instead" / "expected content header for class 60, got non
  content header frame instead"; a body frame past body_size is 501 "content body frame
  exceeds remaining content size".
- rabbit_channel.erl: a method on a channel that was never opened is 504 CHANNEL_ERROR
  "expected 'channel.open'", a connection error.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pytest
from broker_process import BrokerProcess
from lavin.client.wire import (
    FRAME_BODY,
    FRAME_METHOD,
    Connection,
    connect,
    content_body_frame,
    content_frames,
    content_header_frame,
    heartbeat_frame,
    method_frame,
    raw_frame,
)
from pamqp import commands
from pamqp.base import Frame
from pika.adapters.blocking_connection import BlockingChannel

CHANNEL = 1
FRAME_MAX = 4096
OVERSIZED = FRAME_MAX + 1000
QUEUE = "frame-errors"
QUEUE_DECLARE = (50, 10)
BASIC_PUBLISH = (60, 40)


def method_payload(method: Frame) -> bytes:
    """The payload of a method frame (method id, arguments), to cut short or wrap badly."""
    return method_frame(0, method)[7:-1]


PUBLISH = method_frame(CHANNEL, commands.Basic.Publish(exchange="", routing_key=QUEUE))
QOS = method_payload(commands.Basic.Qos(prefetch_count=1))
DECLARE = method_payload(commands.Queue.Declare(queue=QUEUE))
DECLARE_WITH_ARGUMENTS = method_payload(
    commands.Queue.Declare(queue=QUEUE, arguments={"x-max-length": 10, "x-note": "truncated"})
)
OUT_OF_ORDER = "UNEXPECTED_FRAME - expected method frame, got non method frame instead"


@dataclass(frozen=True)
class BadInput:
    """Bytes sent on a healthy connection (channel 1 open) and the close they cause."""

    data: bytes
    reply_code: int
    text_start: str
    text_contains: str = ""
    failing_method: tuple[int, int] | None = None


BAD_INPUTS = {
    "bad-frame-end": BadInput(
        raw_frame(FRAME_METHOD, CHANNEL, QOS, frame_end=0x00),
        501,
        "FRAME_ERROR - type 1, ",
        "{invalid_frame_end_marker,0}",
    ),
    "frame-larger-than-frame-max": BadInput(
        PUBLISH + content_header_frame(CHANNEL, OVERSIZED) + raw_frame(FRAME_BODY, CHANNEL, b"x" * OVERSIZED),
        501,
        "FRAME_ERROR - type 3, ",
        f"{{frame_too_large,{OVERSIZED},{FRAME_MAX - 8}}}",
    ),
    "unknown-frame-type": BadInput(raw_frame(9, CHANNEL, b"hello"), 501, "FRAME_ERROR - type 9, ", "unknown_frame"),
    "truncated-method-arguments": BadInput(
        raw_frame(FRAME_METHOD, CHANNEL, DECLARE[:-3]),
        501,
        "FRAME_ERROR - cannot decode ",
        failing_method=QUEUE_DECLARE,
    ),
    "truncated-arguments-table": BadInput(
        raw_frame(FRAME_METHOD, CHANNEL, DECLARE_WITH_ARGUMENTS[:-6]),
        501,
        "FRAME_ERROR - cannot decode ",
        failing_method=QUEUE_DECLARE,
    ),
    "truncated-publish": BadInput(
        raw_frame(FRAME_METHOD, CHANNEL, method_payload(commands.Basic.Publish(exchange="", routing_key=QUEUE))[:-2]),
        501,
        "FRAME_ERROR - cannot decode ",
        failing_method=BASIC_PUBLISH,
    ),
    "body-longer-than-body-size": BadInput(
        PUBLISH + content_header_frame(CHANNEL, 5) + content_body_frame(CHANNEL, b"0123456789"),
        501,
        "FRAME_ERROR - content body frame exceeds remaining content size",
        failing_method=BASIC_PUBLISH,
    ),
    "body-without-publish": BadInput(content_body_frame(CHANNEL, b"orphan"), 505, OUT_OF_ORDER),
    "header-without-publish": BadInput(content_header_frame(CHANNEL, 6), 505, OUT_OF_ORDER),
    "method-instead-of-content-header": BadInput(
        PUBLISH + method_frame(CHANNEL, commands.Basic.Qos(prefetch_count=1)),
        505,
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
        failing_method=BASIC_PUBLISH,
    ),
    "heartbeat-on-a-channel": BadInput(heartbeat_frame(CHANNEL), 505, "UNEXPECTED_FRAME - type 8, "),
    "method-on-unopened-channel": BadInput(
        method_frame(2, commands.Queue.Declare(queue=QUEUE)),
        504,
        "CHANNEL_ERROR - expected 'channel.open'",
        failing_method=QUEUE_DECLARE,
    ),
}


@pytest.fixture
def bystander(broker: BrokerProcess) -> Iterator[BlockingChannel]:
    """A pika channel opened before the bad connection, which must not notice it."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def assert_still_serves(channel: BlockingChannel) -> None:
    queue = channel.queue_declare(queue="", exclusive=True).method.queue
    channel.basic_publish(exchange="", routing_key=queue, body=b"still here")
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert method is not None, "a message published by the bystander was not there to get"
    assert body == b"still here"


@pytest.mark.parametrize("bad", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_malformed_input_closes_only_its_connection(
    broker: BrokerProcess, bystander: BlockingChannel, bad: BadInput
) -> None:
    with connect(broker.url, frame_max=FRAME_MAX, channels=(CHANNEL,)) as conn:
        conn.send_raw(bad.data)
        close = conn.expect_connection_close()

    assert close.reply_code == bad.reply_code, close.reply_text
    assert close.reply_text.startswith(bad.text_start), close.reply_text
    assert bad.text_contains in close.reply_text
    if bad.failing_method is not None:
        assert (close.class_id, close.method_id) == bad.failing_method
    assert_still_serves(bystander)


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param((60, 999), id="unknown-method"),
        pytest.param((999, 10), id="unknown-class"),
    ],
)
def test_unknown_method_ends_the_connection(
    broker: BrokerProcess, bystander: BlockingChannel, ids: tuple[int, int]
) -> None:
    # RabbitMQ 3.x has no reply for this: rabbit_framing's lookup_method_name/1 exits,
    # the reader process dies and the socket closes without connection.close. A close
    # naming the problem (540 NOT_IMPLEMENTED or 503 COMMAND_INVALID) is accepted too.
    with connect(broker.url, channels=(CHANNEL,)) as conn:
        conn.send_raw(raw_frame(FRAME_METHOD, CHANNEL, struct.pack(">HH", *ids)))
        frames = conn.frames_until_eof()

    codes = [f.frame.reply_code for f in frames if isinstance(f.frame, commands.Connection.Close)]
    assert set(codes) <= {503, 540}, codes
    assert_still_serves(bystander)


# A body frame that a read ends in the middle of is received straight into the message's
# body (Connection._fill_sink): pieces sent apart, so that the broker reads them apart.
LARGE_FRAME_MAX = 131072


def publish_in_pieces(conn: Connection, body: bytes, pieces: list[bytes]) -> None:
    conn.send_raw(PUBLISH + content_header_frame(CHANNEL, len(body)))
    for piece in pieces:
        conn.send_raw(piece)
        time.sleep(0.02)


def cut(data: bytes, *positions: int) -> list[bytes]:
    bounds = [0, *positions, len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def test_large_body_frames_read_in_pieces_arrive_whole(broker: BrokerProcess, bystander: BlockingChannel) -> None:
    bystander.queue_declare(QUEUE)
    bystander.queue_purge(QUEUE)
    body = bytes(range(256)) * 1000  # two frames: 131064 and 124936 bytes
    frames = b"".join(content_frames(CHANNEL, body, None, LARGE_FRAME_MAX)[1:])  # the body frames
    first_end = 7 + LARGE_FRAME_MAX - 8  # the end octet of the first body frame
    # Cut inside the first payload, just before and just after its end octet, inside the
    # second frame's header, and one octet at a time around the second frame's end.
    second_end = first_end + 1 + 7 + (len(body) - (LARGE_FRAME_MAX - 8))
    pieces = cut(frames, 5000, first_end, first_end + 1, first_end + 4, second_end - 1, second_end)
    with connect(broker.url, frame_max=LARGE_FRAME_MAX, channels=(CHANNEL,)) as conn:
        publish_in_pieces(conn, body, pieces)
        conn.send_raw(PUBLISH + content_header_frame(CHANNEL, 5) + content_body_frame(CHANNEL, b"after"))
        for _ in range(50):
            if bystander.queue_declare(QUEUE, passive=True).method.message_count == 2:
                break
            time.sleep(0.1)
    received = [bystander.basic_get(QUEUE, auto_ack=True)[2] for _ in range(2)]
    assert received[0] == body, "the body arrived changed"
    assert received[1] == b"after"


def test_a_bad_end_octet_after_a_body_frame_received_in_place(
    broker: BrokerProcess, bystander: BlockingChannel
) -> None:
    bystander.queue_declare(QUEUE)
    bystander.queue_purge(QUEUE)
    body = b"b" * 20000
    frame = raw_frame(FRAME_BODY, CHANNEL, body, frame_end=0x07)
    with connect(broker.url, frame_max=LARGE_FRAME_MAX, channels=(CHANNEL,)) as conn:
        publish_in_pieces(conn, body, cut(frame, 8000))
        close = conn.expect_connection_close()
    assert close.reply_code == 501, close.reply_text
    assert close.reply_text.startswith("FRAME_ERROR - type 3, "), close.reply_text
    assert "{invalid_frame_end_marker,7}" in close.reply_text
    assert bystander.queue_declare(QUEUE, passive=True).method.message_count == 0, "a bad frame was published"
    assert_still_serves(bystander)
