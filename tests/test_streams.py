"""Stream queues through pika: declare rules, start offsets, independent consumers, filters,
retention, server-side offset tracking, restarts and crashes, and the stream-info RPC."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    Message,
    Session,
    closes_channel,
    closes_connection,
    connect,
    message_count,
    open_session,
    process_for,
    process_until,
    resource,
    unique_name,
)
from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingConnection
from queue_helpers import invalid_arg_text

pytestmark = pytest.mark.timeout(60)

STREAM = {"x-queue-type": "stream"}
SMALL_SEGMENT = {"x-stream-max-segment-size-bytes": 200}  # three or four small messages each
STREAM_INFO = "amq.lavin.stream-info"
DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


# --------------------------------------------------------------------------- helpers


def declare_stream(session: Session, **arguments: Any) -> str:
    """A stream deleted when the session closes."""
    return session.declare_queue("stream", durable=True, arguments={**STREAM, **arguments})


def declare_lasting_stream(session: Session, **arguments: Any) -> str:
    """A stream that outlives the session, for tests that restart the broker."""
    name = unique_name("stream")
    session.channel.queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    return name


def publish(session: Session, queue: str, count: int, *, start: int = 0, headers: dict[str, Any] | None = None) -> None:
    """Publish m<start> ... with publisher confirms: each is on disk when this returns."""
    channel = session.connection.channel()
    channel.confirm_delivery()
    for index in range(start, start + count):
        channel.basic_publish("", queue, f"m{index}".encode(), BasicProperties(headers=headers))
    channel.close()


def offset_of(message: Message) -> int:
    offset = (message.properties.headers or {}).get("x-stream-offset")
    assert isinstance(offset, int), f"delivery without an x-stream-offset header: {message.properties}"
    return offset


def subscribe(
    connection: BlockingConnection,
    queue: str,
    *,
    prefetch: int = 100,
    consumer_tag: str | None = None,
    **arguments: Any,
) -> Consumer:
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    return Consumer(channel, queue, consumer_tag=consumer_tag, arguments=arguments or None)


def read(connection: BlockingConnection, queue: str, count: int, **arguments: Any) -> list[tuple[int, bytes]]:
    """(offset, body) of exactly `count` deliveries from a new consumer; its channel is closed."""
    consumer = subscribe(connection, queue, prefetch=count, **arguments)
    consumer.wait_for(count)
    deliveries = consumer.settle(0.1)
    consumer.channel.close()
    assert len(deliveries) == count, f"expected {count} deliveries, got {len(deliveries)}"
    return [(offset_of(message), message.body) for message in deliveries]


def expected(offsets: Iterable[int]) -> list[tuple[int, bytes]]:
    """What `publish` sent, starting at m0, at these offsets."""
    return [(offset, f"m{offset}".encode()) for offset in offsets]


def stream_info(session: Session, queue: str, correlation_id: str = "req-1") -> BasicProperties:
    """Ask through direct reply-to; the reply's properties."""
    channel = session.connection.channel()
    replies = Consumer(channel, DIRECT_REPLY_TO, auto_ack=True)
    channel.basic_publish(
        "", STREAM_INFO, queue.encode(), BasicProperties(reply_to=DIRECT_REPLY_TO, correlation_id=correlation_id)
    )
    (reply,) = replies.wait_for(1)
    channel.close()
    assert reply.body == b""
    return reply.properties


def first_offset(session: Session, queue: str) -> int:
    first = (stream_info(session, queue).headers or {})["x-stream-first-offset"]
    assert isinstance(first, int)
    return first


# --------------------------------------------------------------------------- declare


@pytest.mark.parametrize(
    ("flags", "property_name"),
    [
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
    ],
)
def test_a_stream_is_durable_shared_and_kept(broker: BrokerProcess, flags: dict[str, bool], property_name: str) -> None:
    name = unique_name("stream")
    with (
        open_session(broker.url) as session,
        closes_channel(406, f"PRECONDITION_FAILED - invalid property '{property_name}' for {resource('queue', name)}"),
    ):
        session.channel.queue_declare(name, arguments=STREAM, **flags)


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("x-dead-letter-exchange", "dlx"),
        ("x-dead-letter-routing-key", "rk"),
        ("x-delivery-limit", 3),
        ("x-expires", 60_000),
        ("x-max-priority", 5),
        ("x-message-ttl", 60_000),
        ("x-overflow", "reject-publish"),
        ("x-single-active-consumer", True),
    ],
)
def test_arguments_that_make_no_sense_for_a_log_are_refused(
    broker: BrokerProcess, argument: str, value: object
) -> None:
    name = unique_name("stream")
    with (
        open_session(broker.url) as session,
        closes_channel(
            406, f"PRECONDITION_FAILED - invalid arg '{argument}' for {resource('queue', name)} of queue type stream"
        ),
    ):
        session.channel.queue_declare(name, durable=True, arguments={**STREAM, argument: value})


