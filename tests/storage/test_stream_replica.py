"""The read-only stream replica: what it reads from a directory that the real stream store
writes (or that a broker wrote), while the writer goes on, with records half-written,
damaged or removed by retention; and that it never changes a file."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess, stop_quietly
from lavin.api import Retention
from lavin.api.message import Message, encode_properties
from lavin.storage.metadata.access_files import vhost_directory_name
from lavin.storage.metadata.definitions_store import DEFINITIONS_FILE, DefinitionsStore, QueueDef
from lavin.storage.streams.stream_replica import StreamReplica, find_stream
from lavin.storage.streams.stream_store import StreamStore

SMALL_SEGMENT = 600  # a handful of records per segment
EVERYTHING = 1 << 30


def message(index: int) -> Message:
    properties = encode_properties({"delivery_mode": 2, "headers": {"n": index}, "content_type": "text/plain"})
    return Message(
        "amq.direct", f"key.{index % 3}", properties, f"body {index}".encode() * (1 + index % 4), 1_000 + index
    )


def fill(store: StreamStore, start: int, count: int) -> None:
    for index in range(start, start + count):
        store.push(message(index))
    store.flush()
    store.synced(store.written_offset)


def stored(store: StreamStore) -> list[tuple[int, Message]]:
    cursor = store.cursor(store.first_offset)
    found = []
    while (item := cursor.next(store.end_offset)) is not None:
        found.append(item)
    return found


def replicated(replica: StreamReplica, start: int = 0, batch: int = 7) -> list[tuple[int, Message]]:
    found: list[tuple[int, Message]] = []
    offset = start
    while chunk := replica.read(offset, batch, EVERYTHING):
        found += chunk
        offset = chunk[-1][0] + 1
    return found


def same(read: list[tuple[int, Message]], expected: list[tuple[int, Message]]) -> None:
    def shape(items: list[tuple[int, Message]]) -> list[tuple[int, str, str, bytes, bytes, int | None]]:
        return [
            (offset, m.exchange, m.routing_key, bytes(m.properties), bytes(m.body), m.timestamp) for offset, m in items
        ]

    assert shape(read) == shape(expected)


def files_of(directory: Path) -> dict[str, tuple[int, int]]:
    return {entry.name: (entry.stat().st_size, entry.stat().st_mtime_ns) for entry in os.scandir(directory)}


def last_segment(directory: Path) -> Path:
    return max(directory.glob("msgs.*"))


def test_the_replica_reads_every_message_the_store_holds_across_segments(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 300)
    assert len(list((tmp_path / "s").glob("msgs.*"))) > 10
    replica = StreamReplica(tmp_path / "s")
    assert (replica.first_offset, replica.next_offset) == (0, 300)
    same(replicated(replica), stored(store))
    same(replica.read(137, 3, EVERYTHING), stored(store)[137:140])
    assert replica.read(300, 10, EVERYTHING) == []
    replica.close()
    store.close()


def test_max_bytes_stops_a_read_but_one_record_always_comes(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 20)
    replica = StreamReplica(tmp_path / "s")
    sizes = record_sizes(tmp_path / "s")
    assert [offset for offset, _ in replica.read(5, 10, 1)] == [5]
    assert [offset for offset, _ in replica.read(5, 10, sizes[5] + sizes[6])] == [5, 6]
    assert [offset for offset, _ in replica.read(5, 10, sizes[5] + sizes[6] + sizes[7] - 1)] == [5, 6]
    assert [offset for offset, _ in replica.read(5, 2, EVERYTHING)] == [5, 6]
    store.close()


def record_starts(segment: bytes) -> list[int]:
    """Byte positions of a segment's records, by their length fields."""
    starts, position = [], 4  # after the format header
    while position < len(segment):
        starts.append(position)
        position += 9 + int.from_bytes(segment[position : position + 4], "little")
    return starts


def record_sizes(directory: Path) -> list[int]:
    """The size of each record of a stream that starts at offset 0, in offset order."""
    sizes = []
    for segment in sorted(directory.glob("msgs.*")):
        data = segment.read_bytes()
        starts = record_starts(data)
        sizes += [end - start for start, end in zip(starts, [*starts[1:], len(data)], strict=True)]
    return sizes


def test_the_replica_sees_what_the_store_appends_after_a_refresh(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 10)
    replica = StreamReplica(tmp_path / "s")
    assert replica.next_offset == 10
    for index in range(10, 40):  # into new segments, not handed to the OS yet
        store.push(message(index))
    replica.refresh()
    assert replica.next_offset < 40  # what the store still buffers is not there
    store.flush()
    replica.refresh()
    assert replica.next_offset == 40
    same(replica.read(10, 100, EVERYTHING), stored(store)[10:])
    replica.refresh()  # nothing changed
    assert (replica.first_offset, replica.next_offset) == (0, 40)
    store.close()


