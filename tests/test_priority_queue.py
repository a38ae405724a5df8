"""Priority queues (`x-max-priority`) through pika against a real broker."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pika
import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    Session,
    bodies,
    closes_channel,
    connect,
    drain,
    get_message,
    open_session,
    passive_reply_code,
    round_trip,
)
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import PERSISTENT_DELIVERY_MODE, BasicProperties

Restart = Callable[[BrokerProcess], None]


def restart_gracefully(broker: BrokerProcess) -> None:
    broker.restart()


def restart_after_crash(broker: BrokerProcess) -> None:
    broker.kill()
    broker.start()


def publish(
    channel: BlockingChannel, queue: str, messages: Sequence[tuple[bytes, int | None]], *, persistent: bool = False
) -> None:
    for body, priority in messages:
        properties = BasicProperties(priority=priority, delivery_mode=PERSISTENT_DELIVERY_MODE if persistent else None)
        channel.basic_publish("", queue, body, properties)


def declare_priority_queue(session: Session, max_priority: int = 10, **options: object) -> str:
    return session.declare_queue("prio", arguments={"x-max-priority": max_priority}, **options)


MIXED = [(b"low-1", 1), (b"high-1", 9), (b"mid-1", 5), (b"low-2", 1), (b"high-2", 9), (b"mid-2", 5)]
MIXED_IN_ORDER = [b"high-1", b"high-2", b"mid-1", b"mid-2", b"low-1", b"low-2"]


def test_basic_get_returns_higher_priority_first_fifo_within_a_priority(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_priority_queue(session)
        publish(session.channel, queue, MIXED)
        first = get_message(session.channel, queue, auto_ack=True)
        assert first is not None and (first.body, first.message_count) == (b"high-1", 5)
        assert bodies(drain(session.channel, queue)) == MIXED_IN_ORDER[1:]


def test_a_consumer_receives_messages_by_priority(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_priority_queue(session)
        publish(session.channel, queue, MIXED)
        round_trip(session.channel)
        consumer = Consumer(session.channel, queue, auto_ack=True)
        assert bodies(consumer.wait_for(6)) == MIXED_IN_ORDER


def test_no_priority_is_0_and_above_the_maximum_is_the_maximum(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_priority_queue(session, max_priority=5)
        publish(
            session.channel,
            queue,
            [
                (b"none", None),
                (b"zero", 0),
                (b"way-over", 200),
                (b"max", 5),
                (b"four", 4),
                (b"one", 1),
            ],
        )
        assert bodies(drain(session.channel, queue)) == [b"way-over", b"max", b"four", b"one", b"none", b"zero"]


def test_a_requeued_message_keeps_its_priority_and_leads_its_level(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        channel = session.channel
        queue = declare_priority_queue(session)
        publish(channel, queue, [(b"low", 1), (b"high-1", 9), (b"high-2", 9)])
        taken = get_message(channel, queue)
        assert taken is not None and taken.body == b"high-1"
        publish(channel, queue, [(b"mid", 5)])
        channel.basic_nack(taken.delivery_tag, requeue=True)
        received = drain(channel, queue)
        assert [(m.body, m.redelivered) for m in received] == [
            (b"high-1", True),
            (b"high-2", False),
            (b"mid", False),
            (b"low", False),
        ]


def test_unacked_messages_of_a_closed_channel_go_back_by_priority(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_priority_queue(session)
        publish(session.channel, queue, [(b"low", 1), (b"high", 9), (b"mid", 5)])
        round_trip(session.channel)
        consuming = session.connection.channel()
        consumer = Consumer(consuming, queue)
        assert bodies(consumer.wait_for(3)) == [b"high", b"mid", b"low"]
        consuming.close()
        received = drain(session.channel, queue)
        assert [(m.body, m.redelivered) for m in received] == [(b"high", True), (b"mid", True), (b"low", True)]


@pytest.mark.parametrize(
    "restart",
    [pytest.param(restart_gracefully, id="sigterm"), pytest.param(restart_after_crash, id="sigkill")],
)
def test_a_durable_priority_queue_survives_a_restart(fresh_broker: BrokerProcess, restart: Restart) -> None:
    connection = connect(fresh_broker.url)
    channel = connection.channel()
    channel.queue_declare("prio-durable", durable=True, arguments={"x-max-priority": 10})
    channel.confirm_delivery()
    publish(channel, "prio-durable", MIXED, persistent=True)
    connection.close()

    restart(fresh_broker)

    connection = connect(fresh_broker.url)
    channel = connection.channel()
    method = channel.queue_declare("prio-durable", durable=True, arguments={"x-max-priority": 10}).method
    assert method.message_count == 6
    assert bodies(drain(channel, "prio-durable")) == MIXED_IN_ORDER
    connection.close()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (256, "{max_value_exceeded,256}"),
        (-1, "{value_negative,-1}"),
        ("a", "{unacceptable_type,longstr}"),
    ],
)
def test_an_invalid_x_max_priority_closes_the_channel(broker: BrokerProcess, value: object, reason: str) -> None:
    with open_session(broker.url) as session:
        name = session.track_queue("prio-invalid")
        with closes_channel(
            406,
            f"PRECONDITION_FAILED - invalid arg 'x-max-priority': {reason} (expected an integer from 0 to 255)",
        ):
            session.channel.queue_declare(name, arguments={"x-max-priority": value})
        assert passive_reply_code(session.connection, "queue", name) == 404


def test_x_max_priority_0_is_accepted_as_a_single_level(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_priority_queue(session, max_priority=0)
        publish(session.channel, queue, [(b"first", 9), (b"second", None)])
        assert bodies(drain(session.channel, queue)) == [b"first", b"second"]


def test_priority_survives_delivery_to_a_waiting_consumer(broker: BrokerProcess) -> None:
    """A message published while a consumer waits goes straight out; later ones queue by priority."""
    with open_session(broker.url) as session:
        queue = declare_priority_queue(session)
        session.channel.basic_qos(prefetch_count=1)
        consumer = Consumer(session.channel, queue)
        publisher = session.connection.channel()
        publish(publisher, queue, [(b"first", 1), (b"low", 1), (b"high", 9)])
        round_trip(publisher)
        first = consumer.wait_for(1)[0]
        assert first.body == b"first"
        session.channel.basic_ack(first.delivery_tag)
        second = consumer.wait_for(2)[1]
        assert second.body == b"high"
        session.channel.basic_ack(second.delivery_tag)
        assert bodies(consumer.wait_for(3))[2] == b"low"


def test_redeclaring_with_the_same_maximum_is_equivalent(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_priority_queue(session, max_priority=3)
        publish(session.channel, queue, [(b"m", 2)])
        method = session.channel.queue_declare(queue, arguments={"x-max-priority": 3}).method
        assert method.message_count == 1
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            session.channel.queue_declare(queue, arguments={"x-max-priority": 4})
        assert info.value.reply_code == 406
