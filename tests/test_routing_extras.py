"""Routing the core does for every exchange type: alternate exchanges, loops of exchange
bindings, CC/BCC sender-selected distribution and LavinMQ's message deduplication.
(Internal and auto-delete exchanges are covered in test_exchanges.py.)"""

from __future__ import annotations

import time
from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import (
    Session,
    bodies,
    closes_channel,
    drain,
    open_session,
    round_trip,
    unique_name,
)
from pika.exceptions import UnroutableError
from pika.spec import BasicProperties


def with_alternate(amqp: Session, exchange_type: str, alternate: str, prefix: str = "x") -> str:
    return amqp.declare_exchange(exchange_type, prefix=prefix, arguments={"alternate-exchange": alternate})


def fanout_with_queue(amqp: Session, prefix: str) -> tuple[str, str]:
    exchange = amqp.declare_exchange("fanout", prefix=prefix)
    queue = amqp.declare_queue(prefix)
    amqp.channel.queue_bind(queue, exchange)
    return exchange, queue


def publish_mandatory(amqp: Session, exchange: str, routing_key: str, body: bytes) -> bool:
    """Publish with confirms and mandatory; False when the broker returned the message."""
    try:
        amqp.channel.basic_publish(exchange, routing_key, body, mandatory=True)
    except UnroutableError:
        return False
    return True


@pytest.fixture
def amqp(broker: BrokerProcess) -> Any:
    with open_session(broker.url) as session:
        session.channel.confirm_delivery()
        yield session


# --------------------------------------------------------------------------- alternate exchanges


def test_only_unroutable_messages_go_to_the_alternate_exchange(amqp: Session) -> None:
    alternate, unrouted = fanout_with_queue(amqp, "ae")
    exchange = with_alternate(amqp, "direct", alternate)
    routed = amqp.declare_queue("routed")
    amqp.channel.queue_bind(routed, exchange, "known")
    assert publish_mandatory(amqp, exchange, "known", b"to-routed")
    assert publish_mandatory(amqp, exchange, "unknown", b"to-alternate")  # not returned
    assert bodies(drain(amqp.channel, routed)) == [b"to-routed"]
    assert bodies(drain(amqp.channel, unrouted)) == [b"to-alternate"]


def test_alternate_exchanges_are_followed_recursively(amqp: Session) -> None:
    last, unrouted = fanout_with_queue(amqp, "ae-last")
    middle = with_alternate(amqp, "direct", last, prefix="ae-middle")
    first = with_alternate(amqp, "direct", middle, prefix="ae-first")
    assert publish_mandatory(amqp, first, "nobody", b"twice-alternated")
    assert bodies(drain(amqp.channel, unrouted)) == [b"twice-alternated"]


def test_a_loop_of_alternate_exchanges_ends(amqp: Session) -> None:
    one, two = amqp.track_exchange("ae-loop-one-x"), amqp.track_exchange("ae-loop-two-x")
    amqp.channel.exchange_declare(one, "direct", arguments={"alternate-exchange": two})
    amqp.channel.exchange_declare(two, "direct", arguments={"alternate-exchange": one})
    assert not publish_mandatory(amqp, one, "nobody", b"returned")
    queue = amqp.declare_queue()
    amqp.channel.queue_bind(queue, two, "found")
    assert publish_mandatory(amqp, one, "found", b"via-loop")
    assert bodies(drain(amqp.channel, queue)) == [b"via-loop"]


def test_a_missing_alternate_exchange_leaves_the_message_unroutable(amqp: Session) -> None:
    exchange = with_alternate(amqp, "direct", "no-such-exchange")
    assert not publish_mandatory(amqp, exchange, "nobody", b"returned")


def test_each_exchange_on_the_way_uses_its_own_alternate(amqp: Session) -> None:
    """As in RabbitMQ: an exchange hands a message to its alternate exchange when its own
    bindings match nothing, even when it was reached through an exchange binding; an
    exchange whose bindings matched does not, whatever happened further on."""
    alternate, unrouted = fanout_with_queue(amqp, "ae")
    front = with_alternate(amqp, "direct", alternate, prefix="front")
    inner = with_alternate(amqp, "direct", alternate, prefix="inner")
    amqp.channel.exchange_bind(inner, front, "to-inner")
    bare = amqp.declare_exchange("direct", prefix="bare")
    amqp.channel.exchange_bind(bare, front, "to-bare")

    assert publish_mandatory(amqp, front, "to-inner", b"inner-matches-nothing")
    assert not publish_mandatory(amqp, front, "to-bare", b"bare-matches-nothing")
    assert bodies(drain(amqp.channel, unrouted)) == [b"inner-matches-nothing"]


