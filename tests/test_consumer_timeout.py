"""Consumer timeout as in RabbitMQ 3.10: a delivery left unacknowledged for longer than
`consumer_timeout` (or the queue's `x-consumer-timeout`) closes its channel with 406, and the
channel close requeues the message. Also: a stream consumer takes no `x-priority`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerFactory, BrokerProcess
from helpers import Consumer, closes_channel, open_session, process_for, resource, round_trip
from pika.adapters.blocking_connection import BlockingChannel
from queue_helpers import invalid_arg_text

pytestmark = pytest.mark.timeout(60)


def timed_out_text(channel: BlockingChannel, timeout: int) -> str:
    return (
        f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel.channel_number} timed out. "
        f"Timeout value used: {timeout} ms. "
        "This timeout value can be configured, see consumers doc guide to learn more"
    )


def wait_for_close(channel: BlockingChannel) -> None:
    """Read until the broker closes the channel; pika raises its close while consuming."""
    channel.start_consuming()


def expect_timeout_and_redelivery(url: str, arguments: dict[str, Any] | None, timeout: int) -> None:
    with open_session(url) as session:
        queue = session.declare_queue(arguments=arguments)
        session.channel.basic_publish("", queue, b"slow")
        channel = session.connection.channel()
        consuming_from = time.monotonic()  # the delivery, and the broker's clock for it, start later
        consumer = Consumer(channel, queue)
        consumer.wait_for(1)
        with closes_channel(406, timed_out_text(channel, timeout)):
            wait_for_close(channel)
        assert time.monotonic() - consuming_from >= timeout / 1000
        other = Consumer(session.connection.channel(), queue)
        [message] = other.wait_for(1)
        assert (message.body, message.redelivered) == (b"slow", True)


def test_the_queue_argument_times_out_an_unacked_delivery(broker: BrokerProcess) -> None:
    expect_timeout_and_redelivery(broker.url, {"x-consumer-timeout": 200}, 200)


def test_the_setting_times_out_an_unacked_delivery(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    config = tmp_path / "lavin.ini"
    config.write_text("[main]\nconsumer_timeout = 200\n")
    broker = broker_factory(extra_args=["--config", str(config)])
    expect_timeout_and_redelivery(broker.url, None, 200)
    # The queue argument overrides the setting; 0 turns the timeout off for the queue.
    with open_session(broker.url) as session:
        queue = session.declare_queue(arguments={"x-consumer-timeout": 0})
        session.channel.basic_publish("", queue, b"kept")
        consumer = Consumer(session.channel, queue)
        consumer.wait_for(1)
        process_for(session.connection, 0.6)
        round_trip(session.channel)
        session.channel.basic_ack(consumer.deliveries[0].delivery_tag)
        round_trip(session.channel)


def test_a_basic_get_delivery_times_out(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue(arguments={"x-consumer-timeout": 200})
        idle = session.declare_queue()
        session.channel.basic_publish("", queue, b"got")
        channel = session.connection.channel()
        method, _, _ = channel.basic_get(queue)
        assert method is not None
        Consumer(channel, idle)  # something to consume while waiting for the close
        with closes_channel(406, timed_out_text(channel, 200)):
            wait_for_close(channel)
        method, _, body = session.channel.basic_get(queue, auto_ack=True)
        assert method is not None and (body, method.redelivered) == (b"got", True)


def test_acking_in_time_keeps_the_channel_open(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue(arguments={"x-consumer-timeout": 300})
        channel = session.channel
        consumer = Consumer(channel, queue)
        for index in range(8):  # 8 x 100 ms: longer than the timeout, each ack within it
            channel.basic_publish("", queue, f"m{index}".encode())
            [*_, message] = consumer.wait_for(index + 1)
            process_for(session.connection, 0.1)
            channel.basic_ack(message.delivery_tag)
        process_for(session.connection, 0.5)  # nothing unacked: nothing times out
        round_trip(channel)
        assert channel.is_open


@pytest.mark.parametrize(
    ("value", "reason"), [(-1, "{value_negative,-1}"), ("soon", '"expected integer, got longstr"')]
)
def test_an_invalid_queue_argument_is_refused(broker: BrokerProcess, value: object, reason: str) -> None:
    with open_session(broker.url) as session:
        name = "consumer-timeout-invalid"
        with closes_channel(406, invalid_arg_text("x-consumer-timeout", name, reason)):
            session.channel.queue_declare(name, arguments={"x-consumer-timeout": value})


# ---- streams ---------------------------------------------------------------------------


def stream_consumer(channel: BlockingChannel, queue: str) -> Consumer:
    channel.basic_qos(prefetch_count=10)
    return Consumer(channel, queue, arguments={"x-stream-offset": "first"})


def test_a_stream_delivery_can_be_recovered(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue("stream", durable=True, arguments={"x-queue-type": "stream"})
        session.channel.basic_publish("", queue, b"m0")
        consumer = stream_consumer(session.channel, queue)
        consumer.wait_for(1)
        session.channel.basic_recover(requeue=True)
        [first, again] = consumer.wait_for(2)
        assert (again.body, again.redelivered) == (first.body, True)
        session.channel.basic_ack(again.delivery_tag)
        round_trip(session.channel)


def test_a_stream_consumer_takes_no_priority(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue("stream", durable=True, arguments={"x-queue-type": "stream"})
        session.channel.basic_qos(prefetch_count=10)
        text = f"PRECONDITION_FAILED - invalid arg 'x-priority' for {resource('queue', queue)} of queue type stream"
        with closes_channel(406, text):
            Consumer(session.channel, queue, arguments={"x-priority": 5})
