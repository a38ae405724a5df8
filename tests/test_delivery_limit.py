"""x-delivery-limit: how often a message may be requeued before it is dead-lettered or
dropped, and the x-delivery-count header that counts its redeliveries."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    Message,
    get_messages,
    message_count,
    open_session,
    round_trip,
    unique_name,
)
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties
from queue_helpers import (
    dead_letter_target,
    death,
    deaths_without_time,
    first_and_last_death,
    headers_without_x_death,
    utc_now,
    wait_for_message,
)

pytestmark = pytest.mark.timeout(60)


def delivery_count(message: Message) -> int | None:
    return (message.properties.headers or {}).get("x-delivery-count")


def requeue_each_delivery(channel: BlockingChannel, queue: str, times: int, method: str = "nack") -> list[Message]:
    """Consume `queue` with prefetch 1 and requeue every delivery, `times` times."""
    channel.basic_qos(prefetch_count=1)
    consumer = Consumer(channel, queue)
    for index in range(times):
        delivery = consumer.wait_for(index + 1)[index]
        if method == "nack":
            channel.basic_nack(delivery.delivery_tag, requeue=True)
        else:
            channel.basic_reject(delivery.delivery_tag, requeue=True)
    deliveries = consumer.settle()
    consumer.cancel()
    return deliveries


@pytest.mark.parametrize("limit", [0, 2])
def test_message_requeued_more_than_the_limit_is_dead_lettered(broker: BrokerProcess, limit: int) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        queue = amqp.declare_queue(arguments=target.arguments(**{"x-delivery-limit": limit}))
        since = utc_now()
        amqp.channel.basic_publish("", queue, b"poison", BasicProperties(headers={"app": "kept"}))
        deliveries = requeue_each_delivery(amqp.connection.channel(), queue, limit + 1)

        # Delivered once plus `limit` redeliveries, numbered from the first redelivery on.
        assert [(d.redelivered, delivery_count(d)) for d in deliveries] == [
            (False, None),
            *((True, count) for count in range(1, limit + 1)),
        ]
        assert [d.properties.headers for d in deliveries[1:]] == [
            {"app": "kept", "x-delivery-count": count} for count in range(1, limit + 1)
        ]

        dead = wait_for_message(amqp.channel, target.queue)
        assert dead.body == b"poison"
        assert deaths_without_time(dead, since) == [death(queue, "delivery_limit")]
        headers = headers_without_x_death(dead)
        headers.pop("x-delivery-count", None)  # whether the copy keeps it is not specified
        assert headers == {"app": "kept", **first_and_last_death((queue, "delivery_limit", ""))}
        assert message_count(amqp.channel, queue) == 0


def test_without_dead_letter_exchange_the_message_is_dropped(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments={"x-delivery-limit": 1})
        amqp.channel.basic_publish("", queue, b"poison")
        amqp.channel.basic_publish("", queue, b"healthy")
        consuming = amqp.connection.channel()
        deliveries = requeue_each_delivery(consuming, queue, 2, method="reject")
        # The poison message twice, then the next one in line.
        assert [(d.body, delivery_count(d)) for d in deliveries] == [
            (b"poison", None),
            (b"poison", 1),
            (b"healthy", None),
        ]
        consuming.basic_ack(deliveries[-1].delivery_tag)
        round_trip(consuming)
        assert message_count(amqp.channel, queue) == 0


def test_delivery_count_survives_a_broker_restart(fresh_broker: BrokerProcess) -> None:
    queue, dlx, dlq = unique_name("limited"), unique_name("dlx"), unique_name("dlq")
    with open_session(fresh_broker.url) as amqp:
        channel = amqp.channel
        channel.exchange_declare(dlx, "fanout", durable=True)
        channel.queue_declare(dlq, durable=True)
        channel.queue_bind(dlq, dlx)
        channel.queue_declare(queue, durable=True, arguments={"x-delivery-limit": 2, "x-dead-letter-exchange": dlx})
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"poison", BasicProperties(delivery_mode=2))
        for expected in (None, 1):
            [message] = get_messages(channel, queue, 1)
            assert delivery_count(message) == expected
            channel.basic_nack(message.delivery_tag, requeue=True)
        round_trip(channel)

    fresh_broker.restart()

    with open_session(fresh_broker.url) as amqp:
        [message] = get_messages(amqp.channel, queue, 1)
        assert (message.body, delivery_count(message)) == (b"poison", 2)
        amqp.channel.basic_nack(message.delivery_tag, requeue=True)
        dead = wait_for_message(amqp.channel, dlq)
        assert [entry["reason"] for entry in dead.properties.headers["x-death"]] == ["delivery_limit"]
        assert message_count(amqp.channel, queue) == 0
