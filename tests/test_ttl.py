"""Message TTL (x-message-ttl, the expiration property) and queue TTL (x-expires)."""

from __future__ import annotations

from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    bodies,
    closes_channel,
    drain,
    exists,
    get_message,
    message_count,
    not_found_text,
    numbered,
    open_session,
    publish_all,
    round_trip,
    unique_name,
    wait_until,
)
from queue_helpers import (
    LONG_TTL_MS,
    NOT_AN_INTEGER,
    SHORT_TTL_MS,
    dead_letter_target,
    expiring,
    holds_for,
    invalid_arg_text,
    routable,
    wait_for_count,
    wait_for_message,
    x_death,
)

pytestmark = pytest.mark.timeout(60)

# Lease for the x-expires tests, and how long the tests keep a queue in use around it.
EXPIRES_MS = 600
RENEW_AFTER = 0.4  # seconds after the declare: before the lease runs out
STILL_THERE_FOR = 0.4  # seconds after renewing: past the first lease, within the second


# --------------------------------------------------------------------------- message TTL


def test_queue_ttl_drops_messages_without_anyone_reading_the_queue(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments={"x-message-ttl": SHORT_TTL_MS})
        publish_all(amqp.channel, queue, numbered("m", 3))
        assert message_count(amqp.channel, queue) == 3
        wait_for_count(amqp.channel, queue, 0)
        assert get_message(amqp.channel, queue) is None
        consumer = Consumer(amqp.channel, queue)
        assert consumer.settle() == []


def test_per_message_expiration_drops_only_that_message(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"short", expiring(SHORT_TTL_MS))
        amqp.channel.basic_publish("", queue, b"lasting")
        assert message_count(amqp.channel, queue) == 2
        wait_for_count(amqp.channel, queue, 1)
        [kept] = drain(amqp.channel, queue)
        assert (kept.body, kept.properties.expiration) == (b"lasting", None)


