"""Connection-level behaviour that clients notice, against RabbitMQ 3.10 as the oracle.

Sources (rabbitmq-server 3.10):
- rabbit_reader.erl `handle_method0/2`: connection.update-secret is answered with
  update-secret-ok; after the client's connection.close the reader sends close-ok and
  waits for the client to close the socket (`close_connection/1`, then `terminate_connection`
  after a timeout), ignoring frames in the meantime.
- rabbit_reader.erl `handle_input/3`: a frame is too large when its payload exceeds
  frame_max - 8 + ?FRAME_SIZE_FUDGE (8), i.e. frame_max; the error names frame_max - 8.
- rabbit_framing_amqp_0_9_1.erl: the reserved fields the broker sends are empty
  (channel.open-ok's long string, connection.open-ok's and basic.get-empty's short strings).
- rabbit_heartbeat.erl: the sender checks every half interval and sends when nothing went out.
- rabbit_channel.erl `handle_exception/2`: channel errors are logged with the connection.
"""

from __future__ import annotations

import time
import uuid
from itertools import pairwise

import pika
import pytest
from broker_process import BrokerProcess
from lavin.client.wire import (
    CHANNEL,
    FRAME_HEAD,
    FRAME_HEARTBEAT,
    PROTOCOL_HEADER,
    Connection,
    connect,
    content_body_frame,
    content_header_frame,
    encode_publish,
    heartbeat_frame,
    method_frame,
)
from pamqp import commands, heartbeat

FRAME_MAX = 4096


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def next_raw_frame(conn: Connection) -> bytes:
    """The next frame other than a heartbeat, exactly as it came off the wire."""
    while True:
        while len(conn.buffer) < 7 or len(conn.buffer) < 8 + FRAME_HEAD.unpack_from(conn.buffer)[2]:
            data = conn.sock.recv(65536)
            assert data, "the broker closed the socket"
            conn.buffer += data
        size = 8 + FRAME_HEAD.unpack_from(conn.buffer)[2]
        frame = bytes(conn.buffer[:size])
        del conn.buffer[:size]
        if frame[0] != FRAME_HEARTBEAT:
            return frame


def declare(conn: Connection, queue: str) -> None:
    conn.call(commands.Queue.Declare(queue=queue, auto_delete=True), commands.Queue.DeclareOk, CHANNEL)


# ---- connection.update-secret ------------------------------------------------------------


def test_update_secret_is_answered_with_update_secret_ok(broker: BrokerProcess) -> None:
    with connect(broker.url) as conn:
        conn.call(
            commands.Connection.UpdateSecret(new_secret="guest", reason="rotated"), commands.Connection.UpdateSecretOk
        )
        queue = unique("after-update-secret")
        declare(conn, queue)  # the connection and its channel carry on