# --------------------------------------------------------------------------- exchange bindings


def test_a_loop_of_exchange_bindings_delivers_one_copy(amqp: Session) -> None:
    one, in_one = fanout_with_queue(amqp, "loop-one")
    two, in_two = fanout_with_queue(amqp, "loop-two")
    amqp.channel.exchange_bind(two, one)
    amqp.channel.exchange_bind(one, two)
    amqp.channel.queue_bind(in_one, two)  # reachable both directly and round the loop
    for start in (one, two):
        amqp.channel.basic_publish(start, "", f"from-{start}".encode())
    assert sorted(bodies(drain(amqp.channel, in_one))) == sorted(f"from-{x}".encode() for x in (one, two))
    assert len(drain(amqp.channel, in_two)) == 2


def test_a_diamond_of_exchange_bindings_delivers_one_copy(amqp: Session) -> None:
    top = amqp.declare_exchange("topic", prefix="top")
    left, right = amqp.declare_exchange("fanout", prefix="left"), amqp.declare_exchange("direct", prefix="right")
    amqp.channel.exchange_bind(left, top, "order.*")
    amqp.channel.exchange_bind(right, top, "#")
    queue = amqp.declare_queue()
    amqp.channel.queue_bind(queue, left)
    amqp.channel.queue_bind(queue, right, "order.new")
    amqp.channel.basic_publish(top, "order.new", b"once")
    assert bodies(drain(amqp.channel, queue)) == [b"once"]


# --------------------------------------------------------------------------- CC and BCC


def cc_setup(amqp: Session, exchange_type: str = "direct") -> tuple[str, dict[str, str]]:
    exchange = amqp.declare_exchange(exchange_type, prefix="cc")
    queues = {key: amqp.declare_queue(key) for key in ("main", "copy", "blind")}
    for key, queue in queues.items():
        amqp.channel.queue_bind(queue, exchange, key)
    return exchange, queues


@pytest.mark.parametrize("via_default_exchange", [False, True], ids=["direct", "default-exchange"])
def test_cc_and_bcc_add_routing_keys_and_bcc_is_never_delivered(amqp: Session, via_default_exchange: bool) -> None:
    exchange, queues = cc_setup(amqp)
    headers = {"CC": [queues["copy"] if via_default_exchange else "copy"],
               "BCC": [queues["blind"] if via_default_exchange else "blind"], "other": 1}  # fmt: skip
    target = "" if via_default_exchange else exchange
    routing_key = queues["main"] if via_default_exchange else "main"
    amqp.channel.basic_publish(target, routing_key, b"memo", BasicProperties(headers=headers))
    for key in ("main", "copy", "blind"):
        [delivered] = drain(amqp.channel, queues[key])
        assert delivered.body == b"memo"
        assert delivered.properties.headers == {"CC": headers["CC"], "other": 1}


def test_a_queue_matched_by_several_keys_gets_one_copy(amqp: Session) -> None:
    exchange, queues = cc_setup(amqp, "topic")
    amqp.channel.queue_bind(queues["main"], exchange, "cc.#")
    amqp.channel.basic_publish(
        exchange, "main", b"once", BasicProperties(headers={"CC": ["cc.a", "cc.b"], "BCC": ["main"]})
    )
    assert bodies(drain(amqp.channel, queues["main"])) == [b"once"]


@pytest.mark.parametrize(
    ("headers", "name"),
    [({"CC": "copy"}, "CC"), ({"BCC": ["blind", 7]}, "BCC"), ({"CC": {"a": "copy"}}, "CC")],
    ids=["cc-not-an-array", "bcc-not-strings", "cc-a-table"],
)
def test_cc_and_bcc_must_be_arrays_of_strings(broker: BrokerProcess, headers: dict[str, Any], name: str) -> None:
    with open_session(broker.url) as amqp:
        exchange, _ = cc_setup(amqp)
        with closes_channel(406, f"PRECONDITION_FAILED - invalid {name} header: expected an array of strings"):
            amqp.channel.basic_publish(exchange, "main", b"bad", BasicProperties(headers=headers))
            round_trip(amqp.channel)


