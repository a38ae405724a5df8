"""Quorum queues (`x-queue-type: quorum`) with RabbitMQ 3.10's single-node semantics:
durable only, delivery limits and the x-delivery-count header, the arguments 3.10 accepts
and refuses, and the QueueTypeKit run against the type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    Message,
    closes_channel,
    drain,
    get_messages,
    inequivalent_text,
    message_count,
    numbered,
    open_session,
    publish_all,
    resource,
    round_trip,
    unique_name,
)
from lavin.plugins.queues.quorum import QuorumQueue
from lavin.testing import QueueTypeKit
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import PERSISTENT_DELIVERY_MODE, BasicProperties
from queue_helpers import NOT_AN_INTEGER, dead_letter_target, invalid_arg_text, wait_for_message

pytestmark = pytest.mark.timeout(60)

QUORUM: dict[str, Any] = {"x-queue-type": "quorum"}
PERSISTENT = BasicProperties(delivery_mode=PERSISTENT_DELIVERY_MODE)


def quorum(**arguments: Any) -> dict[str, Any]:
    return {**QUORUM, **arguments}


def delivery_count(message: Message) -> int | None:
    return (message.properties.headers or {}).get("x-delivery-count")


def nack_each_delivery(channel: BlockingChannel, queue: str, times: int) -> list[Message]:
    """Consume `queue` with prefetch 1 and requeue every delivery, `times` times."""
    channel.basic_qos(prefetch_count=1)
    consumer = Consumer(channel, queue)
    for index in range(times):
        delivery = consumer.wait_for(index + 1)[index]
        channel.basic_nack(delivery.delivery_tag, requeue=True)
    deliveries = consumer.settle()
    consumer.cancel()
    return deliveries


# --------------------------------------------------------------------------- the conformance kit


class TestQuorumQueueKit(QueueTypeKit):
    """The kit, for durable queues only: the type refuses transient ones."""

    queue_type = QuorumQueue

    @pytest.fixture(params=[True], ids=["durable"])
    def durable(self, request: pytest.FixtureRequest) -> bool:
        return bool(request.param)


def test_the_type_is_for_durable_queues_only() -> None:
    assert QuorumQueue.durable_only


# --------------------------------------------------------------------------- through pika


def test_declare_publish_consume_and_ack(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue("quorum", durable=True, arguments=QUORUM)
        amqp.channel.confirm_delivery()
        publish_all(amqp.channel, queue, numbered("m", 3), properties=PERSISTENT)
        assert message_count(amqp.channel, queue) == 3

        consuming = amqp.connection.channel()
        consuming.basic_qos(prefetch_count=10)
        consumer = Consumer(consuming, queue)
        deliveries = consumer.wait_for(3)
        assert [(d.body, d.redelivered, delivery_count(d)) for d in deliveries] == [
            (body, False, None) for body in numbered("m", 3)
        ]
        for delivery in deliveries:
            consuming.basic_ack(delivery.delivery_tag)
        consumer.cancel()
        round_trip(consuming)
        assert message_count(amqp.channel, queue) == 0
        # A redeclare with the same arguments is fine.
        amqp.channel.queue_declare(queue, durable=True, arguments=QUORUM)


def test_requeued_messages_carry_x_delivery_count_without_a_limit(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue("quorum", durable=True, arguments=QUORUM)
        amqp.channel.basic_publish("", queue, b"again", BasicProperties(headers={"app": "kept"}))
        deliveries = nack_each_delivery(amqp.connection.channel(), queue, 3)
        assert [(d.redelivered, delivery_count(d)) for d in deliveries[:4]] == [
            (False, None),
            (True, 1),
            (True, 2),
            (True, 3),
        ]
        assert deliveries[3].properties.headers == {"app": "kept", "x-delivery-count": 3}


def test_a_message_over_the_delivery_limit_is_dead_lettered(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        arguments = target.arguments(**quorum(**{"x-delivery-limit": 2}))
        queue = amqp.declare_queue("quorum", durable=True, arguments=arguments)
        amqp.channel.basic_publish("", queue, b"poison", PERSISTENT)
        amqp.channel.basic_publish("", queue, b"healthy", PERSISTENT)
        deliveries = nack_each_delivery(amqp.connection.channel(), queue, 3)
        # The poison message thrice, then the next one in line.
        assert [(d.body, delivery_count(d)) for d in deliveries] == [
            (b"poison", None),
            (b"poison", 1),
            (b"poison", 2),
            (b"healthy", None),
        ]
        dead = wait_for_message(amqp.channel, target.queue)
        assert dead.body == b"poison"
        assert [entry["reason"] for entry in dead.properties.headers["x-death"]] == ["delivery_limit"]


@pytest.mark.parametrize("strategy", ["at-most-once", "at-least-once"])
def test_rejected_messages_are_dead_lettered_with_either_strategy(broker: BrokerProcess, strategy: str) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        arguments = target.arguments(**quorum(**{"x-dead-letter-strategy": strategy, "x-overflow": "reject-publish"}))
        queue = amqp.declare_queue("quorum", durable=True, arguments=arguments)
        amqp.channel.basic_publish("", queue, b"refused", PERSISTENT)
        [message] = get_messages(amqp.channel, queue, 1)
        amqp.channel.basic_reject(message.delivery_tag, requeue=False)
        dead = wait_for_message(amqp.channel, target.queue)
        assert dead.body == b"refused"
        assert [entry["reason"] for entry in dead.properties.headers["x-death"]] == ["rejected"]


def test_accepted_arguments(broker: BrokerProcess) -> None:
    arguments = quorum(
        **{
            "x-quorum-initial-group-size": 3,
            "x-max-in-memory-length": 10,
            "x-max-in-memory-bytes": 1024,
            "x-dead-letter-strategy": "at-least-once",
            "x-single-active-consumer": True,
            "x-expires": 60_000,
            "x-message-ttl": 60_000,
        }
    )
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue("quorum", durable=True, arguments=arguments)
        amqp.channel.queue_declare(queue, durable=True, arguments=arguments)


def test_overflow_reject_publish_nacks_and_drop_head_drops(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        rejecting = amqp.declare_queue(
            "quorum", durable=True, arguments=quorum(**{"x-max-length": 1, "x-overflow": "reject-publish"})
        )
        dropping = amqp.declare_queue("quorum", durable=True, arguments=quorum(**{"x-max-length": 1}))
        amqp.channel.confirm_delivery()
        amqp.channel.basic_publish("", rejecting, b"first", PERSISTENT)
        with pytest.raises(pika.exceptions.NackError):
            amqp.channel.basic_publish("", rejecting, b"second", PERSISTENT)
        publish_all(amqp.channel, dropping, [b"first", b"second"], properties=PERSISTENT)
        assert [m.body for m in drain(amqp.channel, rejecting)] == [b"first"]
        assert [m.body for m in drain(amqp.channel, dropping)] == [b"second"]


def test_overflow_reject_publish_dlx_behaves_as_drop_head(broker: BrokerProcess) -> None:
    """RabbitMQ 3.10 accepts it for a quorum queue and falls back to drop-head."""
    with open_session(broker.url) as amqp:
        arguments = quorum(**{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
        queue = amqp.declare_queue("quorum", durable=True, arguments=arguments)
        amqp.channel.confirm_delivery()
        publish_all(amqp.channel, queue, [b"first", b"second"], properties=PERSISTENT)
        assert [m.body for m in drain(amqp.channel, queue)] == [b"second"]


# --------------------------------------------------------------------------- refusals


Declare = Callable[[BlockingChannel, str], object]

# RabbitMQ names the first refused property in this order: auto-delete, exclusive, non-durable.
REFUSED_PROPERTIES = [
    pytest.param(lambda ch, q: ch.queue_declare(q, durable=False, arguments=QUORUM), "non-durable", id="non-durable"),
    pytest.param(
        lambda ch, q: ch.queue_declare(q, durable=True, exclusive=True, arguments=QUORUM),
        "exclusive-owner",
        id="exclusive",
    ),
    pytest.param(
        lambda ch, q: ch.queue_declare(q, durable=True, auto_delete=True, arguments=QUORUM),
        "auto-delete",
        id="auto-delete",
    ),
    pytest.param(
        lambda ch, q: ch.queue_declare(q, durable=False, exclusive=True, arguments=QUORUM),
        "exclusive-owner",
        id="transient-exclusive",
    ),
]


@pytest.mark.parametrize(("declare", "refused"), REFUSED_PROPERTIES)
def test_only_durable_shared_queues(broker: BrokerProcess, declare: Declare, refused: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.track_queue(unique_name("quorum"))
        with closes_channel(
            406, f"PRECONDITION_FAILED - invalid property '{refused}' for queue '{queue}' in vhost '/'"
        ):
            declare(amqp.channel, queue)
        assert not _exists(amqp.new_channel(), queue)


@pytest.mark.parametrize(
    ("argument", "value"), [("x-max-priority", 10), ("x-max-priority", 0), ("x-queue-mode", "lazy")]
)
def test_refused_arguments(broker: BrokerProcess, argument: str, value: object) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.track_queue(unique_name("quorum"))
        with closes_channel(406, f"PRECONDITION_FAILED - invalid arg '{argument}' for {resource('queue', queue)}"):
            amqp.channel.queue_declare(queue, durable=True, arguments=quorum(**{argument: value}))
        assert not _exists(amqp.new_channel(), queue)


@pytest.mark.parametrize(
    ("argument", "value", "error"),
    [
        ("x-dead-letter-strategy", "sometimes", "invalid_dlx_strategy"),
        ("x-dead-letter-strategy", 1, "{unacceptable_type,signedint}"),
        ("x-quorum-initial-group-size", 0, "{value_zero,0}"),
        ("x-quorum-initial-group-size", "three", NOT_AN_INTEGER),
        ("x-max-in-memory-length", -1, "{value_negative,-1}"),
        ("x-max-in-memory-bytes", "many", NOT_AN_INTEGER),
    ],
)
def test_invalid_values_are_refused(broker: BrokerProcess, argument: str, value: object, error: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.track_queue(unique_name("quorum"))
        with closes_channel(406, invalid_arg_text(argument, queue, error)):
            amqp.channel.queue_declare(queue, durable=True, arguments=quorum(**{argument: value}))


def test_redeclare_with_another_type_is_refused(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue("quorum", durable=True, arguments=QUORUM)
        current = "the value 'quorum' of type 'longstr'"
        with closes_channel(406, inequivalent_text("queue", queue, "x-queue-type", "none", current)):
            amqp.channel.queue_declare(queue, durable=True)
        received = "the value 'classic' of type 'longstr'"
        with closes_channel(406, inequivalent_text("queue", queue, "x-queue-type", received, current)):
            amqp.new_channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "classic"})

        plain = amqp.track_queue(unique_name("classic"))
        amqp.new_channel().queue_declare(plain, durable=True)
        with closes_channel(406, inequivalent_text("queue", plain, "x-queue-type", current, "none")):
            amqp.channel.queue_declare(plain, durable=True, arguments=QUORUM)


def _exists(channel: BlockingChannel, queue: str) -> bool:
    try:
        channel.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 404
        return False
    return True


# --------------------------------------------------------------------------- restarts


def restart_gracefully(broker: BrokerProcess) -> None:
    broker.restart()


def restart_after_crash(broker: BrokerProcess) -> None:
    broker.kill()
    broker.start()


@pytest.mark.parametrize(
    "restart",
    [pytest.param(restart_gracefully, id="sigterm"), pytest.param(restart_after_crash, id="sigkill")],
)
def test_messages_and_delivery_counts_survive_a_restart(
    fresh_broker: BrokerProcess, restart: Callable[[BrokerProcess], None]
) -> None:
    queue, dlq = unique_name("quorum"), unique_name("dlq")
    arguments = quorum(**{"x-delivery-limit": 2, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    with open_session(fresh_broker.url) as amqp:
        channel = amqp.channel
        channel.queue_declare(dlq, durable=True)
        channel.queue_declare(queue, durable=True, arguments=arguments)
        channel.confirm_delivery()
        publish_all(channel, queue, [b"poison", *numbered("kept", 3)], properties=PERSISTENT)
        for expected in (None, 1):
            [message] = get_messages(channel, queue, 1)
            assert (message.body, delivery_count(message)) == (b"poison", expected)
            channel.basic_nack(message.delivery_tag, requeue=True)
        round_trip(channel)

    restart(fresh_broker)

    with open_session(fresh_broker.url) as amqp:
        channel = amqp.channel
        # The queue is back as a quorum queue, with its arguments.
        channel.queue_declare(queue, durable=True, arguments=arguments)
        with closes_channel(406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'", exact=False):
            channel.queue_declare(queue, durable=True)
        channel = amqp.new_channel()
        assert message_count(channel, queue) == 4
        [message] = get_messages(channel, queue, 1)
        assert (message.body, delivery_count(message)) == (b"poison", 2)
        channel.basic_nack(message.delivery_tag, requeue=True)
        dead = wait_for_message(channel, dlq)
        assert dead.body == b"poison"
        assert [entry["reason"] for entry in dead.properties.headers["x-death"]] == ["delivery_limit"]
        assert [m.body for m in drain(channel, queue)] == numbered("kept", 3)
