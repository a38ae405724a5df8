"""exchange.declare / delete / bind / unbind, and publishing to exchanges, as RabbitMQ does them."""

from __future__ import annotations

from typing import Any

import pika.spec
import pytest
from broker_process import BrokerProcess
from helpers import (
    DEFAULT_EXCHANGE_REFUSED,
    RawClient,
    bodies,
    closes_channel,
    drain,
    exists,
    inequivalent_text,
    message_count,
    not_found_text,
    open_session,
    resource,
    round_trip,
    unique_name,
)
from pamqp import commands
from pika.exceptions import ConnectionClosedByBroker

pytestmark = pytest.mark.timeout(60)

BUILTIN_TYPES = ["direct", "fanout", "topic", "headers"]


@pytest.mark.parametrize("exchange_type", BUILTIN_TYPES)
def test_declare_each_builtin_type(broker: BrokerProcess, exchange_type: str) -> None:
    with open_session(broker.url) as amqp:
        name = amqp.declare_exchange(exchange_type)
        amqp.channel.exchange_declare(name, exchange_type)  # identical redeclare is fine
        assert exists(amqp.connection, "exchange", name)


@pytest.mark.parametrize(
    ("name", "exchange_type"),
    [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ],
)
def test_predeclared_exchanges_exist_and_accept_equivalent_redeclare(
    broker: BrokerProcess, name: str, exchange_type: str
) -> None:
    with open_session(broker.url) as amqp:
        amqp.channel.exchange_declare(name, passive=True)
        # The reserved prefix only forbids creating exchanges, not redeclaring existing ones.
        amqp.channel.exchange_declare(name, exchange_type, durable=True)


