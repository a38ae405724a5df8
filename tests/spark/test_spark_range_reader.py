"""What one Spark task does, without Spark: read a range of offsets from a real broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from helpers import Session, open_session, wait_until
from pyspark_lavin.offsets import DataLossError, OffsetRange
from pyspark_lavin.options import parse_options
from pyspark_lavin.range_reader import (
    RangePartition,
    read_deliveries,
    read_record_batches,
)
from pyspark_lavin.schema import ROW_SCHEMA
from pyspark_lavin.stream_info import fetch_stream_bounds

# Segments of three or four small messages, and at most ten messages kept: publishing 40
# makes retention drop the oldest segments.
RETAINING = {"x-stream-max-segment-size-bytes": 200, "x-max-length": 10}


def declare_stream(session: Session, **arguments: object) -> str:
    return session.declare_queue("range", durable=True, arguments={"x-queue-type": "stream", **arguments})


def publish(session: Session, queue: str, count: int) -> int:
    """Publish b"message-<n>" for n in range(count); return the offset of message-0."""
    base = fetch_stream_bounds(session.url, queue, timeout=5).next
    for index in range(count):
        session.channel.basic_publish("", queue, f"message-{index}".encode())
    wait_until(
        lambda: fetch_stream_bounds(session.url, queue, timeout=5).next == base + count,
        f"{count} messages are stored",
    )
    return base


@pytest.fixture
def session(broker: BrokerProcess) -> Iterator[Session]:
    with open_session(broker.url) as session:
        yield session


def test_a_range_is_read_exactly(session: Session) -> None:
    queue = declare_stream(session)
    base = publish(session, queue, 30)
    options = parse_options({"uri": session.url, "queue": queue, "prefetch": "4"})
    wanted = OffsetRange(base + 5, base + 25)
    read = [(offset, delivery.body) for offset, delivery in read_deliveries(options, wanted)]
    assert read == [(base + n, f"message-{n}".encode()) for n in range(5, 25)]
    assert list(read_deliveries(options, OffsetRange(base + 7, base + 7))) == []


def test_record_batches_cover_the_partition(session: Session) -> None:
    queue = declare_stream(session)
    base = publish(session, queue, 30)
    options = parse_options({"uri": session.url, "queue": queue})
    batches = list(read_record_batches(options, ROW_SCHEMA, RangePartition(base + 10, base + 20)))
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [row["offset"] for row in rows] == list(range(base + 10, base + 20))
    assert rows[0]["body"] == b"message-10"


def test_offsets_dropped_by_retention_fail_the_read_or_are_skipped(session: Session) -> None:
    queue = declare_stream(session, **RETAINING)
    base = publish(session, queue, 40)
    first = fetch_stream_bounds(session.url, queue, timeout=5).first
    assert first > base
    whole = OffsetRange(base, base + 40)
    strict = parse_options({"uri": session.url, "queue": queue})
    with pytest.raises(DataLossError, match=f"offsets {base}..{first - 1} .* no longer stored"):
        list(read_deliveries(strict, whole))
    lenient = parse_options({"uri": session.url, "queue": queue, "failOnDataLoss": "false"})
    offsets = [offset for offset, _ in read_deliveries(lenient, whole)]
    assert offsets == list(range(first, base + 40))
