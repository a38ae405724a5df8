"""queue.declare / bind / unbind / purge / delete, exclusive and auto-delete queues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import (
    DEFAULT_EXCHANGE_REFUSED,
    Consumer,
    RawClient,
    bodies,
    closes_channel,
    declare_ok,
    drain,
    exists,
    get_messages,
    inequivalent_text,
    locked_queue_text,
    message_count,
    not_found_text,
    numbered,
    open_session,
    passive_reply_code,
    process_until,
    publish_all,
    resource,
    round_trip,
    unique_name,
    wait_until,
)
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel

pytestmark = pytest.mark.timeout(60)


def test_declare_returns_the_name_and_empty_counts(broker: BrokerProcess) -> None:
    name = unique_name("q")
    with open_session(broker.url) as amqp:
        amqp.track_queue(name)
        method = amqp.channel.queue_declare(name).method
        assert (method.queue, method.message_count, method.consumer_count) == (name, 0, 0)


def test_declare_ok_counts_ready_messages_and_consumers(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        assert declare_ok(amqp.channel, queue) == (3, 0)

        consuming = amqp.connection.channel()
        consuming.basic_qos(prefetch_count=1)
        Consumer(consuming, queue).wait_for(1)
        # The delivered, unacknowledged message is not counted; the consumer is.
        assert declare_ok(amqp.channel, queue) == (2, 1)
        # A non-passive redeclare reports the same.
        method = amqp.channel.queue_declare(queue).method
        assert (method.message_count, method.consumer_count) == (2, 1)


@pytest.mark.parametrize(
    ("first", "second", "arg", "received", "current"),
    [
        pytest.param({"durable": False}, {"durable": True}, "durable", "'true'", "'false'", id="durable"),
        pytest.param({"durable": True}, {"durable": False}, "durable", "'false'", "'true'", id="not-durable"),
        pytest.param(
            {"auto_delete": False}, {"auto_delete": True}, "auto_delete", "'true'", "'false'", id="auto_delete"
        ),
        pytest.param(
            {"arguments": {"x-message-ttl": 1000}},
            {"arguments": {"x-message-ttl": 2000}},
            "x-message-ttl",
            "the value '2000' of type 'signedint'",
            "the value '1000' of type 'signedint'",
            id="argument-changed",
        ),
        pytest.param(
            {},
            {"arguments": {"x-max-length": 10}},
            "x-max-length",
            "the value '10' of type 'signedint'",
            "none",
            id="argument-added",
        ),
        pytest.param(
            {"arguments": {"x-max-length": 10}},
            {},
            "x-max-length",
            "none",
            "the value '10' of type 'signedint'",
            id="argument-removed",
        ),
    ],
)
def test_redeclare_with_different_property_is_precondition_failed(
    broker: BrokerProcess,
    first: dict[str, Any],
    second: dict[str, Any],
    arg: str,
    received: str,
    current: str,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(**first)
        with closes_channel(406, inequivalent_text("queue", queue, arg, received, current)):
            amqp.channel.queue_declare(queue, **second)
        amqp.new_channel().queue_declare(queue, **first)


@pytest.mark.parametrize(
    ("first", "second", "arg", "received", "current"),
    [
        pytest.param(
            {"x-overflow": "reject-publish", "x-message-ttl": 1000},
            {"x-overflow": "drop-head", "x-message-ttl": 2000},
            "x-message-ttl",
            "the value '2000' of type 'signedint'",
            "the value '1000' of type 'signedint'",
            id="ttl-before-overflow",
        ),
        pytest.param(
            {"x-dead-letter-exchange": "a", "x-dead-letter-routing-key": "k"},
            {"x-dead-letter-exchange": "b", "x-dead-letter-routing-key": "j"},
            "x-dead-letter-exchange",
            "the value 'b' of type 'longstr'",
            "the value 'a' of type 'longstr'",
            id="exchange-before-routing-key",
        ),
    ],
)
def test_a_redeclare_differing_in_several_arguments_names_the_first_in_table_order(
    broker: BrokerProcess, first: dict[str, Any], second: dict[str, Any], arg: str, received: str, current: str
) -> None:
    # The order of lavin.broker.policy.queue_arguments.QUEUE_ARGUMENTS.
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments=first)
        with closes_channel(406, inequivalent_text("queue", queue, arg, received, current)):
            amqp.channel.queue_declare(queue, arguments=second)


@pytest.mark.parametrize(
    ("arguments", "reply_text"),
    [
        pytest.param(
            {"x-message-ttl": -1, "x-overflow": "bad"},
            "invalid arg 'x-overflow' for {q}: invalid_overflow",
            id="overflow",
        ),
        pytest.param(
            {"x-dead-letter-exchange": 7, "x-dead-letter-routing-key": 8},
            "invalid arg 'x-dead-letter-routing-key' for {q}: {{unacceptable_type,signedint}}",
            id="routing-key-before-exchange",
        ),
        pytest.param(
            {"x-queue-type": "quorum", "x-message-ttl": -1, "x-max-priority": 5},
            "invalid arg 'x-max-priority' for {q}",
            id="quorum-refusal-before-ttl",
        ),
        pytest.param(
            {"x-queue-type": "quorum", "x-queue-mode": "lazy", "x-delivery-limit": -1},
            "invalid arg 'x-delivery-limit' for {q}: {{value_negative,-1}}",
            id="delivery-limit-before-quorum-refusal",
        ),
    ],
)
def test_a_declare_with_several_invalid_arguments_names_the_first_checked(
    broker: BrokerProcess, arguments: dict[str, Any], reply_text: str
) -> None:
    # lavin.broker.policy.arguments.DECLARE_CHECK_ORDER.
    with open_session(broker.url) as amqp:
        queue = unique_name("several-invalid")
        text = reply_text.format(q=resource("queue", queue))
        with closes_channel(406, f"PRECONDITION_FAILED - {text}"):
            amqp.channel.queue_declare(queue, durable=True, arguments=arguments)
        assert not exists(amqp.connection, "queue", queue)


def test_redeclare_ignores_arguments_the_broker_does_not_know(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(arguments={"x-custom": "one"})
        amqp.channel.queue_declare(queue, arguments={"x-custom": "two"})
        amqp.channel.queue_declare(queue)
        assert amqp.channel.is_open


@pytest.mark.parametrize(("first_exclusive", "second_exclusive"), [(False, True), (True, False)])
def test_redeclare_with_different_exclusive_is_resource_locked(
    broker: BrokerProcess, first_exclusive: bool, second_exclusive: bool
) -> None:
    # RabbitMQ checks exclusivity before the other properties, and answers 405, not 406.
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(exclusive=first_exclusive)
        with closes_channel(405, locked_queue_text(queue)):
            amqp.channel.queue_declare(queue, exclusive=second_exclusive)


def test_passive_declare_of_missing_queue_is_not_found(broker: BrokerProcess) -> None:
    name = unique_name("missing")
    with open_session(broker.url) as amqp:
        with closes_channel(404, not_found_text("queue", name)):
            amqp.channel.queue_declare(name, passive=True)
        assert amqp.connection.is_open


def test_passive_declare_ignores_flags_and_arguments(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.queue_declare(queue, passive=True, durable=True, auto_delete=True, arguments={"x-max-length": 1})
        assert amqp.channel.is_open


def test_reserved_amq_prefix_is_access_refused(broker: BrokerProcess) -> None:
    name = f"amq.{unique_name('q')}"
    with open_session(broker.url) as amqp:
        amqp.track_queue(name)
        with closes_channel(403, f"ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'"):
            amqp.channel.queue_declare(name)
        assert not exists(amqp.connection, "queue", name)


def test_server_named_queues_are_unique_and_usable(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        first = amqp.track_queue(amqp.channel.queue_declare("").method.queue)
        second = amqp.track_queue(amqp.channel.queue_declare("").method.queue)
        assert first.startswith("amq.gen-")
        assert second.startswith("amq.gen-")
        assert first != second
        amqp.channel.basic_publish("", first, b"to-generated")
        assert bodies(drain(amqp.channel, first)) == [b"to-generated"]


# --------------------------------------------------------------------------- exclusive queues


def _consume(channel: BlockingChannel, queue: str) -> None:
    channel.basic_consume(queue, lambda *_: None)


EXCLUSIVE_OPERATIONS: dict[str, Callable[[BlockingChannel, str], object]] = {
    "declare": lambda channel, queue: channel.queue_declare(queue),
    "declare-exclusive": lambda channel, queue: channel.queue_declare(queue, exclusive=True),
    "passive-declare": lambda channel, queue: channel.queue_declare(queue, passive=True),
    "consume": _consume,
    "get": lambda channel, queue: channel.basic_get(queue),
    "bind": lambda channel, queue: channel.queue_bind(queue, "amq.direct", queue),
    "unbind": lambda channel, queue: channel.queue_unbind(queue, "amq.direct", queue),
    "purge": lambda channel, queue: channel.queue_purge(queue),
    "delete": lambda channel, queue: channel.queue_delete(queue),
}


@pytest.mark.parametrize("operation", list(EXCLUSIVE_OPERATIONS))
def test_exclusive_queue_is_locked_to_other_connections(broker: BrokerProcess, operation: str) -> None:
    with open_session(broker.url) as owner, open_session(broker.url) as other:
        queue = owner.declare_queue(exclusive=True)
        owner.channel.queue_bind(queue, "amq.direct", queue)
        with closes_channel(405, locked_queue_text(queue)):
            EXCLUSIVE_OPERATIONS[operation](other.channel, queue)
        # The owner still has its queue.
        assert declare_ok(owner.channel, queue) == (0, 0)


def test_exclusive_queue_is_shared_by_the_channels_of_its_connection(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(exclusive=True)
        other_channel = amqp.connection.channel()
        other_channel.basic_publish("", queue, b"shared")
        assert bodies(drain(other_channel, queue)) == [b"shared"]


def test_exclusive_queue_is_deleted_when_its_connection_closes(broker: BrokerProcess) -> None:
    with open_session(broker.url) as observer, open_session(broker.url) as owner:
        queue = owner.declare_queue(exclusive=True)
        assert passive_reply_code(observer.connection, "queue", queue) == 405
        owner.connection.close()
        wait_until(
            lambda: passive_reply_code(observer.connection, "queue", queue) == 404, f"exclusive queue {queue} is gone"
        )


# --------------------------------------------------------------------------- auto-delete queues


def test_auto_delete_queue_is_deleted_when_its_last_consumer_cancels(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(auto_delete=True)
        # Never consumed from: it stays.
        assert exists(amqp.connection, "queue", queue)
        first, second = Consumer(amqp.channel, queue), Consumer(amqp.channel, queue)
        first.cancel()
        assert exists(amqp.connection, "queue", queue)
        second.cancel()
        wait_until(lambda: not exists(amqp.connection, "queue", queue), f"auto-delete queue {queue} is gone")


def test_auto_delete_queue_is_deleted_when_its_consumer_channel_closes(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(auto_delete=True)
        consuming = amqp.connection.channel()
        Consumer(consuming, queue)
        consuming.close()
        wait_until(lambda: not exists(amqp.connection, "queue", queue), f"auto-delete queue {queue} is gone")


# --------------------------------------------------------------------------- bindings


def test_bind_routes_and_unbind_stops_routing(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = amqp.declare_exchange("direct")
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange, "key")
        amqp.channel.basic_publish(exchange, "key", b"bound")
        amqp.channel.basic_publish(exchange, "other", b"other-key")
        amqp.channel.queue_unbind(queue, exchange, "key")
        amqp.channel.basic_publish(exchange, "key", b"after-unbind")
        assert bodies(drain(amqp.channel, queue)) == [b"bound"]


@pytest.mark.parametrize("missing", ["queue", "exchange"])
def test_bind_with_a_missing_queue_or_exchange_is_not_found(broker: BrokerProcess, missing: str) -> None:
    """Unbind answers unbind-ok instead (tests/test_conformance_channel.py)."""
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue() if missing != "queue" else unique_name("missing")
        exchange = amqp.declare_exchange() if missing != "exchange" else unique_name("missing")
        absent = queue if missing == "queue" else exchange
        with closes_channel(404, not_found_text(missing, absent)):  # type: ignore[arg-type]
            amqp.channel.queue_bind(queue, exchange, "key")


@pytest.mark.parametrize("operation", ["bind", "unbind"])
def test_binding_to_the_default_exchange_is_access_refused(broker: BrokerProcess, operation: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        method = amqp.channel.queue_bind if operation == "bind" else amqp.channel.queue_unbind
        with closes_channel(403, DEFAULT_EXCHANGE_REFUSED):
            method(queue, "", queue)


def test_unbinding_a_binding_that_does_not_exist_succeeds(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.queue_unbind(queue, "amq.direct", "never-bound")
        assert amqp.channel.is_open


# --------------------------------------------------------------------------- purge and delete


def test_purge_returns_the_ready_count_and_leaves_unacked_messages(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 5))
        holder = amqp.connection.channel()
        [held] = get_messages(holder, queue, 1)
        assert amqp.channel.queue_purge(queue).method.message_count == 4
        assert message_count(amqp.channel, queue) == 0
        holder.close()  # the unacknowledged message survives the purge and comes back
        assert bodies(drain(amqp.channel, queue)) == [held.body]


def test_delete_returns_the_message_count(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        assert amqp.channel.queue_delete(queue).method.message_count == 3
        assert not exists(amqp.connection, "queue", queue)


def test_delete_of_missing_queue_succeeds_with_zero(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        assert amqp.channel.queue_delete(unique_name("missing")).method.message_count == 0
        assert amqp.channel.is_open


def test_delete_if_unused_refuses_a_queue_with_consumers(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        Consumer(amqp.connection.channel(), queue)
        with closes_channel(406, f"PRECONDITION_FAILED - {resource('queue', queue)} in use"):
            amqp.channel.queue_delete(queue, if_unused=True)
        assert exists(amqp.connection, "queue", queue)


def test_delete_if_empty_refuses_a_queue_with_messages(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"still here")
        with closes_channel(406, f"PRECONDITION_FAILED - {resource('queue', queue)} not empty"):
            amqp.channel.queue_delete(queue, if_empty=True)
        channel = amqp.new_channel()
        assert message_count(channel, queue) == 1
        # Without consumers, if_unused alone does not stop the delete.
        assert channel.queue_delete(queue, if_unused=True).method.message_count == 1


def test_consumer_is_cancelled_when_its_queue_is_deleted(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        cancelled: list[str] = []
        amqp.channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        consumer = Consumer(amqp.channel, queue)
        amqp.connection.channel().queue_delete(queue)
        process_until(amqp.connection, lambda: bool(cancelled), "basic.cancel arrived")
        assert cancelled == [consumer.tag]
        # The broker cancels the consumer but leaves the channel open.
        assert amqp.channel.is_open
        round_trip(amqp.channel)


def test_delete_ok_comes_before_the_cancel_of_a_consumer_on_the_deleting_channel(broker: BrokerProcess) -> None:
    """RabbitMQ's order: py-amqp raises ConsumerCancelled inside queue_delete otherwise."""
    queue = unique_name("q-delete-order")
    with RawClient(broker.port) as raw:
        channel = raw.open_channel()
        raw.call(channel, commands.Queue.Declare(queue=queue), commands.Queue.DeclareOk)
        raw.call(channel, commands.Basic.Consume(queue=queue, consumer_tag="own"), commands.Basic.ConsumeOk)
        assert raw.call(channel, commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk).message_count == 0
        assert raw.expect(channel, commands.Basic.Cancel).consumer_tag == "own"
        raw.call(channel, commands.Basic.Qos(), commands.Basic.QosOk)  # the channel stays open