def test_update_secret_through_pika(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        connection.update_secret("guest", "token refreshed")
        channel = connection.channel()
        channel.queue_declare(queue="", exclusive=True)
    finally:
        connection.close()


# ---- frame size ----------------------------------------------------------------------------


def publish_frames(queue: str, bodies: list[bytes]) -> list[bytes]:
    """basic.publish, content header and one body frame per piece of `bodies`."""
    size = sum(len(body) for body in bodies)
    return [
        method_frame(CHANNEL, commands.Basic.Publish(exchange="", routing_key=queue)),
        content_header_frame(CHANNEL, size),
        *(content_body_frame(CHANNEL, body) for body in bodies),
    ]


@pytest.mark.parametrize("pieces", [1, 3], ids=["one-body-frame", "three-body-frames"])
@pytest.mark.parametrize("together", [True, False], ids=["one-write", "frame-by-frame"])
def test_body_frame_of_frame_max_payload_is_accepted(broker: BrokerProcess, pieces: int, together: bool) -> None:
    # amqpstorm and rabbitpy cut bodies into frame_max-byte payloads, frames of frame_max + 8.
    bodies = [bytes([65 + index]) * FRAME_MAX for index in range(pieces)]
    queue = unique("frame-max-body")
    with connect(broker.url, frame_max=FRAME_MAX) as conn:
        declare(conn, queue)
        frames = publish_frames(queue, bodies)
        if together:
            conn.send_raw(b"".join(frames))
        else:
            for frame in frames:
                conn.send_raw(frame)
        conn.consume(queue, no_ack=True)
        delivery = conn.next_delivery()

    assert delivery.body == b"".join(bodies)


def test_body_frame_over_frame_max_is_a_frame_error(broker: BrokerProcess) -> None:
    queue = unique("frame-max-body")
    with connect(broker.url, frame_max=FRAME_MAX) as conn:
        conn.send_raw(b"".join(publish_frames(queue, [b"x" * (FRAME_MAX + 1)])))
        close = conn.expect_connection_close()

    assert close.reply_code == 501
    assert close.reply_text.startswith("FRAME_ERROR - type 3, "), close.reply_text
    assert close.reply_text.endswith(f"{{frame_too_large,{FRAME_MAX + 1},{FRAME_MAX - 8}}}"), close.reply_text


# ---- reserved fields, byte for byte ------------------------------------------------------


def test_connection_open_ok_has_an_empty_known_hosts(broker: BrokerProcess) -> None:
    with Connection(broker.url) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.start_ok()
        conn.tune_ok(vhost="/")
        frame = next_raw_frame(conn)

    assert frame == bytes.fromhex("01 0000 00000005 000a0029 00 ce")


def test_channel_open_ok_has_an_empty_long_string(broker: BrokerProcess) -> None:
    with connect(broker.url, channels=()) as conn:
        conn.send(commands.Channel.Open(), 7)
        frame = next_raw_frame(conn)

    assert frame == bytes.fromhex("01 0007 00000008 0014000b 00000000 ce")


def test_basic_get_empty_has_an_empty_cluster_id(broker: BrokerProcess) -> None:
    queue = unique("get-empty")
    with connect(broker.url) as conn:
        declare(conn, queue)
        conn.send(commands.Basic.Get(queue=queue, no_ack=True), CHANNEL)
        frame = next_raw_frame(conn)

    assert frame == bytes.fromhex("01 0001 00000005 003c0048 00 ce")


def test_pika_opens_channels_with_the_empty_reserved_field(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channels = [connection.channel() for _ in range(3)]
        assert all(channel.is_open for channel in channels)
    finally:
        connection.close()


# ---- connection.close ----------------------------------------------------------------------


def test_frames_in_flight_after_connection_close_do_not_reset_the_socket(broker: BrokerProcess) -> None:
    publishes = encode_publish(CHANNEL, "", unique("nowhere"), b"x" * 1000).data * 300
    close = method_frame(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    conn = connect(broker.url)
    try:
        conn.send_raw(publishes + close + publishes)
        conn.expect(commands.Connection.CloseOk, timeout=10)
        # The broker waits for us to close the socket.
        conn.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            conn.sock.recv(1)
    finally:
        conn.sock.close()


def test_broker_closes_the_socket_after_close_ok_when_the_client_does_not(broker: BrokerProcess) -> None:
    with connect(broker.url) as conn:
        conn.send(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        conn.expect(commands.Connection.CloseOk)
        since = time.monotonic()
        assert conn.read_until_eof(timeout=10) == b""
        waited = time.monotonic() - since

    assert 2.0 <= waited <= 6.0, f"the broker closed after {waited:.1f} s"  # CLOSE_TIMEOUT is 3 s


def test_exclusive_queue_goes_at_close_ok_not_when_the_socket_closes(broker: BrokerProcess) -> None:
    queue = unique("exclusive-at-close")
    conn = connect(broker.url)
    try:
        conn.call(commands.Queue.Declare(queue=queue, exclusive=True), commands.Queue.DeclareOk, CHANNEL)
        conn.send(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        conn.expect(commands.Connection.CloseOk)
        # The socket is still open; the queue must already be free for another connection.
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            connection.channel().queue_declare(queue=queue, exclusive=True)
        finally:
            connection.close()
    finally:
        conn.sock.close()


# ---- heartbeats ----------------------------------------------------------------------------


def test_heartbeats_are_sent_every_half_interval(broker: BrokerProcess) -> None:
    arrivals: list[float] = []
    with connect(broker.url, heartbeat=1) as conn:
        deadline = time.monotonic() + 2.5
        while (left := deadline - time.monotonic()) > 0:
            conn.send_raw(heartbeat_frame())  # we stay alive; the broker's side is silent
            try:
                got = conn.recv_frame(timeout=min(left, 0.25))
            except TimeoutError:
                continue
            assert got is not None, "the broker closed a connection that kept sending heartbeats"
            assert isinstance(got.frame, heartbeat.Heartbeat), got
            arrivals.append(time.monotonic())

    gaps = [round(later - earlier, 2) for earlier, later in pairwise(arrivals)]
    assert len(arrivals) >= 3, f"{len(arrivals)} heartbeats in 2.5 s with heartbeat=1"
    assert all(0.3 <= gap <= 0.7 for gap in gaps), f"seconds between heartbeats: {gaps}"


# ---- logging -------------------------------------------------------------------------------


def test_channel_errors_are_logged_with_code_text_and_connection(broker: BrokerProcess) -> None:
    queue = unique("no-such-queue")
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            channel.queue_declare(queue=queue, passive=True)
    finally:
        connection.close()

    lines = [line for line in broker.output.splitlines() if f"no queue '{queue}'" in line]
    assert lines, "no log line for the channel error"
    assert "INFO" in lines[0], lines[0]
    assert "connection 127.0.0.1:" in lines[0], lines[0]
    assert "404 NOT_FOUND" in lines[0], lines[0]
