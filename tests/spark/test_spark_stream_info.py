"""The stream-info request: parsing its reply, and asking a real broker."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess
from helpers import open_session, wait_until
from pyspark_lavin.offsets import StreamBounds
from pyspark_lavin.stream_info import (
    StreamInfoError,
    fetch_stream_bounds,
    parse_stream_bounds,
)


def test_parse_a_reply() -> None:
    headers = {"x-stream-first-offset": 3, "x-stream-next-offset": 10, "x-stream-message-count": 7}
    assert parse_stream_bounds("q", headers) == StreamBounds(first=3, next=10)


def test_parse_an_error_reply() -> None:
    with pytest.raises(StreamInfoError, match=r"^queue 'q' does not exist$"):
        parse_stream_bounds("q", {"x-error": b"queue 'q' does not exist"})
    with pytest.raises(StreamInfoError, match="lacks offsets"):
        parse_stream_bounds("q", {})


def test_a_stream_reports_what_it_holds(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue("info", durable=True, arguments={"x-queue-type": "stream"})
        empty = fetch_stream_bounds(broker.url, queue, timeout=5)
        assert empty.next == empty.first
        for body in (b"a", b"b", b"c"):
            session.channel.basic_publish("", queue, body)
        wait_until(
            lambda: fetch_stream_bounds(broker.url, queue, timeout=5) == StreamBounds(empty.first, empty.first + 3),
            "the stream holds three messages",
        )


def test_a_classic_or_missing_queue_is_an_error(broker: BrokerProcess) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue("info-classic")
        with pytest.raises(StreamInfoError, match="is not a stream"):
            fetch_stream_bounds(broker.url, queue, timeout=5)
    with pytest.raises(StreamInfoError, match="does not exist"):
        fetch_stream_bounds(broker.url, "no-such-queue-anywhere", timeout=5)