def test_reply_text_longer_than_255_bytes_is_cut_with_an_ellipsis(broker: BrokerProcess) -> None:
    name = "q" * 250
    full = not_found_text("queue", name)
    with open_session(broker.url) as amqp, closes_channel(404, full[:252] + "..."):
        amqp.channel.queue_declare(name, passive=True)


def test_nowait_queue_methods_send_no_reply(broker: BrokerProcess) -> None:
    queue = unique_name("q-nowait")
    with RawClient(broker.port) as raw:
        channel = raw.open_channel()
        raw.send(channel, commands.Queue.Declare(queue=queue, nowait=True))
        raw.send(channel, commands.Queue.Bind(queue=queue, exchange="amq.fanout", nowait=True))
        raw.publish(channel, b"one", exchange="amq.fanout")
        raw.publish(channel, b"two", routing_key=queue)
        # The next frame must answer this passive declare: no *-ok came for the nowait ones.
        declared = raw.call(channel, commands.Queue.Declare(queue=queue, passive=True), commands.Queue.DeclareOk)
        assert declared.message_count == 2
        raw.send(channel, commands.Queue.Purge(queue=queue, nowait=True))
        raw.send(channel, commands.Queue.Delete(queue=queue, nowait=True))
        raw.call(channel, commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
        raw.send(channel, commands.Queue.Declare(queue=queue, passive=True, nowait=True))
        close = raw.expect(channel, commands.Channel.Close)
        assert (close.reply_code, close.reply_text) == (404, not_found_text("queue", queue))