def test_an_invalid_max_age_is_refused(broker: BrokerProcess) -> None:
    name = unique_name("stream")
    with (
        open_session(broker.url) as session,
        closes_channel(406, invalid_arg_text("x-max-age", name, "invalid_max_age")),
    ):
        session.channel.queue_declare(name, durable=True, arguments={**STREAM, "x-max-age": "7 days"})


# --------------------------------------------------------------------------- consuming


def test_each_start_offset(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 3)
        # AMQP timestamps are whole seconds: the next messages come after the next second.
        boundary = math.ceil(time.time())
        time.sleep(boundary - time.time() + 0.05)
        publish(session, queue, 2, start=3)
        connection = session.connection
        assert read(connection, queue, 5, **{"x-stream-offset": "first"}) == expected(range(5))
        assert read(connection, queue, 1, **{"x-stream-offset": "last"}) == expected(range(4, 5))
        assert read(connection, queue, 3, **{"x-stream-offset": 2}) == expected(range(2, 5))
        assert read(connection, queue, 5, **{"x-stream-offset": -7}) == expected(range(5))
        at_boundary = datetime.fromtimestamp(boundary, tz=UTC)
        assert read(connection, queue, 2, **{"x-stream-offset": at_boundary}) == expected(range(3, 5))
        assert read(connection, queue, 5, **{"x-stream-offset": "10m"}) == expected(range(5))

        waiting = [
            subscribe(connection, queue, **{"x-stream-offset": "next"}),
            subscribe(connection, queue, **{"x-stream-offset": 99}),
            subscribe(connection, queue),
        ]  # no offset: next
        process_for(connection)
        assert all(consumer.deliveries == [] for consumer in waiting)
        publish(session, queue, 1, start=5)
        for consumer in waiting:
            assert [(offset_of(m), m.body) for m in consumer.wait_for(1)] == expected(range(5, 6))