# --------------------------------------------------------------------------- deduplication (LavinMQ)


def dedup_exchange(amqp: Session, **arguments: Any) -> tuple[str, str]:
    exchange = amqp.declare_exchange("fanout", prefix="dedup", arguments={"x-message-deduplication": True, **arguments})
    queue = amqp.declare_queue("dedup")
    amqp.channel.queue_bind(queue, exchange)
    return exchange, queue


def publish_with(amqp: Session, exchange: str, body: str, **headers: Any) -> bool:
    """Publish mandatory with these headers; False when the broker returned the message."""
    try:
        amqp.channel.basic_publish(exchange, "", body.encode(), BasicProperties(headers=headers), mandatory=True)
    except UnroutableError:
        return False
    return True


def test_a_duplicate_is_routed_nowhere(amqp: Session) -> None:
    exchange, queue = dedup_exchange(amqp)
    sent = [publish_with(amqp, exchange, body, **{"x-deduplication-header": value})
            for body, value in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a")]]  # fmt: skip
    sent += [publish_with(amqp, exchange, body) for body in ("plain-1", "plain-2")]
    assert sent == [True, False, True, False, True, True]  # duplicates come back as unroutable
    assert bodies(drain(amqp.channel, queue)) == [b"a1", b"b1", b"plain-1", b"plain-2"]


def test_the_cache_keeps_the_latest_values_of_the_named_header(amqp: Session) -> None:
    exchange, queue = dedup_exchange(amqp, **{"x-cache-size": 2, "x-deduplication-header": "order-id"})
    for value in (1, 2, 3, 1, 3):  # 1 was pushed out by 3; 3 is still known
        publish_with(amqp, exchange, f"order-{value}", **{"order-id": value})
    assert bodies(drain(amqp.channel, queue)) == [b"order-1", b"order-2", b"order-3", b"order-1"]


def test_values_are_forgotten_after_the_cache_ttl(amqp: Session) -> None:
    exchange, queue = dedup_exchange(amqp, **{"x-cache-ttl": 200})
    publish_with(amqp, exchange, "first", **{"x-deduplication-header": "v"})
    publish_with(amqp, exchange, "short", **{"x-deduplication-header": "w", "x-cache-ttl": 0})
    publish_with(amqp, exchange, "again-too-soon", **{"x-deduplication-header": "v"})
    publish_with(amqp, exchange, "short-again", **{"x-deduplication-header": "w"})
    time.sleep(0.25)
    publish_with(amqp, exchange, "again-later", **{"x-deduplication-header": "v"})
    assert bodies(drain(amqp.channel, queue)) == [b"first", b"short", b"short-again", b"again-later"]


def test_a_transaction_remembers_only_what_it_commits(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange, queue = dedup_exchange(amqp)
        amqp.channel.tx_select()
        for body in ("in-tx-1", "in-tx-2"):
            amqp.channel.basic_publish(
                exchange, "", body.encode(), BasicProperties(headers={"x-deduplication-header": "t"})
            )
        amqp.channel.tx_commit()
        assert bodies(drain(amqp.channel, queue)) == [b"in-tx-1"]


@pytest.mark.parametrize(
    "arguments",
    [{"x-message-deduplication": "yes"}, {"x-message-deduplication": True, "x-cache-size": 0},
     {"x-message-deduplication": True, "x-cache-ttl": "1s"}],
    ids=["not-a-boolean", "size-zero", "ttl-not-a-number"],
)  # fmt: skip
def test_invalid_deduplication_arguments_are_refused(broker: BrokerProcess, arguments: dict[str, Any]) -> None:
    with open_session(broker.url) as amqp, closes_channel(406, "PRECONDITION_FAILED - invalid argument", exact=False):
        amqp.channel.exchange_declare(unique_name("dedup"), "fanout", arguments=arguments)
