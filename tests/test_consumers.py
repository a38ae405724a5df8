"""Consumer features: priorities, exclusive consumers, single active consumer, consume
arguments, basic.get counts and auto-delete queues."""

from __future__ import annotations

from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    closes_channel,
    declare_ok,
    exists,
    get_message,
    get_messages,
    numbered,
    open_session,
    process_for,
    process_until,
    publish_all,
    resource,
    unique_name,
    wait_until,
)
from pika.adapters.blocking_connection import BlockingConnection
from queue_helpers import NOT_AN_INTEGER, invalid_arg_text, unacceptable_type

pytestmark = pytest.mark.timeout(60)

SINGLE_ACTIVE = {"x-single-active-consumer": True}


def priority_consumer(connection: BlockingConnection, queue: str, priority: int | None, prefetch: int = 0) -> Consumer:
    """A consumer on its own channel, so each has its own prefetch window."""
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    arguments = {"x-priority": priority} if priority is not None else None
    return Consumer(channel, queue, arguments=arguments)


def wait_for_all(connection: BlockingConnection, consumers: list[Consumer], count: int) -> None:
    process_until(connection, lambda: sum(len(c.deliveries) for c in consumers) >= count, f"{count} deliveries arrived")
    process_for(connection)


# --------------------------------------------------------------------------- priorities


