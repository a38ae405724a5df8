"""The x-delayed-message exchange through a real broker: holding by `x-delay`, release by
due time, routing by the inner type (a third-party one too), confirms, deletion, restarts
and crashes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from broker_process import BrokerFactory, BrokerProcess
from helpers import (
    DEFAULT_TIMEOUT,
    Consumer,
    Session,
    closes_channel,
    drain,
    get_message,
    message_count,
    open_session,
    unique_name,
)
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties
from test_plugins import sample_exchange_installed  # noqa: F401 - a fixture

DELAYED = "x-delayed-message"
# Timers and the loop may fire a little early or late: how far an arrival may stray.
SLACK = 0.05
NOT_AN_INNER_TYPE = "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"


def delayed_exchange(amqp: Session, inner: str = "direct", **options: Any) -> str:
    return amqp.declare_exchange(DELAYED, prefix="delayed", arguments={"x-delayed-type": inner}, **options)


def publish_delayed(
    channel: BlockingChannel, exchange: str, routing_key: str, body: str, delay: Any, **properties: Any
) -> float:
    """Publish with an `x-delay` header; return when, on the monotonic clock."""
    sent = time.monotonic()
    channel.basic_publish(
        exchange, routing_key, body.encode(), BasicProperties(headers={"x-delay": delay}, **properties)
    )
    return sent


def arrivals(consumer: Consumer, count: int, timeout: float = DEFAULT_TIMEOUT) -> list[tuple[str, float]]:
    """(body, monotonic arrival time) of the consumer's first `count` deliveries."""
    times: list[float] = []
    deadline = time.monotonic() + timeout
    while len(consumer.deliveries) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"only {len(consumer.deliveries)} of {count} deliveries after {timeout}s")
        consumer.channel.connection.process_data_events(time_limit=0.005)
        times.extend([time.monotonic()] * (len(consumer.deliveries) - len(times)))
    return [(message.body.decode(), at) for message, at in zip(consumer.deliveries, times, strict=False)]


@pytest.mark.parametrize(
    "arguments",
    [{}, {"x-delayed-type": "no-such-type"}, {"x-delayed-type": DELAYED}, {"x-delayed-type": 7}],
    ids=["missing", "unknown", "itself", "not-a-string"],
)
def test_the_inner_type_must_be_an_existing_exchange_type(broker: BrokerProcess, arguments: dict[str, Any]) -> None:
    with open_session(broker.url) as amqp, closes_channel(406, NOT_AN_INNER_TYPE):
        amqp.channel.exchange_declare(unique_name("delayed"), DELAYED, arguments=arguments)


def test_messages_come_out_by_due_time_with_x_delay_negated(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = delayed_exchange(amqp)
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange, "k")
        consumer = Consumer(amqp.channel, queue, auto_ack=True)
        sent = {
            "900": publish_delayed(amqp.channel, exchange, "k", "900", 900),
            "300": publish_delayed(amqp.channel, exchange, "k", "300", 300),
            "600": publish_delayed(amqp.channel, exchange, "k", "600", "600"),  # a numeric string counts
        }
        # Without a positive delay a message is routed at once.
        amqp.channel.basic_publish(exchange, "k", b"no-header")
        for body, delay in [("zero", 0), ("negative", -100), ("not-a-number", "soon"), ("too-long", 1 << 32)]:
            publish_delayed(amqp.channel, exchange, "k", body, delay)

        got = arrivals(consumer, 8)
        assert [body for body, _ in got[:5]] == ["no-header", "zero", "negative", "not-a-number", "too-long"]
        assert [body for body, _ in got[5:]] == ["300", "600", "900"]
        for body, at in got[5:]:
            assert at - sent[body] >= int(body) / 1000 - SLACK, f"{body} came early"
        assert [m.properties.headers["x-delay"] for m in consumer.deliveries[5:]] == [-300, -600, -900]
        assert consumer.deliveries[1].properties.headers["x-delay"] == 0


def test_the_inner_type_routes_the_released_message(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = delayed_exchange(amqp, "topic")
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange, "sensor.*")
        consumer = Consumer(amqp.channel, queue, auto_ack=True)
        publish_delayed(amqp.channel, exchange, "alarm.1", "unmatched", 100)
        publish_delayed(amqp.channel, exchange, "sensor.1", "matched", 200)
        assert [body for body, _ in arrivals(consumer, 1)] == ["matched"]
        assert len(consumer.settle(0.2)) == 1


