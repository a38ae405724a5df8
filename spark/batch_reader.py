"""Batch reads: one fixed range of offsets, resolved once when Spark plans the query."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType
from pyspark_lavin.offsets import OffsetRange, resolve_end, resolve_start, split_range
from pyspark_lavin.options import LavinOptions
from pyspark_lavin.range_reader import RangePartition, read_record_batches
from pyspark_lavin.stream_info import fetch_stream_bounds


class LavinBatchReader(DataSourceReader):
    def __init__(self, options: LavinOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        options = self.options
        bounds = fetch_stream_bounds(options.uri, options.queue, options.read_timeout, options.client_properties)
        start = resolve_start(options.starting_offsets, bounds, options.fail_on_data_loss, options.queue)
        whole = OffsetRange(start, resolve_end(options.ending_offsets, bounds))
        slices = split_range(whole, options.num_partitions, options.min_records_per_partition)
        return [RangePartition(piece.start, piece.end) for piece in slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_record_batches(self.options, self.schema, partition)
