"""Dead-letter exchanges: when messages are dead-lettered, where they go, the x-death
history they carry, and RabbitMQ's cycle rules."""

from __future__ import annotations

from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import (
    Message,
    bodies,
    closes_channel,
    drain,
    exists,
    get_messages,
    message_count,
    numbered,
    open_session,
    publish_all,
    round_trip,
    unique_name,
)
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties
from queue_helpers import (
    SHORT_TTL_MS,
    dead_letter_target,
    death,
    deaths_without_time,
    first_and_last_death,
    headers_without_x_death,
    holds_for,
    invalid_arg_text,
    utc_now,
    wait_for_count,
    wait_for_message,
    x_death,
)

pytestmark = pytest.mark.timeout(60)

# Long enough for several rounds of a TTL cycle, had the broker let one run.
CYCLE_WATCH = 5 * SHORT_TTL_MS / 1000


def reject_next(channel: BlockingChannel, queue: str) -> Message:
    """Wait for the next message in `queue` and reject it without requeueing."""
    message = wait_for_message(channel, queue, auto_ack=False)
    channel.basic_reject(message.delivery_tag, requeue=False)
    return message


def death_summary(message: Message) -> list[tuple[str, str, int]]:
    return [(entry["queue"], entry["reason"], entry["count"]) for entry in x_death(message)]


# --------------------------------------------------------------------------- what is recorded


@pytest.mark.parametrize("trigger", ["reject", "nack", "message-ttl", "queue-ttl", "max-length"])
def test_dead_lettered_copy_carries_exact_death_headers(broker: BrokerProcess, trigger: str) -> None:
    reason = {
        "reject": "rejected",
        "nack": "rejected",
        "message-ttl": "expired",
        "queue-ttl": "expired",
        "max-length": "maxlen",
    }[trigger]
    extra: dict[str, Any] = {
        "queue-ttl": {"x-message-ttl": SHORT_TTL_MS},
        "max-length": {"x-max-length": 1},
    }.get(trigger, {})
    expiration = str(SHORT_TTL_MS) if trigger == "message-ttl" else None
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        queue = amqp.declare_queue(arguments=target.arguments("dead", **extra))
        since = utc_now()
        amqp.channel.basic_publish(
            "",
            queue,
            b"payload",
            BasicProperties(
                content_type="text/plain",
                message_id="id-1",
                delivery_mode=2,
                headers={"app": "kept"},
                expiration=expiration,
            ),
        )
        if trigger in ("reject", "nack"):
            [message] = get_messages(amqp.channel, queue, 1)
            if trigger == "reject":
                amqp.channel.basic_reject(message.delivery_tag, requeue=False)
            else:
                amqp.channel.basic_nack(message.delivery_tag, requeue=False)
        elif trigger == "max-length":
            amqp.channel.basic_publish("", queue, b"pushes the first one out")

        dead = wait_for_message(amqp.channel, target.queue)
        assert (dead.body, dead.exchange, dead.routing_key, dead.redelivered) == (
            b"payload",
            target.exchange,
            "dead",
            False,
        )
        props = dead.properties
        assert (props.content_type, props.message_id, props.delivery_mode) == ("text/plain", "id-1", 2)
        # The expiration is removed so the copy does not expire again; the entry keeps it.
        assert props.expiration is None
        assert deaths_without_time(dead, since) == [death(queue, reason, original_expiration=expiration)]
        assert headers_without_x_death(dead) == {"app": "kept", **first_and_last_death((queue, reason, ""))}