def test_bcc_keys_are_kept_while_held_and_removed_on_release(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = delayed_exchange(amqp)
        main, blind = amqp.declare_queue("main"), amqp.declare_queue("blind")
        amqp.channel.queue_bind(main, exchange, "main")
        amqp.channel.queue_bind(blind, exchange, "blind")
        amqp.channel.basic_publish(
            exchange, "main", b"memo", BasicProperties(headers={"x-delay": 200, "BCC": ["blind"]})
        )
        consumers = [Consumer(amqp.channel, queue, auto_ack=True) for queue in (main, blind)]
        for consumer in consumers:
            [delivered] = consumer.wait_for(1)
            assert delivered.properties.headers == {"x-delay": -200}


def test_an_exchange_binding_leads_into_the_hold(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        front = amqp.declare_exchange("fanout", prefix="front")
        exchange = delayed_exchange(amqp, "fanout")
        amqp.channel.exchange_bind(exchange, front)
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange)
        consumer = Consumer(amqp.channel, queue, auto_ack=True)
        sent = publish_delayed(amqp.channel, front, "", "via-front", 300)
        [(_, at)] = arrivals(consumer, 1)
        assert at - sent >= 0.3 - SLACK


def test_a_held_message_is_confirmed_at_once_and_never_returned(broker: BrokerProcess) -> None:
    """As in RabbitMQ: the confirm means "stored"; mandatory cannot be honoured, as nobody
    knows at publish time where the message will go."""
    with open_session(broker.url) as amqp:
        exchange = delayed_exchange(amqp)  # no bindings at all
        amqp.channel.confirm_delivery()
        sent = time.monotonic()
        # pika raises UnroutableError if a mandatory publish comes back.
        amqp.channel.basic_publish(exchange, "k", b"held", BasicProperties(headers={"x-delay": 2000}), mandatory=True)
        assert time.monotonic() - sent < 1.0


def test_deleting_the_exchange_drops_its_held_messages(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = delayed_exchange(amqp)
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange, "k")
        publish_delayed(amqp.channel, exchange, "k", "dropped", 300)
        amqp.channel.exchange_delete(exchange)
        amqp.channel.exchange_declare(exchange, DELAYED, arguments={"x-delayed-type": "direct"})
        amqp.channel.queue_bind(queue, exchange, "k")
        publish_delayed(amqp.channel, exchange, "k", "kept", 400)
        time.sleep(0.6)
        assert [m.body for m in drain(amqp.channel, queue)] == [b"kept"]


def declare_durable_setup(amqp: Session) -> None:
    amqp.channel.exchange_declare("held", DELAYED, durable=True, arguments={"x-delayed-type": "direct"})
    amqp.channel.queue_declare("released", durable=True)
    amqp.channel.queue_bind("released", "held", "k")


def test_held_messages_survive_a_restart_and_come_out_by_due_time(fresh_broker: BrokerProcess) -> None:
    with open_session(fresh_broker.url) as amqp:
        declare_durable_setup(amqp)
        sent = {
            "late": publish_delayed(amqp.channel, "held", "k", "late", 2500, delivery_mode=2),
            "early": publish_delayed(amqp.channel, "held", "k", "early", 2000, delivery_mode=2),
        }
        # A transient message is not kept on disk, as in a durable queue.
        publish_delayed(amqp.channel, "held", "k", "transient", 2000, delivery_mode=1)
        assert message_count(amqp.channel, "released") == 0
    fresh_broker.stop()
    # Stopped before anything was due, so what arrives later was kept on disk.
    assert time.monotonic() - sent["early"] < 2.0, "stopped too late to show anything"
    fresh_broker.start()
    with open_session(fresh_broker.url) as amqp:
        consumer = Consumer(amqp.channel, "released", auto_ack=True)
        got = arrivals(consumer, 2)
        assert [body for body, _ in got] == ["early", "late"]
        for body, at in got:
            assert at - sent[body] >= (2.0 if body == "early" else 2.5) - SLACK
        assert len(consumer.settle(0.2)) == 2


def test_confirmed_held_messages_survive_a_crash(fresh_broker: BrokerProcess) -> None:
    with open_session(fresh_broker.url) as amqp:
        declare_durable_setup(amqp)
        amqp.channel.confirm_delivery()
        publish_delayed(amqp.channel, "held", "k", "second", 1500, delivery_mode=2)
        sent = publish_delayed(amqp.channel, "held", "k", "first", 1200, delivery_mode=2)
    fresh_broker.kill()
    assert time.monotonic() - sent < 1.2, "killed too late to show anything"
    fresh_broker.start()
    with open_session(fresh_broker.url) as amqp:
        consumer = Consumer(amqp.channel, "released", auto_ack=True)
        assert [body for body, _ in arrivals(consumer, 2)] == ["first", "second"]


@pytest.mark.usefixtures("sample_exchange_installed")
def test_a_third_party_type_can_be_the_inner_type(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(extra_args=["--plugin", "x-prefix"])  # a third-party type is enabled by name
    with open_session(broker.url) as amqp:
        exchange = delayed_exchange(amqp, "x-prefix")
        queue = amqp.declare_queue()
        amqp.channel.queue_bind(queue, exchange, "sensor.")
        sent = publish_delayed(amqp.channel, exchange, "sensor.7", "matched", 300)
        publish_delayed(amqp.channel, exchange, "other.7", "unmatched", 300)
        assert get_message(amqp.channel, queue) is None
        consumer = Consumer(amqp.channel, queue, auto_ack=True)
        [(body, at)] = arrivals(consumer, 1)
        assert body == "matched" and at - sent >= 0.3 - SLACK
        assert len(consumer.settle(0.2)) == 1
