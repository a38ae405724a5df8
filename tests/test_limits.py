"""Queue length limits: x-max-length, x-max-length-bytes and the x-overflow behaviours."""

from __future__ import annotations

from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import (
    Session,
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
from pika.exceptions import NackError
from pika.spec import BasicProperties
from queue_helpers import (
    NOT_AN_INTEGER,
    DeadLetterTarget,
    dead_letter_target,
    invalid_arg_text,
    unacceptable_type,
    wait_for_count,
    x_death,
)

pytestmark = pytest.mark.timeout(60)


def limited_queue(amqp: Session, **arguments: Any) -> tuple[str, DeadLetterTarget]:
    """A queue with the given x- arguments that dead-letters into a fresh target."""
    target = dead_letter_target(amqp)
    return amqp.declare_queue(arguments=target.arguments(**arguments)), target


def dead_lettered(amqp: Session, target: DeadLetterTarget, count: int) -> list[bytes]:
    """The bodies of the `count` messages dead-lettered into `target`, each checked to be
    there for exceeding the queue's length."""
    wait_for_count(amqp.channel, target.queue, count)
    messages = drain(amqp.channel, target.queue)
    assert [x_death(message)[0]["reason"] for message in messages] == ["maxlen"] * count
    return bodies(messages)


# --------------------------------------------------------------------------- drop-head


@pytest.mark.parametrize("overflow", [None, "drop-head"])
def test_max_length_drops_the_oldest_messages(broker: BrokerProcess, overflow: str | None) -> None:
    arguments: dict[str, Any] = {"x-max-length": 3}
    if overflow is not None:
        arguments["x-overflow"] = overflow
    with open_session(broker.url) as amqp:
        queue, target = limited_queue(amqp, **arguments)
        amqp.channel.confirm_delivery()
        publish_all(amqp.channel, queue, numbered("m", 5))
        assert dead_lettered(amqp, target, 2) == [b"m-1", b"m-2"]
        assert bodies(drain(amqp.channel, queue)) == [b"m-3", b"m-4", b"m-5"]


def test_max_length_counts_only_ready_messages(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue, target = limited_queue(amqp, **{"x-max-length": 2})
        publish_all(amqp.channel, queue, numbered("m", 2))
        holder = amqp.connection.channel()
        get_messages(holder, queue, 2)
        publish_all(amqp.channel, queue, [b"m-3", b"m-4"])
        round_trip(amqp.channel)
        assert message_count(amqp.channel, queue) == 2
        assert message_count(amqp.channel, target.queue) == 0


def test_max_length_bytes_counts_body_bytes_only(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue, target = limited_queue(amqp, **{"x-max-length-bytes": 10})
        # Large headers do not count towards the limit.
        heavy = BasicProperties(headers={"padding": "p" * 1000}, content_type="text/plain")
        publish_all(amqp.channel, queue, [b"aaaa", b"bbbb"], properties=heavy)
        round_trip(amqp.channel)
        assert message_count(amqp.channel, queue) == 2
        amqp.channel.basic_publish("", queue, b"cccc")
        assert dead_lettered(amqp, target, 1) == [b"aaaa"]
        assert message_count(amqp.channel, queue) == 2

        # A body larger than the limit pushes out everything, itself included.
        amqp.channel.basic_publish("", queue, b"x" * 11)
        assert dead_lettered(amqp, target, 3) == [b"bbbb", b"cccc", b"x" * 11]
        assert message_count(amqp.channel, queue) == 0


# --------------------------------------------------------------------------- reject-publish


def test_reject_publish_nacks_the_publish_and_keeps_the_queue(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue, target = limited_queue(amqp, **{"x-max-length": 2, "x-overflow": "reject-publish"})
        confirming = amqp.connection.channel()
        confirming.confirm_delivery()
        publish_all(confirming, queue, numbered("m", 2))
        with pytest.raises(NackError):
            confirming.basic_publish("", queue, b"m-3")
        assert confirming.is_open
        # Plain reject-publish never dead-letters.
        assert message_count(amqp.channel, target.queue) == 0

        # Room again after one is consumed.
        [first] = get_messages(amqp.channel, queue, 1, auto_ack=True)
        confirming.basic_publish("", queue, b"m-4")
        assert bodies([first, *drain(amqp.channel, queue)]) == [b"m-1", b"m-2", b"m-4"]


def test_reject_publish_without_confirms_drops_silently(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
        publish_all(amqp.channel, queue, numbered("m", 4))
        round_trip(amqp.channel)
        assert amqp.channel.is_open
        assert bodies(drain(amqp.channel, queue)) == [b"m-1", b"m-2"]


def test_reject_publish_dlx_nacks_and_dead_letters(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue, target = limited_queue(amqp, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
        confirming = amqp.connection.channel()
        confirming.confirm_delivery()
        confirming.basic_publish("", queue, b"kept")
        with pytest.raises(NackError):
            confirming.basic_publish("", queue, b"refused")
        assert dead_lettered(amqp, target, 1) == [b"refused"]
        assert bodies(drain(amqp.channel, queue)) == [b"kept"]


@pytest.mark.parametrize(
    ("overflow", "nacked"), [("drop-head", False), ("reject-publish", True), ("reject-publish-dlx", True)]
)
def test_max_length_zero_keeps_nothing(broker: BrokerProcess, overflow: str, nacked: bool) -> None:
    with open_session(broker.url) as amqp:
        queue, target = limited_queue(amqp, **{"x-max-length": 0, "x-overflow": overflow})
        confirming = amqp.connection.channel()
        confirming.confirm_delivery()
        if nacked:
            with pytest.raises(NackError):
                confirming.basic_publish("", queue, b"nowhere")
        else:
            confirming.basic_publish("", queue, b"nowhere")
        assert message_count(amqp.channel, queue) == 0
        if overflow == "reject-publish":
            round_trip(amqp.channel)
            assert message_count(amqp.channel, target.queue) == 0
        else:
            assert dead_lettered(amqp, target, 1) == [b"nowhere"]


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("arg", "value", "error"),
    [
        ("x-overflow", "drop-tail", "invalid_overflow"),
        ("x-overflow", 5, unacceptable_type("signedint")),
        ("x-max-length", -1, "{value_negative,-1}"),
        ("x-max-length", "ten", NOT_AN_INTEGER),
        ("x-max-length-bytes", -1, "{value_negative,-1}"),
        ("x-max-length-bytes", "ten", NOT_AN_INTEGER),
    ],
)
def test_invalid_length_arguments_are_precondition_failed(
    broker: BrokerProcess, arg: str, value: object, error: str
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.track_queue(unique_name("bad-limit"))
        with closes_channel(406, invalid_arg_text(arg, queue, error)):
            amqp.channel.queue_declare(queue, arguments={arg: value})
        assert not exists(amqp.connection, "queue", queue)
