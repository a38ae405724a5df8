"""Transactions: tx.select / tx.commit / tx.rollback."""

from __future__ import annotations

import pika
import pytest
from broker_process import BrokerProcess
from helpers import (
    bodies,
    closes_channel,
    declare_ok,
    drain,
    get_message,
    get_messages,
    message_count,
    numbered,
    open_session,
    process_for,
    process_until,
    publish_all,
    round_trip,
    unique_name,
)

pytestmark = pytest.mark.timeout(60)


def test_publishes_are_invisible_until_commit(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        tx = amqp.connection.channel()
        tx.tx_select()
        publish_all(tx, queue, numbered("m", 3))
        round_trip(tx)
        assert message_count(amqp.channel, queue) == 0
        tx.tx_commit()
        assert bodies(drain(amqp.channel, queue)) == numbered("m", 3)


def test_rollback_discards_publishes(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        tx = amqp.connection.channel()
        tx.tx_select()
        publish_all(tx, queue, numbered("discarded", 2))
        tx.tx_rollback()
        assert message_count(amqp.channel, queue) == 0
        # The channel stays transactional: the next batch waits for its own commit.
        tx.basic_publish("", queue, b"kept")
        round_trip(tx)
        assert message_count(amqp.channel, queue) == 0
        tx.tx_commit()
        assert bodies(drain(amqp.channel, queue)) == [b"kept"]


def test_each_commit_starts_a_new_transaction(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        tx = amqp.connection.channel()
        tx.tx_select()
        tx.basic_publish("", queue, b"first")
        tx.tx_commit()
        tx.basic_publish("", queue, b"second")
        tx.tx_rollback()
        tx.tx_commit()  # an empty commit is fine
        assert bodies(drain(amqp.channel, queue)) == [b"first"]


def test_acks_take_effect_at_commit(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 2))
        tx = amqp.connection.channel()
        tx.tx_select()
        got = get_messages(tx, queue, 2)
        tx.basic_ack(got[-1].delivery_tag, multiple=True)
        tx.tx_commit()
        tx.close()  # nothing left unacked to requeue
        assert declare_ok(amqp.channel, queue) == (0, 0)


def test_rolled_back_acks_leave_the_messages_unacked(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        tx = amqp.connection.channel()
        tx.tx_select()
        got = get_messages(tx, queue, 3)
        tx.basic_ack(got[-1].delivery_tag, multiple=True)
        tx.tx_rollback()
        # Still unacknowledged, and still acknowledgeable on this channel.
        tx.basic_ack(got[0].delivery_tag)
        tx.tx_commit()
        tx.close()
        assert [(m.body, m.redelivered) for m in drain(amqp.channel, queue)] == [
            (b"m-2", True),
            (b"m-3", True),
        ]


def test_requeue_inside_a_transaction_happens_at_commit(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"back")
        tx = amqp.connection.channel()
        tx.tx_select()
        [message] = get_messages(tx, queue, 1)
        tx.basic_nack(message.delivery_tag, requeue=True)
        round_trip(tx)
        assert message_count(amqp.channel, queue) == 0
        tx.tx_commit()
        assert [(m.body, m.redelivered) for m in drain(amqp.channel, queue)] == [(b"back", True)]


def test_mandatory_return_is_sent_at_commit(broker: BrokerProcess) -> None:
    returned: list[bytes] = []
    with open_session(broker.url) as amqp:
        amqp.channel.add_on_return_callback(lambda _c, _m, _p, body: returned.append(body))
        amqp.channel.tx_select()
        amqp.channel.basic_publish("amq.direct", unique_name("nobody"), b"bounce", mandatory=True)
        round_trip(amqp.channel)
        process_for(amqp.connection)
        assert returned == []
        amqp.channel.tx_commit()
        process_until(amqp.connection, lambda: bool(returned), "basic.return arrived")
        assert returned == [b"bounce"]


@pytest.mark.parametrize("method", ["commit", "rollback"])
def test_commit_or_rollback_without_select_is_precondition_failed(broker: BrokerProcess, method: str) -> None:
    with open_session(broker.url) as amqp, closes_channel(406, "PRECONDITION_FAILED - channel is not transactional"):
        if method == "commit":
            amqp.channel.tx_commit()
        else:
            amqp.channel.tx_rollback()


def test_tx_select_on_a_confirm_channel_is_precondition_failed(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        amqp.channel.confirm_delivery()
        with closes_channel(406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode"):
            amqp.channel.tx_select()


def test_bcc_recipients_of_a_transactional_publish_get_it_at_commit(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        exchange = amqp.declare_exchange("direct")
        to_queue, bcc_queue = amqp.declare_queue(), amqp.declare_queue()
        amqp.channel.queue_bind(to_queue, exchange, "to")
        amqp.channel.queue_bind(bcc_queue, exchange, "hidden")
        amqp.channel.tx_select()
        amqp.channel.basic_publish(exchange, "to", b"m", pika.BasicProperties(headers={"BCC": ["hidden"]}))
        amqp.channel.tx_commit()
        for queue in (to_queue, bcc_queue):
            message = get_message(amqp.channel, queue, auto_ack=True)
            assert message is not None and message.body == b"m"
            assert "BCC" not in (message.properties.headers or {})
