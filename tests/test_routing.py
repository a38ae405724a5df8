"""Routing through a real broker over AMQP: built-in exchanges, bindings and unbinding."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pika
import pytest
from broker_process import BrokerProcess
from pika.adapters.blocking_connection import BlockingChannel
from pika.compat import long as pika_long
from pika.exceptions import ChannelClosedByBroker


@pytest.fixture
def connection(broker: BrokerProcess) -> Iterator[pika.BlockingConnection]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection: pika.BlockingConnection) -> BlockingChannel:
    """A channel with publisher confirms: a publish returns once the broker has routed it."""
    chan = connection.channel()
    chan.confirm_delivery()
    return chan


def unique(prefix: str) -> str:
    return f"test-routing-{prefix}-{uuid.uuid4().hex[:8]}"


def new_queue(channel: BlockingChannel) -> str:
    name = unique("q")
    channel.queue_declare(name, exclusive=True)
    return name


def new_exchange(channel: BlockingChannel, exchange_type: str) -> str:
    name = unique(exchange_type)
    # Not auto-delete: RabbitMQ deletes such an exchange when its last binding is removed,
    # and several tests here publish after unbinding everything.
    channel.exchange_declare(name, exchange_type=exchange_type)
    return name


def publish(
    channel: BlockingChannel,
    exchange: str,
    routing_key: str,
    body: str,
    headers: Mapping[str, Any] | None = None,
) -> None:
    properties = pika.BasicProperties(headers=dict(headers)) if headers is not None else None
    channel.basic_publish(exchange, routing_key, body.encode(), properties)


def drain(channel: BlockingChannel, queue: str) -> list[str]:
    """Every message in the queue, in order, removing them."""
    bodies: list[str] = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body.decode())


PREDECLARED = [
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
]


@pytest.mark.parametrize(("exchange", "exchange_type"), PREDECLARED)
def test_predeclared_exchange_exists(channel: BlockingChannel, exchange: str, exchange_type: str) -> None:
    channel.exchange_declare(exchange, exchange_type=exchange_type, passive=True)


@pytest.mark.parametrize(
    ("exchange", "routing_key", "arguments", "headers"),
    [
        ("amq.direct", "k.direct", None, None),
        ("amq.fanout", "", None, None),
        ("amq.topic", "k.*", None, None),
        ("amq.headers", "", {"route-test": "headers"}, {"route-test": "headers"}),
        ("amq.match", "", {"route-test": "match"}, {"route-test": "match"}),
    ],
)
def test_predeclared_exchange_routes(
    channel: BlockingChannel,
    exchange: str,
    routing_key: str,
    arguments: dict[str, Any] | None,
    headers: dict[str, Any] | None,
) -> None:
    queue = new_queue(channel)
    channel.queue_bind(queue, exchange, routing_key, arguments)
    publish(channel, exchange, "k.direct", "hello", headers)
    assert drain(channel, queue) == ["hello"]
    channel.queue_unbind(queue, exchange, routing_key, arguments)


def test_default_exchange_routes_by_queue_name(channel: BlockingChannel) -> None:
    queue = new_queue(channel)
    publish(channel, "", queue, "by name")
    publish(channel, "", queue + "-nobody", "lost")
    assert drain(channel, queue) == ["by name"]


@pytest.mark.parametrize("operation", ["queue_bind", "queue_unbind"])
def test_default_exchange_cannot_be_bound(connection: pika.BlockingConnection, operation: str) -> None:
    chan = connection.channel()
    queue = new_queue(chan)
    with pytest.raises(ChannelClosedByBroker) as raised:
        getattr(chan, operation)(queue, "", queue)
    assert raised.value.reply_code == 403
    assert raised.value.reply_text == ("ACCESS_REFUSED - operation not permitted on the default exchange")


def test_direct_exchange_routes_on_exact_key(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "direct")
    black, white = new_queue(channel), new_queue(channel)
    channel.queue_bind(black, exchange, "black")
    channel.queue_bind(black, exchange, "both")
    channel.queue_bind(white, exchange, "both")
    channel.queue_bind(white, exchange, "both", {"x-note": "a second binding, one copy"})
    for key in ("black", "both", "white", "Black"):
        publish(channel, exchange, key, key)
    assert drain(channel, black) == ["black", "both"]
    assert drain(channel, white) == ["both"]


def test_fanout_exchange_ignores_routing_keys(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "fanout")
    queues = [new_queue(channel) for _ in range(3)]
    for index, queue in enumerate(queues):
        channel.queue_bind(queue, exchange, f"key-{index}")
    publish(channel, exchange, "whatever", "to all")
    assert [drain(channel, queue) for queue in queues] == [["to all"]] * 3


def test_topic_exchange_routes_on_patterns(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "topic")
    patterns = ["stock.#", "*.nyse.*", "stock.*.ibm", "#", "", "a..b"]
    queues = {pattern: new_queue(channel) for pattern in patterns}
    for pattern, queue in queues.items():
        channel.queue_bind(queue, exchange, pattern)
    keys = ["stock.nyse.ibm", "stock", "bond.nyse.x", "", "a..b", "a.b"]
    for key in keys:
        publish(channel, exchange, key, key)
    assert {pattern: drain(channel, queue) for pattern, queue in queues.items()} == {
        "stock.#": ["stock.nyse.ibm", "stock"],
        "*.nyse.*": ["stock.nyse.ibm", "bond.nyse.x"],
        "stock.*.ibm": ["stock.nyse.ibm"],
        "#": keys,
        "": [""],
        "a..b": ["a..b"],
    }


def test_topic_delivers_one_copy_when_several_bindings_match(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "topic")
    queue = new_queue(channel)
    for pattern in ("a.b", "a.*", "#", "#.b"):
        channel.queue_bind(queue, exchange, pattern)
    publish(channel, exchange, "a.b", "once")
    assert drain(channel, queue) == ["once"]


def test_headers_exchange_routes_on_headers(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "headers")
    bindings = {
        "all": {"format": "pdf", "type": "report"},
        "any": {"x-match": "any", "format": "pdf", "type": "log"},
        "present": {"format": None},
        "with-x": {"x-match": "all-with-x", "x-region": "eu"},
    }
    queues = {name: new_queue(channel) for name in bindings}
    for name, arguments in bindings.items():
        channel.queue_bind(queues[name], exchange, "ignored", arguments)
    messages: dict[str, dict[str, Any] | None] = {
        "pdf-report": {"format": "pdf", "type": "report", "pages": 3},
        "zip-log": {"format": "zip", "type": "log"},
        "eu": {"x-region": "eu"},
        "none": None,
    }
    for body, headers in messages.items():
        publish(channel, exchange, "", body, headers)
    assert {name: drain(channel, queue) for name, queue in queues.items()} == {
        "all": ["pdf-report"],
        "any": ["pdf-report", "zip-log"],
        "present": ["pdf-report", "zip-log"],
        "with-x": ["eu"],
    }


def test_headers_values_compare_by_type(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "headers")
    queue = new_queue(channel)
    channel.queue_bind(queue, exchange, "", {"n": 1})
    publish(channel, exchange, "", "int", {"n": 1})
    # pika sends this as a 64-bit long: numbers match across integer widths, as in RabbitMQ.
    publish(channel, exchange, "", "long", {"n": pika_long(1)})
    publish(channel, exchange, "", "text", {"n": "1"})
    publish(channel, exchange, "", "bool", {"n": True})
    assert drain(channel, queue) == ["int", "long"]


def test_headers_binding_with_invalid_x_match_is_refused(
    connection: pika.BlockingConnection,
) -> None:
    chan = connection.channel()
    exchange = new_exchange(chan, "headers")
    queue = new_queue(chan)
    with pytest.raises(ChannelClosedByBroker) as raised:
        chan.queue_bind(queue, exchange, "", {"x-match": "some"})
    assert raised.value.reply_code == 406
    assert raised.value.reply_text == (
        'PRECONDITION_FAILED - Invalid x-match field value <<"some">>; expected all, any, all-with-x, or any-with-x'
    )


def test_exchange_to_exchange_bindings_deliver_one_copy_per_queue(channel: BlockingChannel) -> None:
    source = new_exchange(channel, "topic")
    middle = new_exchange(channel, "fanout")
    leaf = new_exchange(channel, "direct")
    channel.exchange_bind(destination=middle, source=source, routing_key="orders.#")
    channel.exchange_bind(destination=leaf, source=middle, routing_key="")
    direct_and_via, via_only, leaf_queue = (new_queue(channel) for _ in range(3))
    channel.queue_bind(direct_and_via, source, "orders.*")
    channel.queue_bind(direct_and_via, middle)
    channel.queue_bind(via_only, middle)
    channel.queue_bind(leaf_queue, leaf, "orders.new")
    publish(channel, source, "orders.new", "order")
    publish(channel, source, "invoices.new", "invoice")
    assert drain(channel, direct_and_via) == ["order"]
    assert drain(channel, via_only) == ["order"]
    assert drain(channel, leaf_queue) == ["order"]


def test_queue_unbind_stops_routing(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "topic")
    queue = new_queue(channel)
    channel.queue_bind(queue, exchange, "a.*")
    channel.queue_bind(queue, exchange, "a.b", {"x-note": 1})
    publish(channel, exchange, "a.b", "both bound")
    channel.queue_unbind(queue, exchange, "a.*")
    publish(channel, exchange, "a.b", "one bound")
    publish(channel, exchange, "a.c", "none left for a.c")
    channel.queue_unbind(queue, exchange, "a.b", {"x-note": 1})
    publish(channel, exchange, "a.b", "unbound")
    assert drain(channel, queue) == ["both bound", "one bound"]


def test_unbinding_twice_is_harmless(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "direct")
    queue = new_queue(channel)
    channel.queue_bind(queue, exchange, "k")
    channel.queue_unbind(queue, exchange, "k")
    channel.queue_unbind(queue, exchange, "k")
    publish(channel, exchange, "k", "unbound")
    assert drain(channel, queue) == []


def test_exchange_unbind_stops_routing(channel: BlockingChannel) -> None:
    source = new_exchange(channel, "direct")
    destination = new_exchange(channel, "fanout")
    queue = new_queue(channel)
    channel.exchange_bind(destination=destination, source=source, routing_key="k")
    channel.queue_bind(queue, destination)
    publish(channel, source, "k", "bound")
    channel.exchange_unbind(destination=destination, source=source, routing_key="k")
    publish(channel, source, "k", "unbound")
    assert drain(channel, queue) == ["bound"]


def test_deleted_queue_leaves_no_binding_behind(channel: BlockingChannel) -> None:
    exchange = new_exchange(channel, "fanout")
    gone, kept = new_queue(channel), new_queue(channel)
    channel.queue_bind(gone, exchange)
    channel.queue_bind(kept, exchange)
    channel.queue_delete(gone)
    channel.queue_declare(gone, exclusive=True)
    publish(channel, exchange, "", "after delete")
    assert drain(channel, gone) == []
    assert drain(channel, kept) == ["after delete"]
