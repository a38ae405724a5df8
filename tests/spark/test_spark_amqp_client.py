"""The executors' small AMQP client (lavin.client.wire) against a real broker (classic queues: the mechanics
are the same as for streams)."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess
from helpers import open_session
from lavin.client.wire import Address, AmqpError, UnroutableError, connect
from pamqp.commands import Basic


def test_parse_uri() -> None:
    assert Address.from_uri("amqp://bob:s%40cret@10.0.0.5:5673/prod%2Fa") == Address(
        host="10.0.0.5", port=5673, vhost="prod/a", username="bob", password="s@cret"
    )
    assert Address.from_uri("amqp://localhost") == Address(
        host="localhost", port=5672, vhost="/", username="guest", password="guest"
    )
    assert Address.from_uri("amqp://") == Address()
    assert Address.from_uri("amqp://").tls is None
    secure = Address.from_uri("amqps://localhost")
    assert (secure.port, secure.tls is not None) == (5671, True)
    with pytest.raises(ValueError, match="only amqp:// and amqps://"):
        Address.from_uri("http://localhost")


def test_publish_then_consume_in_order_with_properties_and_large_bodies(
    broker: BrokerProcess,
) -> None:
    big = bytes(range(256)) * 2000  # 512 KB: spans several frames each way
    bodies = [b"first", big, b""]
    with open_session(broker.url) as session:
        queue = session.declare_queue("amqp-client")
        with connect(broker.url, timeout=5) as client:
            properties = Basic.Properties(message_id="m", headers={"n": 1, "tag": "t"})
            client.publish(queue, bodies, properties)
            client.qos(2)
            client.consume(queue)
            received = []
            for _ in bodies:
                delivery = client.next_delivery()
                client.ack(delivery.delivery_tag)
                received.append(delivery)
        assert [delivery.body for delivery in received] == bodies
        assert {(d.exchange, d.routing_key) for d in received} == {("", queue)}
        assert received[0].properties.message_id == "m"
        assert received[0].properties.headers == {"n": 1, "tag": "t"}
        assert [d.delivery_tag for d in received] == [1, 2, 3]
        assert session.channel.queue_declare(queue, passive=True).method.message_count == 0


def test_an_unroutable_mandatory_message_raises(broker: BrokerProcess) -> None:
    with connect(broker.url, timeout=5) as client:
        client.publish("no-such-queue-anywhere", [b"x"], mandatory=True)
        with pytest.raises(UnroutableError, match="no-such-queue-anywhere"):
            client.next_delivery()


def test_a_broker_error_is_raised_with_its_reply_text(broker: BrokerProcess) -> None:
    with connect(broker.url, timeout=5) as client, pytest.raises(AmqpError, match="404"):
        client.consume("no-such-queue-anywhere")


def test_a_silent_broker_times_out(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue("amqp-client-idle")
        with connect(broker.url, timeout=0.3) as client:
            client.consume(queue)
            with pytest.raises(TimeoutError, match=r"sent nothing for 0\.3 s"):
                client.next_delivery()


def test_wrong_credentials_fail(broker: BrokerProcess) -> None:
    with pytest.raises(AmqpError):
        connect(broker.url.replace("guest:guest", "guest:wrong"), timeout=5)
