"""Message order: FIFO per queue, per-channel publish order, round-robin between competing
consumers, where requeued messages go back, and how prefetch limits shape deliveries."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    bodies,
    declare_ok,
    drain,
    numbered,
    open_session,
    process_for,
    process_until,
    publish_all,
    round_trip,
)
from pika.adapters.blocking_connection import BlockingConnection
from queue_helpers import wait_for_count

pytestmark = pytest.mark.timeout(60)


def delivered(consumers: list[Consumer]) -> int:
    return sum(len(consumer.deliveries) for consumer in consumers)


def wait_for_total(connection: BlockingConnection, consumers: list[Consumer], count: int) -> None:
    process_until(
        connection,
        lambda: delivered(consumers) >= count,
        f"{count} deliveries arrived across {len(consumers)} consumers",
    )


# --------------------------------------------------------------------------- publishing


def test_one_channel_s_publishes_are_queued_in_publish_order(broker: BrokerProcess) -> None:
    # Small, empty and multi-frame bodies mixed, so a large message cannot overtake.
    sizes = [10, 0, 300_000, 1, 140_000, 5, 0, 1_000_000, 2]
    payloads = [f"{index}:".encode() + b"x" * size for index, size in enumerate(sizes * 20)]
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, payloads)
        assert bodies(drain(amqp.channel, queue)) == payloads


def test_channels_interleave_but_each_keeps_its_own_order(broker: BrokerProcess) -> None:
    per_channel = 40
    with open_session(broker.url) as amqp, open_session(broker.url) as other:
        queue = amqp.declare_queue()
        publishers = {
            "a": amqp.connection.channel(),
            "b": amqp.connection.channel(),
            "c": other.channel,
        }
        for index in range(1, per_channel + 1):
            for prefix, channel in publishers.items():
                channel.basic_publish("", queue, f"{prefix}-{index}".encode())
        for channel in publishers.values():
            round_trip(channel)
        received = bodies(drain(amqp.channel, queue))
        assert len(received) == per_channel * len(publishers)
        for prefix in publishers:
            own = [body for body in received if body.startswith(f"{prefix}-".encode())]
            assert own == numbered(prefix, per_channel)


# --------------------------------------------------------------------------- consumers


@pytest.mark.parametrize("prefetch", [0, 1])
def test_competing_consumers_take_strict_turns(broker: BrokerProcess, prefetch: int) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        consumers = []
        for _ in range(3):
            channel = amqp.connection.channel()
            channel.basic_qos(prefetch_count=prefetch)
            consumers.append(Consumer(channel, queue))
        publish_all(amqp.channel, queue, numbered("m", 9))
        if prefetch:
            # One each; every ack frees exactly one consumer, which gets the next message.
            wait_for_total(amqp.connection, consumers, 3)
            for round_number in range(2):
                for consumer in consumers:
                    consumer.wait_for(round_number + 1)
                    consumer.channel.basic_ack(consumer.deliveries[round_number].delivery_tag)
        wait_for_total(amqp.connection, consumers, 9)
        assert [consumer.bodies for consumer in consumers] == [
            [b"m-1", b"m-4", b"m-7"],
            [b"m-2", b"m-5", b"m-8"],
            [b"m-3", b"m-6", b"m-9"],
        ]


def test_nacked_messages_return_to_the_front_in_publish_order(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 7))
        consuming = amqp.connection.channel()
        consuming.basic_qos(prefetch_count=4)
        consumer = Consumer(consuming, queue)
        held = consumer.wait_for(4)
        # Acking m-2 makes room for m-5; then m-1, m-3 and m-4 are requeued together.
        consuming.basic_ack(held[1].delivery_tag)
        consumer.wait_for(5)
        consuming.basic_nack(held[3].delivery_tag, multiple=True, requeue=True)
        again = consumer.wait_for(8)[5:]
        assert [(m.body, m.redelivered) for m in again] == [
            (b"m-1", True),
            (b"m-3", True),
            (b"m-4", True),
        ]
        # Only then the messages no consumer has seen yet.
        consuming.basic_ack(again[-1].delivery_tag, multiple=True)
        rest = consumer.wait_for(10)[8:]
        assert [(m.body, m.redelivered) for m in rest] == [(b"m-6", False), (b"m-7", False)]


@pytest.mark.parametrize("closed", ["channel", "connection"])
def test_unacked_messages_of_a_closed_consumer_go_back_to_the_front(broker: BrokerProcess, closed: str) -> None:
    with open_session(broker.url) as amqp, open_session(broker.url) as doomed:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 6))
        doomed.channel.basic_qos(prefetch_count=3)
        consumer = Consumer(doomed.channel, queue)
        held = consumer.wait_for(3)
        # Acking m-2 leaves a hole in the unacked range and lets m-4 in.
        doomed.channel.basic_ack(held[1].delivery_tag)
        consumer.wait_for(4)
        if closed == "channel":
            doomed.channel.close()
        else:
            doomed.connection.close()
        wait_for_count(amqp.channel, queue, 5)
        assert [(m.body, m.redelivered) for m in drain(amqp.channel, queue)] == [
            (b"m-1", True),
            (b"m-3", True),
            (b"m-4", True),
            (b"m-5", False),
            (b"m-6", False),
        ]


def test_cancel_alone_keeps_deliveries_unacked_until_the_channel_closes(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        first_channel = amqp.connection.channel()
        first_channel.basic_qos(prefetch_count=2)
        first = Consumer(first_channel, queue)
        first.wait_for(2)
        first.cancel()

        second = Consumer(amqp.connection.channel(), queue)
        # Only the message nobody holds; the cancelled consumer's two stay with its channel.
        second.wait_for(1)
        assert [(m.body, m.redelivered) for m in second.settle()] == [(b"m-3", False)]
        assert declare_ok(amqp.channel, queue) == (0, 1)

        first_channel.close()
        assert [(m.body, m.redelivered) for m in second.wait_for(3)] == [
            (b"m-3", False),
            (b"m-1", True),
            (b"m-2", True),
        ]


def test_recover_requeues_ahead_of_messages_never_delivered(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 4))
        amqp.channel.basic_qos(prefetch_count=2)
        consumer = Consumer(amqp.channel, queue)
        consumer.wait_for(2)
        amqp.channel.basic_recover(requeue=True)
        again = consumer.wait_for(4)[2:]
        assert [(m.body, m.redelivered) for m in again] == [(b"m-1", True), (b"m-2", True)]
        # The prefetch window is the same after the recover: nothing more until an ack.
        assert len(consumer.settle()) == 4
        amqp.channel.basic_ack(again[-1].delivery_tag, multiple=True)
        assert [(m.body, m.redelivered) for m in consumer.wait_for(6)[4:]] == [
            (b"m-3", False),
            (b"m-4", False),
        ]


# --------------------------------------------------------------------------- prefetch


def test_per_consumer_prefetch_applies_to_consumers_started_after_it(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queues = [amqp.declare_queue(), amqp.declare_queue()]
        for queue in queues:
            publish_all(amqp.channel, queue, numbered(queue, 5))
        consuming = amqp.connection.channel()
        consuming.basic_qos(prefetch_count=1)
        early = Consumer(consuming, queues[0])
        consuming.basic_qos(prefetch_count=3)
        late = Consumer(consuming, queues[1])
        wait_for_total(amqp.connection, [early, late], 4)
        process_for(amqp.connection)
        assert (len(early.deliveries), len(late.deliveries)) == (1, 3)


def test_per_consumer_and_channel_wide_prefetch_are_both_enforced(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queues = [amqp.declare_queue(), amqp.declare_queue()]
        for queue in queues:
            publish_all(amqp.channel, queue, numbered(queue, 6))
        consuming = amqp.connection.channel()
        consuming.basic_qos(prefetch_count=4, global_qos=True)
        consuming.basic_qos(prefetch_count=3, global_qos=False)
        first = Consumer(consuming, queues[0])
        first.wait_for(3)
        second = Consumer(consuming, queues[1])
        second.wait_for(1)
        process_for(amqp.connection)
        # 3 for the first (its own limit), 1 for the second (the channel's limit of 4).
        assert (len(first.deliveries), len(second.deliveries)) == (3, 1)

        # An ack frees one place on the channel; only the second consumer has room for it.
        consuming.basic_ack(second.deliveries[0].delivery_tag)
        second.wait_for(2)
        process_for(amqp.connection)
        assert (first.bodies, second.bodies) == (
            numbered(queues[0], 3),
            numbered(queues[1], 2),
        )
