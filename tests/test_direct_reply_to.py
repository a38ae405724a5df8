"""Direct reply-to (amq.rabbitmq.reply-to): RPC replies without a reply queue."""

from __future__ import annotations

import pika
import pytest
from broker_process import BrokerProcess
from helpers import (
    await_message,
    closes_channel,
    open_session,
    process_until,
    round_trip,
)

REPLY_TO = "amq.rabbitmq.reply-to"


def test_rpc_round_trip_through_the_pseudo_queue(broker: BrokerProcess) -> None:
    with open_session(broker.url) as server, open_session(broker.url) as client:
        request_queue = server.declare_queue("rpc", exclusive=True)
        replies: list[tuple[bytes, str | None]] = []
        client.channel.basic_consume(
            REPLY_TO, lambda ch, method, props, body: replies.append((body, props.correlation_id)), auto_ack=True
        )
        client.channel.basic_publish(
            "", request_queue, b"ping", pika.BasicProperties(reply_to=REPLY_TO, correlation_id="c-1")
        )
        request = await_message(server.channel, request_queue, "the request arrives")
        assert request.properties.reply_to.startswith(REPLY_TO + "."), request.properties.reply_to
        server.channel.basic_publish(
            "",
            request.properties.reply_to,
            b"pong:" + request.body,
            pika.BasicProperties(correlation_id=request.properties.correlation_id),
        )
        process_until(client.connection, lambda: bool(replies), "the reply arrives")
        assert replies == [(b"pong:ping", "c-1")]


def test_publishing_with_the_pseudo_queue_needs_a_reply_consumer(broker: BrokerProcess) -> None:
    with (
        open_session(broker.url) as session,
        closes_channel(406, "PRECONDITION_FAILED - fast reply consumer does not exist"),
    ):
        session.channel.basic_publish("", "anything", b"x", pika.BasicProperties(reply_to=REPLY_TO))
        round_trip(session.channel)


def test_reply_consumer_must_not_ack(broker: BrokerProcess) -> None:
    with (
        open_session(broker.url) as session,
        closes_channel(406, "PRECONDITION_FAILED - reply consumer cannot acknowledge"),
    ):
        session.channel.basic_consume(REPLY_TO, lambda *args: None, auto_ack=False)


def test_reply_to_a_vanished_channel_is_returned_when_mandatory(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        session.channel.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            session.channel.basic_publish("", REPLY_TO + ".gone", b"late", mandatory=True)


def test_pseudo_queue_can_be_declared_passively(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        result = session.channel.queue_declare(REPLY_TO, passive=True)
        assert result.method.queue == REPLY_TO