def test_unknown_exchange_type_closes_the_connection(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        with pytest.raises(ConnectionClosedByBroker) as info:
            amqp.channel.exchange_declare(unique_name("x"), "foo")
        # A hard error in RabbitMQ 3.x. Its wording depends on whether the type name happens
        # to be an atom the Erlang VM knows; both are RabbitMQ's.
        assert info.value.reply_code == 503
        assert info.value.reply_text in (
            "COMMAND_INVALID - invalid exchange type 'foo'",
            "COMMAND_INVALID - unknown exchange type 'foo'",
        )
        assert not amqp.connection.is_open


def test_passive_declare_of_missing_exchange_is_not_found(broker: BrokerProcess) -> None:
    name = unique_name("missing")
    with open_session(broker.url) as amqp:
        with closes_channel(404, not_found_text("exchange", name)):
            amqp.channel.exchange_declare(name, passive=True)
        # Only the channel is closed; the connection goes on.
        assert amqp.connection.is_open
        assert not exists(amqp.connection, "exchange", name)


@pytest.mark.parametrize(
    ("first", "second", "arg", "received", "current"),
    [
        pytest.param(
            {"exchange_type": "direct"}, {"exchange_type": "fanout"}, "type", "'fanout'", "'direct'", id="type"
        ),
        pytest.param({"durable": False}, {"durable": True}, "durable", "'true'", "'false'", id="durable"),
        pytest.param(
            {"auto_delete": False}, {"auto_delete": True}, "auto_delete", "'true'", "'false'", id="auto_delete"
        ),
        pytest.param({"internal": False}, {"internal": True}, "internal", "'true'", "'false'", id="internal"),
        pytest.param(
            {"arguments": {"alternate-exchange": "ae-one"}},
            {"arguments": {"alternate-exchange": "ae-two"}},
            "alternate-exchange",
            "the value 'ae-two' of type 'longstr'",
            "the value 'ae-one' of type 'longstr'",
            id="alternate-exchange-changed",
        ),
        pytest.param(
            {},
            {"arguments": {"alternate-exchange": "ae-two"}},
            "alternate-exchange",
            "the value 'ae-two' of type 'longstr'",
            "none",
            id="alternate-exchange-added",
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
        name = amqp.declare_exchange(**{"exchange_type": "direct", **first})
        with closes_channel(406, inequivalent_text("exchange", name, arg, received, current)):
            amqp.channel.exchange_declare(name, **{"exchange_type": "direct", **second})
        # The original declaration is untouched.
        amqp.new_channel().exchange_declare(name, **{"exchange_type": "direct", **first})


def test_redeclare_ignores_arguments_other_than_alternate_exchange(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        name = amqp.declare_exchange("topic", arguments={"x-custom": "one"})
        amqp.channel.exchange_declare(name, "topic", arguments={"x-custom": "two"})
        amqp.channel.exchange_declare(name, "topic")
        assert amqp.channel.is_open


def test_passive_declare_ignores_type_and_flags(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        name = amqp.declare_exchange("direct")
        amqp.channel.exchange_declare(name, "fanout", passive=True, durable=True, auto_delete=True, internal=True)
        assert amqp.channel.is_open


def test_reserved_amq_prefix_is_access_refused(broker: BrokerProcess) -> None:
    name = f"amq.{unique_name('x')}"
    with open_session(broker.url) as amqp:
        amqp.track_exchange(name)
        with closes_channel(403, f"ACCESS_REFUSED - exchange name '{name}' contains reserved prefix 'amq.*'"):
            amqp.channel.exchange_declare(name, "direct")
        assert not exists(amqp.connection, "exchange", name)


def test_declaring_the_default_exchange_is_access_refused(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, closes_channel(403, DEFAULT_EXCHANGE_REFUSED):
        amqp.channel.exchange_declare("", "direct")


def test_delete_if_unused_refuses_a_bound_exchange(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = amqp.declare_exchange("direct")
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange, "key")
        with closes_channel(406, f"PRECONDITION_FAILED - {resource('exchange', exchange)} in use"):
            amqp.channel.exchange_delete(exchange, if_unused=True)
        channel = amqp.new_channel()
        assert exists(amqp.connection, "exchange", exchange)
        channel.queue_unbind(queue, exchange, "key")
        channel.exchange_delete(exchange, if_unused=True)
        assert not exists(amqp.connection, "exchange", exchange)


def test_delete_removes_the_exchange_and_its_bindings(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = amqp.declare_exchange("fanout")
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange)
        amqp.channel.exchange_delete(exchange)
        assert not exists(amqp.connection, "exchange", exchange)
        # A new exchange under the same name starts without the old binding.
        amqp.channel.exchange_declare(exchange, "fanout")
        amqp.channel.basic_publish(exchange, "", b"lost")
        assert message_count(amqp.channel, queue) == 0


def test_delete_of_missing_exchange_succeeds(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        reply = amqp.channel.exchange_delete(unique_name("missing"))
        assert isinstance(reply.method, pika.spec.Exchange.DeleteOk)
        assert amqp.channel.is_open


def test_deleting_the_default_exchange_is_access_refused(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, closes_channel(403, DEFAULT_EXCHANGE_REFUSED):
        amqp.channel.exchange_delete("")


@pytest.mark.parametrize("name", ["amq.direct", "amq.topic"])
def test_deleting_an_amq_exchange_is_access_refused(broker: BrokerProcess, name: str) -> None:
    with open_session(broker.url) as amqp:
        with closes_channel(403, f"ACCESS_REFUSED - deletion of system {resource('exchange', name)} not allowed"):
            amqp.channel.exchange_delete(name)
        assert exists(amqp.connection, "exchange", name)


def test_auto_delete_exchange_goes_when_its_last_binding_is_removed(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        exchange = amqp.declare_exchange("direct", auto_delete=True)
        first, second = amqp.declare_queue(), amqp.declare_queue()
        # Never bound yet: it stays.
        assert exists(amqp.connection, "exchange", exchange)
        amqp.channel.queue_bind(first, exchange, "a")
        amqp.channel.queue_bind(second, exchange, "b")
        amqp.channel.queue_unbind(first, exchange, "a")
        assert exists(amqp.connection, "exchange", exchange)
        amqp.channel.queue_unbind(second, exchange, "b")
        assert not exists(amqp.connection, "exchange", exchange)


def test_auto_delete_exchange_goes_when_its_only_bound_queue_is_deleted(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        exchange = amqp.declare_exchange("fanout", auto_delete=True)
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange)
        amqp.channel.queue_delete(queue)
        assert not exists(amqp.connection, "exchange", exchange)


def test_publishing_to_an_internal_exchange_is_access_refused(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = amqp.declare_exchange("fanout", internal=True)
        with closes_channel(403, f"ACCESS_REFUSED - cannot publish to internal {resource('exchange', exchange)}"):
            amqp.channel.basic_publish(exchange, "", b"nope")
            round_trip(amqp.channel)


def test_internal_exchange_routes_what_reaches_it_through_an_exchange_binding(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        front = amqp.declare_exchange("fanout")
        internal = amqp.declare_exchange("fanout", internal=True)
        queue = amqp.declare_queue()
        amqp.channel.exchange_bind(destination=internal, source=front)
        amqp.channel.queue_bind(queue, internal)
        amqp.channel.basic_publish(front, "", b"via-front")
        assert bodies(drain(amqp.channel, queue)) == [b"via-front"]


def test_publishing_to_a_missing_exchange_closes_the_channel(broker: BrokerProcess) -> None:
    name = unique_name("missing")
    with open_session(broker.url) as amqp:
        with closes_channel(404, not_found_text("exchange", name)):
            amqp.channel.basic_publish(name, "key", b"lost")
            round_trip(amqp.channel)
        assert amqp.connection.is_open


def test_exchange_binding_routes_and_unbinding_stops_it(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        source = amqp.declare_exchange("topic")
        destination = amqp.declare_exchange("direct")
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, destination, "orders.new")
        amqp.channel.exchange_bind(destination=destination, source=source, routing_key="orders.*")

        amqp.channel.basic_publish(source, "orders.new", b"routed")
        amqp.channel.basic_publish(source, "orders.old", b"matches source, not destination")
        amqp.channel.basic_publish(source, "users.new", b"matches nothing")
        assert bodies(drain(amqp.channel, queue)) == [b"routed"]

        amqp.channel.exchange_unbind(destination=destination, source=source, routing_key="orders.*")
        amqp.channel.basic_publish(source, "orders.new", b"unbound")
        assert message_count(amqp.channel, queue) == 0


def test_message_routed_through_an_exchange_binding_keeps_its_original_exchange(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        source = amqp.declare_exchange("fanout")
        destination = amqp.declare_exchange("fanout")
        queue = amqp.declare_queue()
        amqp.channel.exchange_bind(destination=destination, source=source)
        amqp.channel.queue_bind(queue, destination)
        amqp.channel.basic_publish(source, "rk", b"hop")
        [message] = drain(amqp.channel, queue)
        assert (message.exchange, message.routing_key) == (source, "rk")


@pytest.mark.parametrize("missing", ["source", "destination"])
def test_exchange_bind_with_a_missing_exchange_is_not_found(broker: BrokerProcess, missing: str) -> None:
    """Unbind answers unbind-ok instead (tests/test_conformance_channel.py)."""
    with open_session(broker.url) as amqp:
        present = amqp.declare_exchange("direct")
        absent = unique_name("missing")
        names = {"source": present, "destination": present, missing: absent}
        with closes_channel(404, not_found_text("exchange", absent)):
            amqp.channel.exchange_bind(destination=names["destination"], source=names["source"], routing_key="k")


@pytest.mark.parametrize("side", ["source", "destination"])
def test_exchange_binding_with_the_default_exchange_is_access_refused(broker: BrokerProcess, side: str) -> None:
    with open_session(broker.url) as amqp:
        other = amqp.declare_exchange("direct")
        names = {"source": other, "destination": other, side: ""}
        with closes_channel(403, DEFAULT_EXCHANGE_REFUSED):
            amqp.channel.exchange_bind(destination=names["destination"], source=names["source"])


def test_unbinding_a_binding_that_does_not_exist_succeeds(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        source = amqp.declare_exchange("direct")
        destination = amqp.declare_exchange("direct")
        amqp.channel.exchange_unbind(destination=destination, source=source, routing_key="never")
        assert amqp.channel.is_open


def test_nowait_exchange_methods_send_no_reply(broker: BrokerProcess) -> None:
    exchange, other = unique_name("x-nowait"), unique_name("x-nowait")
    with RawClient(broker.port) as raw:
        channel = raw.open_channel()
        raw.send(channel, commands.Exchange.Declare(exchange=exchange, exchange_type="fanout", nowait=True))
        raw.send(channel, commands.Exchange.Declare(exchange=other, exchange_type="fanout", nowait=True))
        raw.send(channel, commands.Exchange.Bind(destination=other, source=exchange, nowait=True))
        raw.send(channel, commands.Exchange.Unbind(destination=other, source=exchange, nowait=True))
        raw.send(channel, commands.Exchange.Delete(exchange=other, nowait=True))
        # The next frame must answer this passive declare: no *-ok came for the nowait ones.
        raw.call(channel, commands.Exchange.Declare(exchange=exchange, passive=True), commands.Exchange.DeclareOk)
        raw.call(channel, commands.Exchange.Delete(exchange=exchange), commands.Exchange.DeleteOk)
        raw.call(channel, commands.Basic.Qos(), commands.Basic.QosOk)

        # Errors still close the channel.
        raw.send(channel, commands.Exchange.Declare(exchange=other, passive=True, nowait=True))
        close = raw.expect(channel, commands.Channel.Close)
        assert (close.reply_code, close.reply_text) == (404, not_found_text("exchange", other))
