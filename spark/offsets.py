"""Offsets and ranges: the pure arithmetic between Spark's checkpoints and a stream's log.

A Spark offset is `{"queue": name, "offset": n}` where n is the next stream offset to read,
so a micro-batch covers the half-open range [previous n, n). Spark compares offsets as JSON
text, so the dict is always built here, with one key order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark_lavin.options import EndSpec, StartSpec

# Spark offsets hold JSON values; this source's are {"queue": str, "offset": int}.
SparkOffset = dict[str, Any]


class DataLossError(RuntimeError):
    """Offsets the query still has to read were dropped by the stream's retention."""


class CheckpointMismatchError(ValueError):
    """A checkpoint written for another queue was handed to this one."""


@dataclass(frozen=True)
class StreamBounds:
    """What a stream holds now: offsets first..next-1."""

    first: int
    next: int


@dataclass(frozen=True)
class OffsetRange:
    """The half-open range [start, end) of stream offsets."""

    start: int
    end: int

    def __len__(self) -> int:
        return max(0, self.end - self.start)


def to_spark_offset(queue: str, offset: int) -> SparkOffset:
    return {"queue": queue, "offset": offset}


def from_spark_offset(spark_offset: SparkOffset, queue: str) -> int:
    recorded_queue = spark_offset.get("queue")
    if recorded_queue != queue:
        raise CheckpointMismatchError(
            f"the checkpoint holds offsets of queue {recorded_queue!r}, not {queue!r}:"
            " use a new checkpoint location for another queue"
        )
    offset = spark_offset.get("offset")
    if not isinstance(offset, int):
        raise CheckpointMismatchError(f"not an offset of this source: {dict(spark_offset)!r}")
    return offset


def checked_start(requested: int, first: int, fail_on_data_loss: bool, queue: str) -> int:
    """Where reading can start when `requested` may have been dropped by retention."""
    if requested >= first:
        return requested
    if fail_on_data_loss:
        raise DataLossError(
            f"offsets {requested}..{first - 1} of stream queue {queue!r} are no longer stored"
            f" (retention dropped them); the first stored offset is {first}. Set the option"
            " failOnDataLoss=false to continue from there."
        )
    return first


def resume_from(checkpointed: int, bounds: StreamBounds, fail_on_data_loss: bool, queue: str) -> int:
    """Where a micro-batch starts, given where the checkpoint says the last one ended."""
    if checkpointed > bounds.next and fail_on_data_loss:
        raise DataLossError(
            f"the checkpoint is at offset {checkpointed} but stream queue {queue!r} ends at"
            f" {bounds.next}: was the queue deleted and declared again? Use a new checkpoint"
            " location, or set the option failOnDataLoss=false to wait for that offset."
        )
    return checked_start(checkpointed, bounds.first, fail_on_data_loss, queue)


def resolve_start(spec: StartSpec, bounds: StreamBounds, fail_on_data_loss: bool, queue: str) -> int:
    if spec == "earliest":
        return bounds.first
    if spec == "latest":
        return bounds.next
    return checked_start(spec, bounds.first, fail_on_data_loss, queue)


def resolve_end(spec: EndSpec, bounds: StreamBounds) -> int:
    """A batch read stops at what is stored now, even when asked for more."""
    return bounds.next if spec == "latest" else min(spec, bounds.next)


def micro_batch_end(start: int, tail: int, max_records: int | None) -> int:
    """The end of the next micro-batch: up to the tail, at most max_records past start."""
    end = tail if max_records is None else min(tail, start + max_records)
    return max(start, end)


def split_range(whole: OffsetRange, num_partitions: int, min_records_per_partition: int) -> list[OffsetRange]:
    """Contiguous slices of nearly equal size; each costs a connection, so small ranges
    get fewer slices than asked for."""
    size = len(whole)
    if size == 0:
        return []
    count = max(1, min(num_partitions, size // min_records_per_partition))
    step, remainder = divmod(size, count)
    slices = []
    start = whole.start
    for index in range(count):
        end = start + step + (1 if index < remainder else 0)
        slices.append(OffsetRange(start, end))
        start = end
    return slices