def test_retention_moves_the_first_offset_and_keeps_the_others(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT, retention=Retention(max_length=50))
    fill(store, 0, 40)
    replica = StreamReplica(tmp_path / "s")
    assert replica.first_offset == 0
    oldest = min((tmp_path / "s").glob("msgs.*"))
    oldest_data = oldest.read_bytes()
    fill(store, 40, 200)
    assert store.first_offset > 100
    replica.refresh()
    assert (replica.first_offset, replica.next_offset) == (store.first_offset, 240)
    same(replicated(replica), stored(store))
    # A follower applies the new first_segment before removing the segments it drops.
    oldest.write_bytes(oldest_data)
    fresh = StreamReplica(tmp_path / "s")
    assert (fresh.first_offset, fresh.next_offset) == (store.first_offset, 240)
    same(replicated(fresh), stored(store))
    same(replica.read(0, 2, EVERYTHING), stored(store)[:2])  # below the first offset: from the first
    store.close()


def test_a_half_written_record_is_not_there_until_it_is_whole(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 12)
    store.close()
    follower = tmp_path / "follower"
    shutil.copytree(tmp_path / "s", follower)
    segment = last_segment(follower)
    whole = segment.read_bytes()
    last_record_size = len(whole) - record_starts(whole)[-1]
    segment.write_bytes(whole[: len(whole) - last_record_size // 2])  # cut in its middle

    replica = StreamReplica(follower)
    assert replica.next_offset == 11
    assert [offset for offset, _ in replica.read(0, 100, EVERYTHING)] == list(range(11))
    body_end = len(whole) - 3  # every byte there but the last three: its crc fails
    segment.write_bytes(whole[:body_end] + b"\0\0\0")
    replica.refresh()
    assert replica.next_offset == 11
    segment.write_bytes(whole)
    replica.refresh()
    assert replica.next_offset == 12
    assert replica.read(11, 1, EVERYTHING)[0][1].body == message(11).body


def test_a_copy_written_in_arbitrary_pieces_shows_only_whole_records(tmp_path: Path) -> None:
    """As a follower's applier writes the leader's changes: segment after segment, each in
    pieces that end anywhere, with refreshes and reads in between."""
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 120)
    expected = stored(store)
    store.close()
    follower = tmp_path / "follower"
    follower.mkdir()
    shutil.copy(tmp_path / "s" / "first_segment", follower)
    replica = StreamReplica(follower)
    pieces = random.Random(7)
    seen = 0
    for segment in sorted((tmp_path / "s").glob("msgs.*")):
        data = segment.read_bytes()
        written = 0
        with (follower / segment.name).open("wb") as file:
            while written < len(data):
                piece = data[written : written + pieces.randint(1, 150)]
                file.write(piece)
                file.flush()
                written += len(piece)
                replica.refresh()
                assert seen <= replica.next_offset <= 120
                same(replica.read(seen, 1000, EVERYTHING), expected[seen : replica.next_offset])
                seen = replica.next_offset
    assert seen == 120
    same(replicated(replica), expected)


def test_a_reader_thread_beside_a_writing_thread_sees_only_whole_records(tmp_path: Path) -> None:
    """The applier writes in its worker thread while a reader refreshes and reads in another."""
    store = StreamStore(tmp_path / "s", segment_size=4096)
    fill(store, 0, 2000)
    expected = stored(store)
    store.close()
    follower = tmp_path / "follower"
    follower.mkdir()
    shutil.copy(tmp_path / "s" / "first_segment", follower)
    done = threading.Event()

    def write() -> None:
        pieces = random.Random(11)
        for segment in sorted((tmp_path / "s").glob("msgs.*")):
            data = segment.read_bytes()
            fd = os.open(follower / segment.name, os.O_WRONLY | os.O_CREAT, 0o644)
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written : written + pieces.randint(1, 3000)], written)
            os.close(fd)
        done.set()

    writer = threading.Thread(target=write)
    replica = StreamReplica(follower)
    writer.start()
    seen = 0
    deadline = time.monotonic() + 30
    while not done.is_set() or seen < len(expected):
        assert time.monotonic() < deadline, f"stuck at offset {seen}"
        replica.refresh()
        assert seen <= replica.next_offset
        same(replica.read(seen, 1000, EVERYTHING), expected[seen : min(replica.next_offset, seen + 1000)])
        seen = min(replica.next_offset, seen + 1000)
    writer.join()
    assert seen == len(expected)


