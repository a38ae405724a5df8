"""Publisher flow control: a publisher is paused only while consumers are waiting behind a
backlog, and never for good — a stuck or full consumer must not stall its publishers."""

from __future__ import annotations

import time
import uuid

from broker_process import BrokerProcess
from lavin.client.wire import (
    Connection,
    connect,
    content_body_frame,
    content_header_frame,
    method_frame,
)
from pamqp import commands

BURST = 30_000  # well past the backlog at which publishers are asked to pause


def publish_burst(conn: Connection, channel: int, queue: str, count: int) -> None:
    one = (
        method_frame(channel, commands.Basic.Publish(exchange="", routing_key=queue))
        + content_header_frame(channel, 4)
        + content_body_frame(channel, b"burst"[:4])
    )
    conn.send_raw(one * count)


def consume_on_channel_1(conn: Connection, queue: str, prefetch: int) -> None:
    """An exclusive queue with a manual-ack consumer on channel 1."""
    conn.call(commands.Queue.Declare(queue=queue, exclusive=True), commands.Queue.DeclareOk, 1)
    conn.qos(prefetch, channel=1)
    conn.consume(queue, channel=1)


def ready_count(conn: Connection, channel: int, queue: str) -> int:
    """A passive declare answered (after any deliveries) proves the broker kept reading
    this connection."""
    declare = commands.Queue.Declare(queue=queue, passive=True)
    return conn.call(declare, commands.Queue.DeclareOk, channel).message_count


def test_a_connection_that_publishes_and_consumes_with_a_full_prefetch_keeps_being_read(
    broker: BrokerProcess,
) -> None:
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    with connect(broker.url, channels=(1, 2)) as conn:
        consume_on_channel_1(conn, queue, prefetch=20)
        publish_burst(conn, 2, queue, BURST)
        assert ready_count(conn, 2, queue) == BURST - 20


def test_a_publisher_paused_behind_a_backlog_is_resumed(broker: BrokerProcess) -> None:
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    with connect(broker.url, channels=(1, 2)) as conn:
        consume_on_channel_1(conn, queue, prefetch=1)
        publish_burst(conn, 2, queue, BURST)  # the consumer holds one, the rest is backlog
        first = conn.expect(commands.Basic.Deliver, channel=1)
        # In one read: the ack lets the consumer take more, then publishes land on a
        # backlog that consumers are waiting behind, so the broker pauses this connection;
        # it must resume it once the consumer is full again.
        conn.send_raw(
            method_frame(1, commands.Basic.Ack(delivery_tag=first.delivery_tag))
            + b"".join(
                method_frame(2, commands.Basic.Publish(exchange="", routing_key=queue))
                + content_header_frame(2, 4)
                + content_body_frame(2, b"more")
                for _ in range(1000)
            )
        )
        # The answer proves every publish was read. The consumer takes its second message in
        # a drain of its own, which a loaded machine may run after that answer: poll for it.
        expected = BURST + 1000 - 2
        deadline = time.monotonic() + 5
        while (count := ready_count(conn, 2, queue)) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count == expected


def test_a_consumer_that_stops_reading_does_not_stall_the_publisher(broker: BrokerProcess) -> None:
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    with connect(broker.url, channels=(1,)) as publisher, connect(broker.url, channels=(1,)) as consumer:
        publisher.send(commands.Queue.Declare(queue=queue, auto_delete=True), 1)
        publisher.expect(commands.Queue.DeclareOk, channel=1)
        # A no-ack consumer that never reads its socket: its deliveries pile up in buffers.
        consumer.send(commands.Basic.Consume(queue=queue, no_ack=True), 1)
        consumer.expect(commands.Basic.ConsumeOk, channel=1)
        for _ in range(5):
            publish_burst(publisher, 1, queue, BURST)
        assert ready_count(publisher, 1, queue) <= 5 * BURST