@pytest.mark.parametrize(
    ("expiration", "error"),
    [
        ("abc", "no_integer"),
        ("", "no_integer"),
        ("\u0661\u0662", "no_integer"),  # Arabic-Indic digits: RabbitMQ reads ASCII digits only
        ("-1", "{value_negative,-1}"),
        ("1.5", '{leftover_string,".5"}'),
    ],
)
def test_invalid_expiration_is_precondition_failed(broker: BrokerProcess, expiration: str, error: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        with closes_channel(406, f"PRECONDITION_FAILED - invalid expiration '{expiration}': {error}"):
            amqp.channel.basic_publish("", queue, b"bad", expiring(expiration))
            round_trip(amqp.channel)
        assert message_count(amqp.new_channel(), queue) == 0


def test_expiration_zero_without_a_waiting_consumer_expires_at_once(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        queue = amqp.declare_queue(arguments=target.arguments())
        amqp.channel.basic_publish("", queue, b"now-or-never", expiring(0))
        # No waiting: the message is gone by the time the broker answers the next method.
        assert get_message(amqp.channel, queue) is None
        dead = wait_for_message(amqp.channel, target.queue)
        assert dead.body == b"now-or-never"
        assert (x_death(dead)[0]["reason"], x_death(dead)[0]["original-expiration"]) == ("expired", "0")


@pytest.mark.parametrize("consumer_has_room", [True, False])
def test_expiration_zero_reaches_a_consumer_only_if_it_can_take_it_at_once(
    broker: BrokerProcess, consumer_has_room: bool
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_qos(prefetch_count=1)
        consumer = Consumer(amqp.channel, queue)
        if not consumer_has_room:
            amqp.channel.basic_publish("", queue, b"occupying")
            consumer.wait_for(1)
        amqp.channel.basic_publish("", queue, b"now-or-never", expiring(0))
        if consumer_has_room:
            [delivery] = consumer.wait_for(1)
            assert (delivery.body, delivery.properties.expiration) == (b"now-or-never", "0")
        else:
            round_trip(amqp.channel)
            amqp.channel.basic_ack(consumer.deliveries[0].delivery_tag)
            # Room again, but the message is long gone.
            assert bodies(consumer.settle()) == [b"occupying"]
            assert message_count(amqp.channel, queue) == 0


def test_expired_message_behind_a_lasting_one_is_removed_promptly(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        queue = amqp.declare_queue(arguments=target.arguments())
        amqp.channel.basic_publish("", queue, b"head")
        amqp.channel.basic_publish("", queue, b"behind", expiring(SHORT_TTL_MS))
        assert message_count(amqp.channel, queue) == 2
        wait_for_count(amqp.channel, queue, 1)
        dead = wait_for_message(amqp.channel, target.queue)
        assert (dead.body, x_death(dead)[0]["reason"]) == (b"behind", "expired")
        assert bodies(drain(amqp.channel, queue)) == [b"head"]


@pytest.mark.parametrize("settle", ["ack", "requeue"])
def test_ready_messages_expire_while_the_consumer_is_at_its_prefetch_limit(broker: BrokerProcess, settle: str) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        queue = amqp.declare_queue(arguments=target.arguments(**{"x-message-ttl": SHORT_TTL_MS}))
        consuming = amqp.connection.channel()
        consuming.basic_qos(prefetch_count=1)
        consumer = Consumer(consuming, queue)
        publish_all(amqp.channel, queue, [b"held", b"waiting"])
        [held] = consumer.wait_for(1)
        # The waiting message expires in the queue; the delivered one does not.
        expired = wait_for_message(amqp.channel, target.queue)
        assert (expired.body, x_death(expired)[0]["reason"]) == (b"waiting", "expired")
        assert message_count(amqp.channel, queue) == 0
        if settle == "ack":
            consuming.basic_ack(held.delivery_tag)
            round_trip(consuming)
            assert get_message(amqp.channel, target.queue) is None
        else:
            # Requeued past its TTL, it keeps its original expiry and expires at once.
            consuming.basic_nack(held.delivery_tag, requeue=True)
            dead = wait_for_message(amqp.channel, target.queue)
            assert (dead.body, x_death(dead)[0]["reason"]) == (b"held", "expired")
        assert bodies(consumer.settle()) == [b"held"]
        assert message_count(amqp.channel, queue) == 0


@pytest.mark.parametrize(
    ("queue_ttl", "message_ttl"),
    [(LONG_TTL_MS, SHORT_TTL_MS), (SHORT_TTL_MS, LONG_TTL_MS)],
    ids=["message-lower", "queue-lower"],
)
def test_the_lower_of_queue_and_message_ttl_wins(broker: BrokerProcess, queue_ttl: int, message_ttl: int) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments={"x-message-ttl": queue_ttl})
        amqp.channel.basic_publish("", queue, b"m", expiring(message_ttl))
        assert message_count(amqp.channel, queue) == 1
        wait_for_count(amqp.channel, queue, 0, timeout=3)


@pytest.mark.parametrize(
    ("arguments", "arg", "error"),
    [
        ({"x-message-ttl": -1}, "x-message-ttl", "{value_negative,-1}"),
        ({"x-message-ttl": "soon"}, "x-message-ttl", NOT_AN_INTEGER),
        ({"x-expires": 0}, "x-expires", "{value_zero,0}"),
        ({"x-expires": -5}, "x-expires", "{value_negative,-5}"),
    ],
)
def test_invalid_ttl_arguments_are_precondition_failed(
    broker: BrokerProcess, arguments: dict[str, Any], arg: str, error: str
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.track_queue(unique_name("bad-ttl"))
        with closes_channel(406, invalid_arg_text(arg, queue, error)):
            amqp.channel.queue_declare(queue, arguments=arguments)
        assert not exists(amqp.connection, "queue", queue)


# --------------------------------------------------------------------------- queue TTL


def test_unused_queue_is_deleted_when_x_expires_runs_out(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments={"x-expires": EXPIRES_MS})
        probe = amqp.connection.channel()
        probe.confirm_delivery()
        # Publishing does not count as use: the lease runs out with messages in the queue.
        assert routable(probe, queue)
        holds_for(lambda: routable(probe, queue), RENEW_AFTER, f"queue {queue!r} exists")
        wait_until(lambda: not routable(probe, queue), f"queue {queue!r} expired", timeout=3)
        with closes_channel(404, not_found_text("queue", queue)):
            amqp.channel.queue_declare(queue, passive=True)


@pytest.mark.parametrize("use", ["consumer", "redeclare", "get"])
def test_x_expires_lease_is_renewed_by_use(broker: BrokerProcess, use: str) -> None:
    arguments = {"x-expires": EXPIRES_MS}
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments=arguments)
        probe = amqp.connection.channel()
        probe.confirm_delivery()
        holds_for(lambda: routable(probe, queue), RENEW_AFTER, f"queue {queue!r} exists")
        if use == "consumer":
            consumer = Consumer(amqp.channel, queue, auto_ack=True)
            # Held for longer than a whole lease: a queue with a consumer is in use.
            holds_for(lambda: routable(probe, queue), EXPIRES_MS / 1000 + 0.3, f"consumed queue {queue!r} exists")
            consumer.cancel()
        elif use == "redeclare":
            amqp.channel.queue_declare(queue, arguments=arguments)
        else:
            get_message(amqp.channel, queue, auto_ack=True)
        holds_for(
            lambda: routable(probe, queue), STILL_THERE_FOR, f"queue {queue!r} exists after its lease was renewed"
        )
        wait_until(lambda: not routable(probe, queue), f"queue {queue!r} expired", timeout=3)