def test_holes_are_skipped_and_keep_offsets(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 30)
    store.close()
    first = min((tmp_path / "s").glob("msgs.*"))
    data = bytearray(first.read_bytes())
    data[data.index(message(2).body) + 1] ^= 0xFF  # recovery writes a hole over offset 2
    first.write_bytes(data)
    for index in (tmp_path / "s").glob("index.*"):
        index.unlink()  # else the saved index is trusted and the segment not scanned
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    replica = StreamReplica(tmp_path / "s")
    expected = stored(store)
    assert 2 not in [offset for offset, _ in expected] and len(expected) == 29
    caplog.clear()
    same(replicated(replica), expected)
    assert caplog.records == []  # a hole, passed over silently: not a damaged record
    store.close()


def test_a_damaged_record_on_the_replica_side_is_passed_over_without_a_repair(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 30)
    expected = [item for item in stored(store) if item[0] != 1]
    store.close()
    first = min((tmp_path / "s").glob("msgs.*"))
    data = bytearray(first.read_bytes())
    data[data.index(message(1).body) + 1] ^= 0xFF
    first.write_bytes(data)
    before = files_of(tmp_path / "s")
    replica = StreamReplica(tmp_path / "s")
    assert replica.next_offset == 30
    same(replicated(replica), expected)
    assert files_of(tmp_path / "s") == before


def test_offset_at_answers_as_the_store_does(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 400)
    replica = StreamReplica(tmp_path / "s")
    for timestamp in (0, 1_000, 1_001, 1_137, 1_255, 1_399, 1_400, 10_000):
        assert replica.offset_at(timestamp) == store.offset_at(timestamp), timestamp
    assert replica.offset_at(1_137) == 137
    store.close()


def test_the_replica_never_writes_even_over_a_partial_tail(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s", segment_size=SMALL_SEGMENT)
    fill(store, 0, 40)
    store.close()
    os.remove(max((tmp_path / "s").glob("index.*")))  # a segment without its index: scanned
    segment = last_segment(tmp_path / "s")
    segment.write_bytes(segment.read_bytes()[:-5])  # a torn tail
    with segment.open("ab") as file:
        file.write(b"\xf0\xff\xff\xffpartial")  # and a record begun after it, of 4 GiB
    before = files_of(tmp_path / "s")
    replica = StreamReplica(tmp_path / "s")
    assert replica.next_offset == 39
    assert len(replicated(replica)) == 39
    replica.offset_at(1_020)
    replica.refresh()
    replica.close()
    assert files_of(tmp_path / "s") == before


def test_find_stream_reads_the_definitions_without_writing(tmp_path: Path) -> None:
    vhost_dir = tmp_path / vhost_directory_name("/")
    definitions = DefinitionsStore(vhost_dir / DEFINITIONS_FILE)
    definitions.load()
    definitions.queue_declared(QueueDef("events", arguments={"x-queue-type": "stream"}))
    definitions.queue_declared(QueueDef("jobs", arguments={"x-queue-type": "classic"}))
    definitions.queue_declared(QueueDef("gone", arguments={"x-queue-type": "stream"}))
    definitions.queue_deleted("gone")
    definitions.close()
    before = files_of(vhost_dir)
    found = find_stream(tmp_path, "/", "events")
    assert found is not None and found.parent == vhost_dir and len(found.name) == 40
    assert find_stream(tmp_path, "/", "jobs") is None
    assert find_stream(tmp_path, "/", "gone") is None
    assert find_stream(tmp_path, "/", "nothing") is None
    assert find_stream(tmp_path, "other", "events") is None
    assert files_of(vhost_dir) == before  # a log with a delete is not compacted


@pytest.fixture
def broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    process = BrokerProcess(tmp_path / "data")
    process.start()
    yield process
    stop_quietly(process)


def test_a_stream_a_broker_writes_is_found_and_read(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare(
        "events", durable=True, arguments={"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 500}
    )
    channel.queue_declare("jobs", durable=True)
    channel.confirm_delivery()
    for index in range(50):
        channel.basic_publish("", "events", f"event {index}".encode(), pika.BasicProperties(message_id=str(index)))
    directory = find_stream(broker.data_dir, "/", "events")
    assert directory is not None and directory.is_dir()
    assert find_stream(broker.data_dir, "/", "jobs") is None
    replica = StreamReplica(directory)
    assert (replica.first_offset, replica.next_offset) == (0, 50)
    read = replicated(replica)
    assert [(offset, bytes(m.body), m.routing_key) for offset, m in read] == [
        (index, f"event {index}".encode(), "events") for index in range(50)
    ]
    for index in range(50, 60):
        channel.basic_publish("", "events", f"event {index}".encode())
    replica.refresh()
    assert replica.next_offset == 60
    assert bytes(replica.read(59, 5, EVERYTHING)[0][1].body) == b"event 59"
    connection.close()
