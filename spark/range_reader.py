"""Read one range of stream offsets: the body of every Spark task of this source.

A stream is immutable, so reading [start, end) gives the same rows every time; that is
what lets Spark re-run a task, or replay a micro-batch after a crash, without duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from lavin.client.wire import AmqpError, Delivery, connect
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType
from pyspark_lavin.offsets import OffsetRange, checked_start
from pyspark_lavin.options import LavinOptions
from pyspark_lavin.rows import STREAM_OFFSET_HEADER, RecordBatchBuilder

BATCH_ROWS = 10_000
BATCH_BODY_BYTES = 16 << 20


@dataclass
class RangePartition(InputPartition):
    """One Spark task: the offsets [start, end) of the queue named in the options."""

    start: int
    end: int


def read_deliveries(options: LavinOptions, offsets: OffsetRange) -> Iterator[tuple[int, Delivery]]:
    """Each offset of the range once, in order, with its message."""
    if len(offsets) == 0:
        return
    with connect(options.uri, options.read_timeout, client_properties=options.client_properties) as client:
        client.qos(options.prefetch)
        client.consume(options.queue, arguments={"x-stream-offset": offsets.start})
        ack_every = max(1, options.prefetch // 2)
        expected = offsets.start
        received = 0
        while expected < offsets.end:
            try:
                delivery = client.next_delivery()
            except TimeoutError as timeout:
                raise TimeoutError(
                    f"offsets {expected}..{offsets.end - 1} of {options.queue!r} did not arrive"
                    f" ({timeout}); the option readTimeoutMs sets how long to wait"
                ) from None
            received += 1
            # Acks only return prefetch credit: a stream keeps its messages either way.
            if received % ack_every == 0:
                client.ack(delivery.delivery_tag, multiple=True)
            offset = stream_offset(delivery, options.queue)
            if offset < expected:
                continue  # a stream consumer may start at a chunk boundary before the offset
            if offset > expected:
                checked_start(expected, offset, options.fail_on_data_loss, options.queue)
            if offset >= offsets.end:
                return
            yield offset, delivery
            expected = offset + 1


def stream_offset(delivery: Delivery, queue: str) -> int:
    offset = (delivery.properties.headers or {}).get(STREAM_OFFSET_HEADER)
    if not isinstance(offset, int):
        raise AmqpError(
            f"a message from {queue!r} has no {STREAM_OFFSET_HEADER} header:"
            " is it a stream queue (x-queue-type: stream)?"
        )
    return offset


def read_record_batches(
    options: LavinOptions, schema: StructType, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return  # Spark turns an empty plan into one bare InputPartition(None)
    builder = RecordBatchBuilder(schema)
    for offset, delivery in read_deliveries(options, OffsetRange(partition.start, partition.end)):
        builder.add(offset, delivery)
        if len(builder) >= BATCH_ROWS or builder.body_bytes >= BATCH_BODY_BYTES:
            yield builder.build()
    if len(builder):
        yield builder.build()