def test_highest_priority_consumer_gets_everything_while_it_has_room(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        low = priority_consumer(amqp.connection, queue, 1)
        high = priority_consumer(amqp.connection, queue, 10)
        publish_all(amqp.channel, queue, numbered("m", 6))
        wait_for_all(amqp.connection, [low, high], 6)
        assert (high.bodies, low.bodies) == (numbered("m", 6), [])


def test_consumers_are_served_by_priority_as_higher_ones_fill_up(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        # Subscribed lowest first, so subscription order cannot explain the result.
        negative = priority_consumer(amqp.connection, queue, -5, prefetch=1)
        default = priority_consumer(amqp.connection, queue, None, prefetch=1)
        positive = priority_consumer(amqp.connection, queue, 5, prefetch=1)
        publish_all(amqp.channel, queue, numbered("m", 3))
        wait_for_all(amqp.connection, [negative, default, positive], 3)
        assert (positive.bodies, default.bodies, negative.bodies) == ([b"m-1"], [b"m-2"], [b"m-3"])


def test_lower_priority_consumer_gets_messages_only_while_the_higher_is_blocked(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        high = priority_consumer(amqp.connection, queue, 10, prefetch=2)
        low = priority_consumer(amqp.connection, queue, 1)
        publish_all(amqp.channel, queue, numbered("m", 5))
        wait_for_all(amqp.connection, [high, low], 5)
        assert (high.bodies, low.bodies) == ([b"m-1", b"m-2"], [b"m-3", b"m-4", b"m-5"])

        high.channel.basic_ack(high.deliveries[-1].delivery_tag, multiple=True)
        publish_all(amqp.channel, queue, [b"m-6", b"m-7"])
        wait_for_all(amqp.connection, [high, low], 7)
        assert (high.bodies[2:], low.bodies[3:]) == ([b"m-6", b"m-7"], [])


# --------------------------------------------------------------------------- exclusive


def test_exclusive_consumer_releases_the_queue_when_cancelled(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        exclusive = Consumer(amqp.connection.channel(), queue, exclusive=True)
        with closes_channel(403, f"ACCESS_REFUSED - {resource('queue', queue)} in exclusive use"):
            Consumer(amqp.channel, queue)
        exclusive.cancel()
        successor = Consumer(amqp.new_channel(), queue)
        amqp.channel.basic_publish("", queue, b"after")
        assert [d.body for d in successor.wait_for(1)] == [b"after"]
        assert exclusive.bodies == []


# --------------------------------------------------------------------------- single active


def test_single_active_consumer_gets_every_message(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments=SINGLE_ACTIVE)
        first = Consumer(amqp.connection.channel(), queue, auto_ack=True)
        second = Consumer(amqp.connection.channel(), queue, auto_ack=True)
        publish_all(amqp.channel, queue, numbered("m", 4))
        wait_for_all(amqp.connection, [first, second], 4)
        assert (first.bodies, second.bodies) == (numbered("m", 4), [])
        assert declare_ok(amqp.channel, queue) == (0, 2)


@pytest.mark.parametrize("leaves_by", ["connection-close", "cancel"])
def test_next_consumer_takes_over_when_the_active_one_leaves(broker: BrokerProcess, leaves_by: str) -> None:
    with open_session(broker.url) as amqp, open_session(broker.url) as leaving:
        queue = amqp.declare_queue(arguments=SINGLE_ACTIVE)
        leaving.channel.basic_qos(prefetch_count=2)
        active = Consumer(leaving.channel, queue)
        waiting = Consumer(amqp.connection.channel(), queue)
        publish_all(amqp.channel, queue, numbered("m", 4))
        active.wait_for(2)
        process_for(amqp.connection)
        assert (active.bodies, waiting.bodies) == ([b"m-1", b"m-2"], [])

        # The new active consumer takes the ready messages at once; the old consumer's
        # unacked ones follow when its channel closes. pika's connection.close() cancels
        # every consumer before it closes the channels, so both ways end alike.
        if leaves_by == "connection-close":
            leaving.connection.close()
        else:
            active.cancel()
            waiting.wait_for(2)
            leaving.channel.close()
        expected = [(b"m-3", False), (b"m-4", False), (b"m-1", True), (b"m-2", True)]
        waiting.wait_for(4)
        process_for(amqp.connection)
        assert [(d.body, d.redelivered) for d in waiting.deliveries] == expected


# --------------------------------------------------------------------------- arguments


def test_cancel_on_ha_failover_is_accepted(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        consumer = Consumer(amqp.channel, queue, auto_ack=True, arguments={"x-cancel-on-ha-failover": True})
        amqp.channel.basic_publish("", queue, b"m")
        assert [d.body for d in consumer.wait_for(1)] == [b"m"]


@pytest.mark.parametrize(
    ("arguments", "arg", "error"),
    [
        ({"x-priority": "high"}, "x-priority", NOT_AN_INTEGER),
        ({"x-cancel-on-ha-failover": "yes"}, "x-cancel-on-ha-failover", unacceptable_type("longstr")),
    ],
)
def test_invalid_consume_arguments_are_precondition_failed(
    broker: BrokerProcess, arguments: dict[str, Any], arg: str, error: str
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        with closes_channel(406, invalid_arg_text(arg, queue, error)):
            Consumer(amqp.channel, queue, arguments=arguments)
        assert declare_ok(amqp.new_channel(), queue) == (0, 0)


def test_invalid_single_active_consumer_flag_is_precondition_failed(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.track_queue(unique_name("sac"))
        with closes_channel(406, invalid_arg_text("x-single-active-consumer", queue, unacceptable_type("longstr"))):
            amqp.channel.queue_declare(queue, arguments={"x-single-active-consumer": "yes"})
        assert not exists(amqp.connection, "queue", queue)


# --------------------------------------------------------------------------- get and delete


def test_get_counts_ready_messages_only(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        held = get_messages(amqp.channel, queue, 2)
        # Unacknowledged messages are not counted as remaining...
        assert [m.message_count for m in held] == [2, 1]
        amqp.channel.basic_nack(held[-1].delivery_tag, multiple=True, requeue=True)
        # ...and requeued ones are counted again.
        again = get_message(amqp.channel, queue, auto_ack=True)
        assert again is not None
        assert (again.body, again.redelivered, again.message_count) == (b"m-1", True, 2)


def test_auto_delete_queue_goes_only_after_its_last_consumer(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(auto_delete=True)
        # Never consumed: not deleted, whatever happens to it.
        amqp.channel.basic_publish("", queue, b"m")
        assert get_message(amqp.channel, queue, auto_ack=True) is not None
        assert exists(amqp.connection, "queue", queue)

        consumers = [Consumer(amqp.connection.channel(), queue) for _ in range(2)]
        consumers[0].cancel()
        assert exists(amqp.connection, "queue", queue)
        consumers[1].cancel()
        wait_until(lambda: not exists(amqp.connection, "queue", queue), f"auto-delete queue {queue!r} is deleted")
