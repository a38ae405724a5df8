"""The stream store: implicit offsets, lookups by offset and time, retention, recovery after
a clean stop and after a crash, and the consumer offsets file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lavin.api import (
    InvalidArgument,
    Retention,
    StreamType,
    parse_duration,
)
from lavin.api.message import Message, encode_properties
from lavin.plugins.queues.stream import StreamQueueType
from lavin.storage.streams.stream_index import STRIDE
from lavin.storage.streams.stream_offsets import OFFSETS_FILE, ConsumerOffsets
from lavin.storage.streams.stream_store import StreamStore
from lavin.storage.toolkit import SegmentStorage

PERSISTENT = encode_properties({"delivery_mode": 2})
SMALL_SEGMENT = 400  # a handful of small records per segment


def message(index: int, timestamp: int = 0) -> Message:
    return Message("", "s", PERSISTENT, f"m{index}".encode(), timestamp or 1_000 + index)


def fill(store: StreamStore, count: int, start: int = 0) -> list[int]:
    offsets = [store.push(message(index)) for index in range(start, start + count)]
    store.flush()
    store.synced(store.written_offset)
    return offsets


def read_all(store: StreamStore, start: int = 0) -> list[tuple[int, bytes]]:
    cursor = store.cursor(start)
    found = []
    while (item := cursor.next(store.end_offset)) is not None:
        found.append((item[0], item[1].body))
    return found


def segment_files(path: Path, prefix: str = "msgs.") -> list[str]:
    return sorted(name for name in os.listdir(path) if name.startswith(prefix))


def test_offsets_count_up_from_zero_across_segments(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    assert fill(store, 3 * STRIDE) == list(range(3 * STRIDE))
    assert len(segment_files(tmp_path / "s")) > 3
    assert read_all(store) == [(index, f"m{index}".encode()) for index in range(3 * STRIDE)]
    assert read_all(store, 2 * STRIDE + 5)[0] == (2 * STRIDE + 5, f"m{2 * STRIDE + 5}".encode())
    assert store.read(STRIDE + 1).body == f"m{STRIDE + 1}".encode()
    with pytest.raises(LookupError):
        store.read(3 * STRIDE)
    assert (store.first_offset, len(store)) == (0, 3 * STRIDE)
    store.delete()


def test_offset_at_finds_the_first_message_at_or_after_a_time(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=1 << 20)
    for index in range(3 * STRIDE):
        store.push(message(index, timestamp=10_000 + 10 * index))  # many records per index entry
    assert store.offset_at(0) == 0
    assert store.offset_at(10_000 + 10 * 200) == 200
    assert store.offset_at(10_000 + 10 * 200 - 5) == 200
    assert store.offset_at(10**15) == 3 * STRIDE
    store.delete()


def test_timestamps_never_go_backwards(tmp_path: Path) -> None:
    """A clock stepping back must not break the search by time."""
    store = StreamStore(tmp_path / "s")
    store.push(message(0, timestamp=5_000))
    store.push(message(1, timestamp=4_000))
    assert [store.read(0).timestamp, store.read(1).timestamp] == [5_000, 5_000]
    assert store.offset_at(4_500) == 0
    store.delete()


@pytest.mark.parametrize("drop_index_files", [False, True], ids=["with-index-files", "rescanned"])
def test_a_reopened_store_continues_its_offsets(tmp_path: Path, drop_index_files: bool) -> None:
    path = tmp_path / "s"
    store = StreamStore(path, segment_size=SMALL_SEGMENT)
    fill(store, 50)
    store.close()
    if drop_index_files:
        for name in segment_files(path, "index."):
            (path / name).unlink()
    else:
        assert segment_files(path, "index.")
    reopened = StreamStore(path, segment_size=SMALL_SEGMENT)
    assert (reopened.first_offset, reopened.end_offset) == (0, 50)
    assert reopened.offset_at(1_000 + 20) == 20
    assert fill(reopened, 2, start=50) == [50, 51]
    assert read_all(reopened)[-3:] == [(49, b"m49"), (50, b"m50"), (51, b"m51")]
    reopened.delete()


def test_a_crash_keeps_what_reached_the_os_and_never_reuses_an_offset(tmp_path: Path) -> None:
    """kill -9: no close, the write buffer is lost, the OS still has what flush wrote."""
    path = tmp_path / "s"
    crashed = StreamStore(path, segment_size=SMALL_SEGMENT)
    fill(crashed, 20)
    crashed.push(message(20))  # still in the buffer when the process dies
    recovered = StreamStore(path, segment_size=SMALL_SEGMENT)
    assert recovered.end_offset == 20
    assert fill(recovered, 1, start=100) == [20]
    assert read_all(recovered)[-2:] == [(19, b"m19"), (20, b"m100")]
    recovered.delete()


def test_a_torn_tail_is_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = StreamStore(path)
    fill(store, 10)
    last_segment = path / segment_files(path)[-1]
    with open(last_segment, "ab") as file:
        file.write(b"\x40\x00\x00\x00torn")  # a record header promising more than follows
    recovered = StreamStore(path)
    assert recovered.end_offset == 10
    assert fill(recovered, 1, start=10) == [10]
    assert [body for _, body in read_all(recovered)] == [f"m{index}".encode() for index in range(11)]
    recovered.delete()


def test_retention_by_length_drops_whole_synced_segments_but_never_the_write_segment(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = StreamStore(path, segment_size=SMALL_SEGMENT, retention=Retention(max_length=10))
    for index in range(60):
        store.push(message(index))
    store.flush()
    assert store.first_offset == 0  # nothing is on disk yet: nothing may go
    store.synced(store.written_offset)
    assert 0 < len(store) <= 10 + SMALL_SEGMENT  # whole segments: at most one too many
    first = store.first_offset
    assert first > 0 and read_all(store)[0] == (first, f"m{first}".encode())
    store.close()

    everything_gone = StreamStore(path, segment_size=SMALL_SEGMENT, retention=Retention(max_length=0))
    assert everything_gone.first_offset == first  # first_segment numbers the rest as before
    fill(everything_gone, 3, start=60)
    assert everything_gone.end_offset == 63 and len(everything_gone) >= 1  # the write segment stays
    everything_gone.delete()


def test_retention_by_bytes_and_by_age(tmp_path: Path) -> None:
    by_bytes = StreamStore(tmp_path / "b", segment_size=SMALL_SEGMENT, retention=Retention(max_bytes=2 * SMALL_SEGMENT))
    fill(by_bytes, 80)
    assert by_bytes.ready_bytes <= 3 * SMALL_SEGMENT and by_bytes.first_offset > 0
    by_bytes.delete()

    by_age = StreamStore(tmp_path / "a", segment_size=SMALL_SEGMENT, retention=Retention(max_age_ms=60_000))
    fill(by_age, 30)  # arrived at 1970 + 1 s: far older than a minute
    by_age.enforce_retention()
    assert by_age.first_offset > 0
    assert len(segment_files(tmp_path / "a")) == 1  # only the write segment is left
    by_age.delete()


def test_the_plugin_reads_its_arguments(tmp_path: Path) -> None:
    stream = StreamQueueType.create(
        tmp_path / "s",
        {"x-max-age": "7D", "x-max-length-bytes": 10, "x-stream-max-segment-size-bytes": 999},
        True,
        SegmentStorage(),
    )
    assert isinstance(stream, StreamStore) and isinstance(stream, StreamType)
    assert stream.retention == Retention(max_bytes=10, max_age_ms=7 * 86_400_000)
    assert stream.segment_size == 999
    stream.delete()
    refused = {
        "x-max-age": ("7d", "invalid_max_age"),
        "x-max-length": (-1, "{value_negative,-1}"),
        "x-max-length-bytes": ("10", '"expected integer, got longstr"'),
        "x-stream-max-segment-size-bytes": (0, "{value_zero,0}"),
    }
    for argument, (value, reason) in refused.items():
        with pytest.raises(InvalidArgument) as error:
            StreamQueueType.create(tmp_path / argument, {argument: value}, True, SegmentStorage())
        assert (error.value.argument, error.value.reason) == (argument, reason)
        assert not (tmp_path / argument).exists()


def test_durations_use_rabbitmq_units() -> None:
    assert [parse_duration(text) for text in ("1Y", "2M", "7D", "12h", "30m", "10s")] == [
        365 * 86_400_000,
        60 * 86_400_000,
        7 * 86_400_000,
        12 * 3_600_000,
        30 * 60_000,
        10_000,
    ]
    assert [parse_duration(text) for text in ("0D", "D", "10", "7d", "1.5h", "-1s", "10ms")] == [None] * 7


def test_consumer_offsets_last_record_wins_and_survive_a_torn_tail(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(tmp_path)
    offsets.store("reader", 5)
    offsets.store("reader", 7)
    offsets.store("other", 3)
    offsets.flush(first_offset=0)
    offsets.store("reader", 9)
    offsets.flush(first_offset=0)
    offsets.close()
    with open(tmp_path / OFFSETS_FILE, "ab") as file:
        file.write(b"\x01\x02")  # a crash in the middle of the next record
    reopened = ConsumerOffsets(tmp_path)
    assert (reopened.get("reader"), reopened.get("other"), reopened.get("nobody")) == (9, 3, None)
    reopened.close()
    # Rewritten with one record per tag: crc, tag length, tag, offset.
    assert (tmp_path / OFFSETS_FILE).stat().st_size == (4 + 1 + len("reader") + 8) + (4 + 1 + len("other") + 8)


def test_consumer_offsets_compact_and_forget_tags_retention_passed(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(tmp_path)
    offsets.store("old", 1)
    for offset in range(2000):
        offsets.store("busy", offset)
        offsets.flush(first_offset=100)
    assert (tmp_path / OFFSETS_FILE).stat().st_size < 1200 * 16
    assert (offsets.get("busy"), offsets.get("old")) == (1999, None)
    offsets.close()
    assert ConsumerOffsets(tmp_path).get("busy") == 1999