def test_an_invalid_start_offset_is_refused(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        session.channel.basic_qos(prefetch_count=10)
        with closes_channel(
            406, invalid_arg_text("x-stream-offset", queue, '{invalid_stream_offset_arg,{longstr,<<"bogus">>}}')
        ):
            Consumer(session.channel, queue, arguments={"x-stream-offset": "bogus"})


def test_consumers_read_independently_and_acks_remove_nothing(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 4)
        connection = session.connection
        first = subscribe(connection, queue, **{"x-stream-offset": "first"})
        second = subscribe(connection, queue, **{"x-stream-offset": 2})
        for message in first.wait_for(4):
            first.channel.basic_ack(message.delivery_tag)
        second.wait_for(2)
        assert [offset_of(m) for m in first.settle()] == [0, 1, 2, 3]
        assert [offset_of(m) for m in second.deliveries] == [2, 3]
        assert not any(m.redelivered for m in first.deliveries + second.deliveries)
        assert message_count(session.channel, queue) == 4
        assert read(connection, queue, 4, **{"x-stream-offset": "first"}) == expected(range(4))


def test_a_stream_takes_messages_routed_by_exchanges(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        exchange = session.declare_exchange("topic")
        session.channel.queue_bind(queue, exchange, "orders.*")
        session.channel.confirm_delivery()
        for key in ("orders.new", "invoices.new", "orders.paid"):
            properties = BasicProperties(content_type="text/plain", headers={"key": key}, priority=3)
            session.channel.basic_publish(exchange, key, key.encode(), properties)
        consumer = subscribe(session.connection, queue, **{"x-stream-offset": "first"})
        deliveries = consumer.wait_for(2)
        assert [(m.routing_key, m.body) for m in consumer.settle()] == [
            ("orders.new", b"orders.new"),
            ("orders.paid", b"orders.paid"),
        ]
        # The offset header joins the publisher's headers; every other property stays.
        assert [(m.properties.content_type, m.properties.priority, m.properties.headers) for m in deliveries] == [
            ("text/plain", 3, {"key": "orders.new", "x-stream-offset": 0}),
            ("text/plain", 3, {"key": "orders.paid", "x-stream-offset": 1}),
        ]


def test_prefetch_limits_unacked_deliveries_and_acks_release_credit(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 5)
        consumer = subscribe(session.connection, queue, prefetch=2, **{"x-stream-offset": "first"})
        assert len(consumer.settle()) == 2
        consumer.channel.basic_ack(consumer.deliveries[1].delivery_tag, multiple=True)
        assert [offset_of(m) for m in consumer.wait_for(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("method", ["basic.nack", "basic.reject"])
def test_a_stream_delivery_cannot_be_nacked_or_rejected(broker: BrokerProcess, method: str) -> None:
    """As in RabbitMQ: a log keeps its messages, so there is nothing to reject (540)."""
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 1)
        consumer = subscribe(session.connection, queue, **{"x-stream-offset": "first"})
        [message] = consumer.wait_for(1)
        refused = "basic.nack and basic.reject not supported by stream queues"
        text = f"NOT_IMPLEMENTED - {refused} {resource('queue', queue)}"
        with closes_connection(540, text):
            if method == "basic.nack":
                consumer.channel.basic_nack(message.delivery_tag, requeue=True)
            else:
                consumer.channel.basic_reject(message.delivery_tag)
            process_for(session.connection, 1.0)


def test_a_stream_consumer_needs_a_prefetch(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        with closes_channel(
            406, f"PRECONDITION_FAILED - consumer prefetch count is not set for stream {resource('queue', queue)}"
        ):
            Consumer(session.channel, queue)


@pytest.mark.parametrize("refused", ["no-ack", "global-qos", "basic.get", "purge"])
def test_what_a_stream_does_not_implement(broker: BrokerProcess, refused: str) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        channel = session.channel
        texts = {
            "no-ack": f"automatic acknowledgement not supported by stream {resource('queue', queue)}",
            "global-qos": f"{resource('queue', queue)} does not support global qos",
            "basic.get": f"basic.get not supported by stream queues {resource('queue', queue)}",
            "purge": f"queue.purge not supported by stream queues {resource('queue', queue)}",
        }
        with closes_connection(540, f"NOT_IMPLEMENTED - {texts[refused]}"):
            if refused == "no-ack":
                channel.basic_qos(prefetch_count=10)
                Consumer(channel, queue, auto_ack=True)
            elif refused == "global-qos":
                channel.basic_qos(prefetch_count=10)
                channel.basic_qos(prefetch_count=10, global_qos=True)
                Consumer(channel, queue)
            elif refused == "basic.get":
                channel.basic_get(queue)
            else:
                channel.queue_purge(queue)


# --------------------------------------------------------------------------- filters


def test_filters_select_by_filter_value_exactly(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 2, headers={"x-stream-filter-value": "red"})
        publish(session, queue, 2, start=2, headers={"x-stream-filter-value": "blue"})
        publish(session, queue, 2, start=4)  # unfiltered
        publish(session, queue, 1, start=6, headers={"x-stream-filter-value": "green"})
        connection = session.connection
        first = {"x-stream-offset": "first"}
        assert read(connection, queue, 2, **first, **{"x-stream-filter": "red"}) == expected(range(2))
        assert read(connection, queue, 3, **first, **{"x-stream-filter": ["blue", "green"]}) == expected([2, 3, 6])
        assert read(
            connection,
            queue,
            4,
            **first,
            **{
                "x-stream-filter": "blue",
                "x-stream-match-unfiltered": True,
            },
        ) == expected(range(2, 6))
        assert read(connection, queue, 7, **first) == expected(range(7))


# --------------------------------------------------------------------------- retention


def test_retention_by_length_keeps_the_newest_segments(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session, **SMALL_SEGMENT, **{"x-max-length": 10})
        publish(session, queue, 40)
        count = message_count(session.channel, queue)
        first = first_offset(session, queue)
        assert 10 <= count < 20 and first == 40 - count
        assert read(session.connection, queue, count, **{"x-stream-offset": "first"}) == expected(range(first, 40))


def test_retention_by_bytes(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session, **SMALL_SEGMENT, **{"x-max-length-bytes": 600})
        publish(session, queue, 40)
        count = message_count(session.channel, queue)
        assert 0 < count < 25 and first_offset(session, queue) == 40 - count


def test_retention_by_age(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session, **SMALL_SEGMENT, **{"x-max-age": "1s"})
        publish(session, queue, 12)
        time.sleep(1.1)
        publish(session, queue, 12, start=12)  # new segments: retention looks again
        first = first_offset(session, queue)
        assert 0 < first <= 12 and message_count(session.channel, queue) == 24 - first


def test_the_segment_being_written_is_never_dropped(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session, **SMALL_SEGMENT, **{"x-max-length": 0})
        publish(session, queue, 10)
        count = message_count(session.channel, queue)
        assert 0 < count < 10
        assert read(session.connection, queue, count, **{"x-stream-offset": "first"}) == expected(range(10 - count, 10))


# --------------------------------------------------------------------------- offset tracking


def test_a_named_consumer_resumes_after_its_last_contiguous_ack(broker: BrokerProcess) -> None:
    """The stored offset is what was acked, not what was read: nothing unacked is skipped."""
    tag = f"tracker-{uuid.uuid4().hex[:8]}"
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        tracker = subscribe(session.connection, queue, consumer_tag=tag)  # nothing stored: next
        publish(session, queue, 8)
        deliveries = tracker.wait_for(8)
        for message in deliveries:
            if offset_of(message) in (0, 1, 2, 4, 5):  # 3 stays unacked
                tracker.channel.basic_ack(message.delivery_tag)
        tracker.channel.close()
        assert read(session.connection, queue, 5, consumer_tag=tag) == expected(range(3, 8))
        # Generated tags are not tracked: such a consumer starts at the next offset.
        assert subscribe(session.connection, queue).settle() == []


def test_stored_offsets_and_the_log_survive_a_restart_and_a_crash(fresh_broker: BrokerProcess) -> None:
    tag = "tracker"
    with open_session(fresh_broker.url) as session:
        queue = declare_lasting_stream(session, **SMALL_SEGMENT)
        tracker = subscribe(session.connection, queue, consumer_tag=tag)
        publish(session, queue, 10)
        for message in tracker.wait_for(10)[:6]:
            tracker.channel.basic_ack(message.delivery_tag)
        tracker.settle(0.1)  # the acks reach the broker before it stops
    fresh_broker.restart()
    with open_session(fresh_broker.url) as session:
        publish(session, queue, 10, start=10)
    fresh_broker.kill()
    fresh_broker.start()
    connection = connect(fresh_broker.url)
    try:
        assert read(connection, queue, 14, consumer_tag=tag) == expected(range(6, 20))
        with open_session(fresh_broker.url) as session:
            publish(session, queue, 5, start=20)  # offsets go on after the crash, none reused
            assert read(connection, queue, 25, **{"x-stream-offset": "first"}) == expected(range(25))
            assert message_count(session.channel, queue) == 25
    finally:
        connection.close()


def test_unconfirmed_messages_lost_in_a_crash_leave_no_gap_and_no_reused_offset(fresh_broker: BrokerProcess) -> None:
    with open_session(fresh_broker.url) as session:
        queue = declare_lasting_stream(session)
        publish(session, queue, 5)
        for index in range(5, 200):  # no confirms: some may be lost in the crash
            session.channel.basic_publish("", queue, f"m{index}".encode())
    fresh_broker.kill()
    fresh_broker.start()
    with open_session(fresh_broker.url) as session:
        kept = message_count(session.channel, queue)
        assert 5 <= kept <= 200
        publish(session, queue, 1, start=kept)
        assert read(session.connection, queue, kept + 1, **{"x-stream-offset": "first"}) == expected(range(kept + 1))


# --------------------------------------------------------------------------- stream info


def test_stream_info_reports_offsets_count_and_times(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        empty = stream_info(session, queue)
        assert empty.correlation_id == "req-1"
        assert empty.headers == {"x-stream-first-offset": 0, "x-stream-next-offset": 0, "x-stream-message-count": 0}
        before = int(time.time() * 1000)
        publish(session, queue, 3)
        headers = stream_info(session, queue, correlation_id="req-2").headers or {}
        assert {
            key: headers[key] for key in ("x-stream-first-offset", "x-stream-next-offset", "x-stream-message-count")
        } == {"x-stream-first-offset": 0, "x-stream-next-offset": 3, "x-stream-message-count": 3}
        assert before <= headers["x-stream-first-timestamp"] <= headers["x-stream-last-timestamp"] <= time.time() * 1000


def test_stream_info_replies_to_a_queue_and_reports_errors(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        replies = session.declare_queue("replies")
        classic = session.declare_queue("classic")
        consumer = Consumer(session.channel, replies, auto_ack=True)
        for name in (classic, "no-such-queue"):
            session.channel.basic_publish(
                "", STREAM_INFO, name.encode(), BasicProperties(reply_to=replies, correlation_id=name)
            )
        answers = {m.properties.correlation_id: (m.properties.headers or {}) for m in consumer.wait_for(2)}
        assert answers == {
            classic: {"x-error": f"{resource('queue', classic)} is not a stream"},
            "no-such-queue": {"x-error": f"{resource('queue', 'no-such-queue')} does not exist"},
        }


def test_a_request_without_reply_to_is_unroutable(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        returned: list[bytes] = []
        session.channel.add_on_return_callback(lambda _ch, _method, _props, body: returned.append(body))
        session.channel.basic_publish("", STREAM_INFO, b"whatever", mandatory=True)
        process_until(session.connection, lambda: bool(returned), "the request came back")
        assert returned == [b"whatever"]
