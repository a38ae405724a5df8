"""Large messages: bodies gathered in buffers that are not zeroed first arrive whole and in
order beside small ones, and a consumer that does not read its large deliveries holds no
more than the connection's high-water mark."""

from __future__ import annotations

import struct
import time

import pytest
from broker_process import BrokerProcess, broker_rss
from lavin.client.wire import Connection, connect
from pamqp import commands

MiB = 1024 * 1024
# Above and below a body frame's size (128 KiB), in turn.
SIZES = [MiB + 17, 100, 300 * 1024, 5, 3 * MiB, 40_000, 700 * 1024, 1]


def body(sequence: int, size: int) -> bytes:
    """`size` bytes (at least 4) that say which message they are in every 4 KiB."""
    stamp = struct.pack(">I", sequence)
    return (stamp * (size // 4 + 1))[: max(size, 4)]


def declare(connection: Connection, queue: str) -> None:
    connection.call(commands.Queue.Declare(queue=queue), commands.Queue.DeclareOk, 1)


@pytest.mark.parametrize(("no_ack", "frame_max"), [(True, None), (False, None), (True, 4096), (False, 65536)])
def test_large_and_small_deliveries_arrive_whole_and_in_order(
    broker: BrokerProcess, no_ack: bool, frame_max: int | None
) -> None:
    queue = f"large-messages-order-{no_ack}-{frame_max}"
    expected = [body(sequence, SIZES[sequence % len(SIZES)]) for sequence in range(48)]
    with connect(broker.url, frame_max=frame_max) as publisher, connect(broker.url) as consumer:
        declare(publisher, queue)
        if not no_ack:
            consumer.qos(20)
        consumer.consume(queue, no_ack=no_ack)
        publisher.publish(queue, expected)
        for sequence, wanted in enumerate(expected):
            delivery = consumer.next_delivery()
            assert len(delivery.body) == len(wanted), f"message {sequence}"
            assert delivery.body == wanted, f"message {sequence}"
            if not no_ack:
                consumer.ack(delivery.delivery_tag)
        publisher.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk, 1)


def test_messages_published_one_write_at_a_time_arrive_whole_and_in_order(broker: BrokerProcess) -> None:
    """Each message its own socket write: reads end inside frames and bodies are received in
    place, one frame after another."""
    queue = "large-messages-one-by-one"
    count = 200
    with connect(broker.url) as publisher, connect(broker.url) as consumer:
        declare(publisher, queue)
        consumer.consume(queue, no_ack=True)
        for sequence in range(count):
            publisher.publish(queue, [body(sequence, MiB if sequence % 2 else 8)])
        for sequence in range(count):
            assert consumer.next_delivery().body == body(sequence, MiB if sequence % 2 else 8), f"message {sequence}"
        publisher.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk, 1)


def test_a_consumer_that_does_not_read_large_deliveries_holds_no_memory(
    fresh_broker: BrokerProcess,
) -> None:
    count = 150  # 150 MiB queued; written to a client that never reads, all of it would sit in memory
    with connect(fresh_broker.url) as publisher:
        declare(publisher, "stalled")
        declare(publisher, "moving")
        publisher.publish("stalled", (body(sequence, MiB) for sequence in range(count)))
        idle = broker_rss(fresh_broker)
        stalled = connect(fresh_broker.url)
        try:
            stalled.consume("stalled", no_ack=True)  # and never read again
            time.sleep(1.0)
            # Other large deliveries still go out.
            with connect(fresh_broker.url) as consumer:
                consumer.consume("moving", no_ack=True)
                started = time.monotonic()
                publisher.publish("moving", (body(sequence, MiB) for sequence in range(20)))
                for sequence in range(20):
                    assert consumer.next_delivery().body == body(sequence, MiB)
                assert time.monotonic() - started < 10.0
            assert broker_rss(fresh_broker) - idle < 64 * MiB
        finally:
            stalled.sock.close()
