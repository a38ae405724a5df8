"""Offset arithmetic: no broker, no JVM."""

from __future__ import annotations

import json

import pytest
from pyspark_lavin.offsets import (
    CheckpointMismatchError,
    DataLossError,
    OffsetRange,
    StreamBounds,
    checked_start,
    from_spark_offset,
    micro_batch_end,
    resolve_end,
    resolve_start,
    resume_from,
    split_range,
    to_spark_offset,
)

BOUNDS = StreamBounds(first=100, next=250)


def test_spark_offset_round_trips_through_json_with_a_stable_key_order() -> None:
    offset = to_spark_offset("orders", 42)
    assert json.dumps(offset) == '{"queue": "orders", "offset": 42}'
    assert from_spark_offset(json.loads(json.dumps(offset)), "orders") == 42


def test_a_checkpoint_of_another_queue_is_refused() -> None:
    with pytest.raises(CheckpointMismatchError, match="'orders', not 'invoices'"):
        from_spark_offset(to_spark_offset("orders", 1), "invoices")


@pytest.mark.parametrize(("spec", "expected"), [("earliest", 100), ("latest", 250), (100, 100), (180, 180), (900, 900)])
def test_resolve_start(spec: str | int, expected: int) -> None:
    assert resolve_start(spec, BOUNDS, True, "q") == expected


def test_start_below_the_first_offset_fails_with_a_clear_error() -> None:
    with pytest.raises(DataLossError, match=r"offsets 20\.\.99 .* first stored offset is 100"):
        resolve_start(20, BOUNDS, True, "q")


def test_start_below_the_first_offset_moves_up_when_data_loss_is_allowed() -> None:
    assert resolve_start(20, BOUNDS, False, "q") == 100
    assert checked_start(99, 100, False, "q") == 100


def test_resume_from_a_checkpoint() -> None:
    assert resume_from(180, BOUNDS, True, "q") == 180
    assert resume_from(250, BOUNDS, True, "q") == 250
    assert resume_from(20, BOUNDS, False, "q") == 100
    with pytest.raises(DataLossError, match=r"offsets 20\.\.99"):
        resume_from(20, BOUNDS, True, "q")


def test_a_checkpoint_beyond_the_stream_fails_unless_data_loss_is_allowed() -> None:
    with pytest.raises(DataLossError, match="at offset 300 but stream queue 'q' ends at 250"):
        resume_from(300, BOUNDS, True, "q")
    assert resume_from(300, BOUNDS, False, "q") == 300


@pytest.mark.parametrize(("spec", "expected"), [("latest", 250), (200, 200), (251, 250)])
def test_resolve_end_never_passes_what_is_stored(spec: str | int, expected: int) -> None:
    assert resolve_end(spec, BOUNDS) == expected


@pytest.mark.parametrize(
    ("start", "tail", "max_records", "expected"),
    [
        (0, 1000, None, 1000),
        (0, 1000, 300, 300),
        (900, 1000, 300, 1000),
        (1000, 1000, 300, 1000),  # nothing new: the start comes back
        (1200, 1000, None, 1200),  # never behind the start
    ],
)
def test_micro_batch_end(start: int, tail: int, max_records: int | None, expected: int) -> None:
    assert micro_batch_end(start, tail, max_records) == expected


def test_split_range_covers_the_range_in_contiguous_nearly_equal_slices() -> None:
    slices = split_range(OffsetRange(10, 1010), 3, 1)
    assert slices == [OffsetRange(10, 344), OffsetRange(344, 677), OffsetRange(677, 1010)]


def test_split_range_makes_fewer_slices_than_asked_for_small_ranges() -> None:
    assert split_range(OffsetRange(0, 2500), 8, 1000) == [
        OffsetRange(0, 1250),
        OffsetRange(1250, 2500),
    ]
    assert split_range(OffsetRange(0, 10), 4, 1000) == [OffsetRange(0, 10)]


def test_split_range_of_nothing_is_empty() -> None:
    assert split_range(OffsetRange(5, 5), 4, 1) == []
    assert split_range(OffsetRange(7, 5), 4, 1) == []