def test_nack_multiple_dead_letters_in_order(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        queue = amqp.declare_queue(arguments=target.arguments())
        publish_all(amqp.channel, queue, numbered("m", 4))
        got = get_messages(amqp.channel, queue, 3)
        amqp.channel.basic_nack(got[-1].delivery_tag, multiple=True, requeue=False)
        wait_for_count(amqp.channel, target.queue, 3)
        assert bodies(drain(amqp.channel, target.queue)) == numbered("m", 3)
        assert bodies(drain(amqp.channel, queue)) == [b"m-4"]


@pytest.mark.parametrize("dead_letter_routing_key", [None, "dead"])
def test_cc_keys_are_recorded_and_route_unless_a_routing_key_is_set(
    broker: BrokerProcess, dead_letter_routing_key: str | None
) -> None:
    with open_session(broker.url) as amqp:
        source = amqp.declare_exchange("direct", prefix="src")
        dlx = amqp.declare_exchange("direct", prefix="dlx")
        by_key = {}
        for key in ("k1", "k2", "k3", "dead"):
            by_key[key] = amqp.declare_queue(f"dlq-{key}")
            amqp.channel.queue_bind(by_key[key], dlx, key)
        arguments: dict[str, Any] = {"x-dead-letter-exchange": dlx}
        if dead_letter_routing_key is not None:
            arguments["x-dead-letter-routing-key"] = dead_letter_routing_key
        queue = amqp.declare_queue(arguments=arguments)
        amqp.channel.queue_bind(queue, source, "k1")
        amqp.channel.basic_publish(source, "k1", b"copied", BasicProperties(headers={"CC": ["k2"], "BCC": ["k3"]}))
        [message] = get_messages(amqp.channel, queue, 1)
        amqp.channel.basic_reject(message.delivery_tag, requeue=False)

        # Without a dead-letter routing key the message goes out with its routing key and
        # CC keys; with one, with that key only. RabbitMQ also reuses the BCC keys here;
        # Lavin drops them at publish (docs/queues.md lists the difference).
        routed = ["dead"] if dead_letter_routing_key else ["k1", "k2"]
        for key in routed:
            dead = wait_for_message(amqp.channel, by_key[key])
            # BCC is never recorded or shown; CC is dropped once the key is replaced.
            assert [entry["routing-keys"] for entry in x_death(dead)] == [["k1", "k2"]]
            assert x_death(dead)[0]["exchange"] == source
            headers = headers_without_x_death(dead)
            assert ("CC" in headers, "BCC" in headers) == (dead_letter_routing_key is None, False)
        round_trip(amqp.channel)
        for key in {"k1", "k2", "k3", "dead"} - set(routed):
            assert message_count(amqp.channel, by_key[key]) == 0


def test_same_queue_and_reason_again_increments_count_and_moves_to_the_front(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        first = amqp.track_queue(unique_name("ping"))
        second = amqp.track_queue(unique_name("pong"))
        for name, other in ((first, second), (second, first)):
            amqp.channel.queue_declare(
                name, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": other}
            )
        since = utc_now()
        amqp.channel.basic_publish("", first, b"bounce")

        reject_next(amqp.channel, first)
        at_second = reject_next(amqp.channel, second)
        assert deaths_without_time(at_second, since) == [death(first, "rejected")]

        # Rejections are never treated as a cycle, so the message comes back.
        at_first = reject_next(amqp.channel, first)
        assert deaths_without_time(at_first, since) == [
            death(second, "rejected", routing_keys=[second]),
            death(first, "rejected"),
        ]
        at_second_again = wait_for_message(amqp.channel, second)
        assert deaths_without_time(at_second_again, since) == [
            death(first, "rejected", count=2),
            death(second, "rejected", routing_keys=[second]),
        ]
        assert headers_without_x_death(at_second_again) == first_and_last_death((first, "rejected", ""))


# --------------------------------------------------------------------------- cycles


def test_queue_dead_lettering_to_itself_by_expiry_drops_the_message(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)  # a fanout exchange with a spy queue
        queue = amqp.declare_queue(arguments=target.arguments(**{"x-message-ttl": SHORT_TTL_MS}))
        amqp.channel.queue_bind(queue, target.exchange)
        amqp.channel.basic_publish("", queue, b"loop")
        # The expired message is routed back to its own queue, which is skipped; the spy
        # outside the cycle gets its copy.
        wait_for_count(amqp.channel, target.queue, 1)
        holds_for(
            lambda: [message_count(amqp.channel, q) for q in (queue, target.queue)] == [0, 1],
            CYCLE_WATCH,
            f"queue {queue!r} stays empty",
        )


def test_expiry_cycle_between_two_queues_is_dropped(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        dlx = amqp.declare_exchange("direct", prefix="dlx")
        # A spy sees every dead-lettered copy; it is outside the cycle.
        spy = amqp.declare_queue("spy")
        queues = {}
        for name, next_key in (("to-a", "to-b"), ("to-b", "to-a")):
            queues[name] = amqp.declare_queue(
                arguments={
                    "x-message-ttl": SHORT_TTL_MS,
                    "x-dead-letter-exchange": dlx,
                    "x-dead-letter-routing-key": next_key,
                }
            )
            amqp.channel.queue_bind(queues[name], dlx, name)
            amqp.channel.queue_bind(spy, dlx, name)
        a, b = queues["to-a"], queues["to-b"]
        amqp.channel.basic_publish("", a, b"round")

        # A expires it to B; B expires it towards A, which would close the cycle: A is
        # skipped, the spy still gets its copy, and then nothing moves any more.
        wait_for_count(amqp.channel, spy, 2)
        holds_for(
            lambda: [message_count(amqp.channel, q) for q in (a, b, spy)] == [0, 0, 2],
            CYCLE_WATCH,
            "the cycle stopped after one round",
        )
        copies = drain(amqp.channel, spy)
        assert [death_summary(copy) for copy in copies] == [
            [(a, "expired", 1)],
            [(b, "expired", 1), (a, "expired", 1)],
        ]


def test_cycle_with_a_rejection_in_it_is_allowed(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        rejecting = amqp.track_queue(unique_name("rejecting"))
        expiring = amqp.track_queue(unique_name("expiring"))
        amqp.channel.queue_declare(
            rejecting, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": expiring}
        )
        amqp.channel.queue_declare(
            expiring,
            arguments={
                "x-message-ttl": SHORT_TTL_MS,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": rejecting,
            },
        )
        since = utc_now()
        amqp.channel.basic_publish("", rejecting, b"again")

        reject_next(amqp.channel, rejecting)
        back = reject_next(amqp.channel, rejecting)
        assert deaths_without_time(back, since) == [
            death(expiring, "expired", routing_keys=[expiring]),
            death(rejecting, "rejected"),
        ]
        back_again = wait_for_message(amqp.channel, rejecting)
        assert deaths_without_time(back_again, since) == [
            death(expiring, "expired", count=2, routing_keys=[expiring]),
            death(rejecting, "rejected", count=2),
        ]
        assert headers_without_x_death(back_again) == first_and_last_death(
            (rejecting, "rejected", ""), (expiring, "expired", "")
        )


# --------------------------------------------------------------------------- targets


@pytest.mark.parametrize("exchange_exists", [True, False])
def test_publishes_are_confirmed_whether_or_not_the_dead_letter_exchange_exists(
    broker: BrokerProcess, exchange_exists: bool
) -> None:
    with open_session(broker.url) as amqp:
        target = dead_letter_target(amqp)
        dlx = target.exchange if exchange_exists else unique_name("missing-dlx")
        queue = amqp.declare_queue(arguments={"x-dead-letter-exchange": dlx, "x-max-length": 1})
        confirming = amqp.connection.channel()
        confirming.confirm_delivery()
        # pika raises NackError on a nack; both publishes must be acked.
        publish_all(confirming, queue, numbered("m", 2))
        [message] = get_messages(amqp.channel, queue, 1)
        amqp.channel.basic_reject(message.delivery_tag, requeue=False)
        round_trip(amqp.channel)
        assert message_count(amqp.channel, queue) == 0
        if exchange_exists:
            # The first was pushed out by the second, then the second was rejected.
            wait_for_count(amqp.channel, target.queue, 2)
            assert bodies(drain(amqp.channel, target.queue)) == numbered("m", 2)
        else:
            assert message_count(amqp.channel, target.queue) == 0
        assert amqp.connection.is_open and confirming.is_open


def test_dead_letter_routing_key_without_exchange_is_precondition_failed(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.track_queue(unique_name("q"))
        with closes_channel(
            406, invalid_arg_text("x-dead-letter-routing-key", queue, "routing_key_but_no_dlx_defined")
        ):
            amqp.channel.queue_declare(queue, arguments={"x-dead-letter-routing-key": "rk"})
        assert not exists(amqp.connection, "queue", queue)
