"""Micro-batch reads: Spark offsets map 1:1 to stream offsets.

Every method but read() runs in one long-lived Python process on the driver; read() runs in
executor workers on other copies of this object, so it keeps no state of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType
from pyspark_lavin.offsets import (
    OffsetRange,
    SparkOffset,
    StreamBounds,
    from_spark_offset,
    micro_batch_end,
    resolve_start,
    resume_from,
    split_range,
    to_spark_offset,
)
from pyspark_lavin.options import LavinOptions
from pyspark_lavin.range_reader import RangePartition, read_record_batches
from pyspark_lavin.stream_info import fetch_stream_bounds


class LavinStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: LavinOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        # Set by trigger(availableNow=True): the tail when the query started.
        self._target: int | None = None

    def initialOffset(self) -> SparkOffset:
        """Where a query without a checkpoint starts."""
        start = resolve_start(
            self.options.starting_offsets,
            self._bounds(),
            self.options.fail_on_data_loss,
            self.options.queue,
        )
        return to_spark_offset(self.options.queue, start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._bounds().next

    def latestOffset(self, start: SparkOffset, limit: ReadLimit) -> SparkOffset:
        """The end of the next micro-batch; `start` itself when there is nothing new."""
        options = self.options
        bounds = self._bounds()
        begin = resume_from(
            from_spark_offset(start, options.queue),
            bounds,
            options.fail_on_data_loss,
            options.queue,
        )
        tail = bounds.next if self._target is None else min(self._target, bounds.next)
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = micro_batch_end(begin, tail, max_records)
        return start if end == begin else to_spark_offset(options.queue, end)

    def partitions(self, start: SparkOffset, end: SparkOffset) -> list[InputPartition]:
        queue = self.options.queue
        whole = OffsetRange(from_spark_offset(start, queue), from_spark_offset(end, queue))
        slices = split_range(whole, self.options.num_partitions, self.options.min_records_per_partition)
        return [RangePartition(piece.start, piece.end) for piece in slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_record_batches(self.options, self.schema, partition)

    def _bounds(self) -> StreamBounds:
        return fetch_stream_bounds(
            self.options.uri, self.options.queue, self.options.read_timeout, self.options.client_properties
        )
