"""LavinMQ's extras for stream consumers, through pika: a negative `x-stream-offset` replays
the last N messages, and `x-stream-automatic-offset-tracking` turns server-side offset
tracking on (also with an explicit offset) or off."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from broker_process import BrokerProcess
from helpers import Consumer, closes_channel, connect, open_session, process_for
from queue_helpers import invalid_arg_text
from test_streams import (
    SMALL_SEGMENT,
    declare_lasting_stream,
    declare_stream,
    expected,
    first_offset,
    offset_of,
    publish,
    read,
    subscribe,
)

pytestmark = pytest.mark.timeout(60)

TRACKING = "x-stream-automatic-offset-tracking"


def new_tag() -> str:
    return f"named-{uuid.uuid4().hex[:8]}"


def ack_first(consumer: Consumer, delivered: int, acked: int) -> list[int]:
    """Wait for `delivered` messages, ack the first `acked`; their offsets, all of them."""
    deliveries = consumer.wait_for(delivered)
    for message in deliveries[:acked]:
        consumer.channel.basic_ack(message.delivery_tag)
    consumer.settle(0.1)  # the acks reach the broker
    return [offset_of(message) for message in deliveries]


def read_after_reconnect(url: str, queue: str, count: int, **arguments: Any) -> list[tuple[int, bytes]]:
    connection = connect(url)
    try:
        return read(connection, queue, count, **arguments)
    finally:
        connection.close()


# --------------------------------------------------------------------------- negative offsets


@pytest.mark.parametrize(("last", "offsets"), [(2, range(3, 5)), (5, range(5)), (9, range(5))])
def test_a_negative_offset_replays_the_last_n_messages(broker: BrokerProcess, last: int, offsets: range) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 5)
        assert read(session.connection, queue, len(offsets), **{"x-stream-offset": -last}) == expected(offsets)


def test_a_negative_offset_then_follows_new_messages(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 4)
        consumer = subscribe(session.connection, queue, **{"x-stream-offset": -1})
        assert [offset_of(m) for m in consumer.wait_for(1)] == [3]
        publish(session, queue, 2, start=4)
        assert [(offset_of(m), m.body) for m in consumer.wait_for(3)] == expected(range(3, 6))


def test_a_negative_offset_stops_at_the_oldest_message_kept(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session, **SMALL_SEGMENT, **{"x-max-length": 4})
        publish(session, queue, 30)
        first = first_offset(session, queue)
        assert first > 0  # retention dropped the oldest segments
        connection = session.connection
        assert read(connection, queue, 30 - first, **{"x-stream-offset": -1000}) == expected(range(first, 30))
        assert read(connection, queue, 2, **{"x-stream-offset": -2}) == expected(range(28, 30))


def test_a_negative_offset_on_an_empty_stream_waits_for_the_next_message(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        consumer = subscribe(session.connection, queue, **{"x-stream-offset": -3})
        process_for(session.connection)
        assert consumer.deliveries == []
        publish(session, queue, 1)
        assert [offset_of(m) for m in consumer.wait_for(1)] == [0]


# --------------------------------------------------------------------------- automatic tracking


def test_the_flag_resumes_a_named_consumer_after_a_reconnect(broker: BrokerProcess) -> None:
    """With the flag, a stored offset wins over `x-stream-offset`."""
    tag = new_tag()
    arguments = {TRACKING: True, "x-stream-offset": "first"}
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 6)
        first_run = connect(broker.url)
        tracker = subscribe(first_run, queue, consumer_tag=tag, **arguments)  # nothing stored: first
        assert ack_first(tracker, 6, 4) == list(range(6))
        first_run.close()
        assert read_after_reconnect(broker.url, queue, 2, consumer_tag=tag, **arguments) == expected(range(4, 6))
        # The string "true" works as well (LavinMQ reads it too).
        arguments[TRACKING] = "true"
        assert read_after_reconnect(broker.url, queue, 2, consumer_tag=tag, **arguments) == expected(range(4, 6))


def test_without_a_stored_offset_the_flag_starts_at_the_given_offset(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 6)
        connection = session.connection
        tag = new_tag()
        tracker = subscribe(connection, queue, consumer_tag=tag, **{TRACKING: True, "x-stream-offset": 2})
        assert ack_first(tracker, 4, 1) == [2, 3, 4, 5]
        tracker.channel.close()
        # Resumes after the one ack, not at 2 and not at the read position.
        again = {TRACKING: True, "x-stream-offset": -1}
        assert read(connection, queue, 3, consumer_tag=tag, **again) == expected(range(3, 6))
        # A negative offset with the flag: the last N, then tracked.
        other = new_tag()
        tracker = subscribe(connection, queue, consumer_tag=other, **{TRACKING: True, "x-stream-offset": -2})
        assert ack_first(tracker, 2, 2) == [4, 5]
        tracker.channel.close()
        publish(session, queue, 1, start=6)
        assert read(connection, queue, 1, consumer_tag=other, **{TRACKING: True, "x-stream-offset": "first"}) == (
            expected([6])
        )


def test_an_explicit_offset_without_the_flag_is_not_tracked(broker: BrokerProcess) -> None:
    tag = new_tag()
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 5)
        connection = session.connection
        tracker = subscribe(connection, queue, consumer_tag=tag)  # tracked, starts at next
        process_for(connection)
        publish(session, queue, 1, start=5)
        assert ack_first(tracker, 1, 1) == [5]
        tracker.channel.close()
        # An offset without the flag ignores the stored offset (6) ...
        assert read(connection, queue, 6, consumer_tag=tag, **{"x-stream-offset": "first"}) == expected(range(6))
        # ... and the flag with the same offset takes it.
        publish(session, queue, 1, start=6)
        with_flag = {TRACKING: True, "x-stream-offset": "first"}
        assert read(connection, queue, 1, consumer_tag=tag, **with_flag) == expected([6])


def test_the_flag_false_turns_tracking_off(broker: BrokerProcess) -> None:
    tag = new_tag()
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        publish(session, queue, 3)
        connection = session.connection
        # No offset and the flag false: starts at next, stores nothing.
        untracked = subscribe(connection, queue, consumer_tag=tag, **{TRACKING: False})
        process_for(connection)
        publish(session, queue, 2, start=3)
        assert ack_first(untracked, 2, 2) == [3, 4]
        untracked.channel.close()
        publish(session, queue, 1, start=5)
        # Tracked now, but nothing was stored: next, not 5.
        waiting = subscribe(connection, queue, consumer_tag=tag)
        assert waiting.settle() == []
        waiting.channel.close()
        # A stored offset is ignored with the flag false.
        tracker = subscribe(connection, queue, consumer_tag=tag, **{TRACKING: True, "x-stream-offset": "first"})
        assert ack_first(tracker, 6, 2) == list(range(6))
        tracker.channel.close()
        off = {TRACKING: False, "x-stream-offset": "first"}
        assert read(connection, queue, 6, consumer_tag=tag, **off) == expected(range(6))
        assert read(connection, queue, 4, consumer_tag=tag, **{TRACKING: True}) == expected(range(2, 6))


def test_the_flag_resumes_after_a_broker_restart(fresh_broker: BrokerProcess) -> None:
    tag = new_tag()
    arguments = {TRACKING: True, "x-stream-offset": "first"}
    with open_session(fresh_broker.url) as session:
        queue = declare_lasting_stream(session, **SMALL_SEGMENT)
        publish(session, queue, 10)
        tracker = subscribe(session.connection, queue, consumer_tag=tag, **arguments)
        assert ack_first(tracker, 10, 7) == list(range(10))
    fresh_broker.restart()
    with open_session(fresh_broker.url) as session:
        publish(session, queue, 2, start=10)
    assert read_after_reconnect(fresh_broker.url, queue, 5, consumer_tag=tag, **arguments) == expected(range(7, 12))


@pytest.mark.parametrize(("value", "shown"), [(1, "{signedint,1}"), ("yes", '{longstr,<<"yes">>}')])
def test_an_invalid_flag_is_refused(broker: BrokerProcess, value: object, shown: str) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        session.channel.basic_qos(prefetch_count=10)
        text = invalid_arg_text(TRACKING, queue, "{invalid_automatic_offset_tracking_arg," + shown + "}")
        with closes_channel(406, text):
            Consumer(session.channel, queue, consumer_tag=new_tag(), arguments={TRACKING: value})


def test_the_flag_does_not_excuse_an_invalid_offset(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = declare_stream(session)
        session.channel.basic_qos(prefetch_count=10)
        text = invalid_arg_text("x-stream-offset", queue, '{invalid_stream_offset_arg,{longstr,<<"bogus">>}}')
        with closes_channel(406, text):
            Consumer(
                session.channel, queue, consumer_tag=new_tag(), arguments={TRACKING: True, "x-stream-offset": "bogus"}
            )
