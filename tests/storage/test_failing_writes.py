"""Stores whose writes fail: RLIMIT_FSIZE is lowered around the calls, so that `write`
takes part of the data and then fails with EFBIG (Python ignores SIGXFSZ), as on a full disk.

The file must end at its last whole record, nothing may be written twice, and the store
must stay usable and write everything once the disk takes it again.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from lavin.api.message import Message, encode_properties
from lavin.storage.segments.record import FILE_HEADER_SIZE
from lavin.storage.segments.segment_files import ack_path, segment_path
from lavin.storage.segments.segment_store import SegmentStore
from lavin.storage.streams.stream_store import StreamStore

PERSISTENT = encode_properties({"delivery_mode": 2})


def message(number: int, size: int = 1000) -> Message:
    return Message("", "q", PERSISTENT, f"{number:06d}".encode().ljust(size, b"."), 1_700_000_000_000)


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """No file of this process may grow past `limit` bytes meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def flush_and_sync(store: SegmentStore | StreamStore) -> None:
    for fd in store.flush():
        os.fsync(fd)


def failing_flush(store: SegmentStore | StreamStore, limit: int) -> None:
    with file_size_limit(limit), pytest.raises(OSError) as failure:
        store.flush()
    assert failure.value.errno == errno.EFBIG


def ready_bodies(store: SegmentStore) -> list[bytes]:
    taken = []
    while (item := store.take()) is not None:
        taken.append(item[1].body)
    return taken


@pytest.fixture(autouse=True)
def no_damage_found(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Recovery finds nothing torn, damaged or doubled."""
    with caplog.at_level(logging.WARNING, logger="lavin.storage"):
        yield
    assert not caplog.records, [record.getMessage() for record in caplog.records]


def test_a_failed_segment_write_is_cut_back_and_written_once_later(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)
    for number in range(10):
        store.push(message(number))
    flush_and_sync(store)
    written = os.path.getsize(segment_path(store.path, 1))
    for number in range(10, 20):
        store.push(message(number))

    # The limit falls within the next record: the first write is partial, then EFBIG.
    for _ in range(2):
        failing_flush(store, written + 1500)
        assert os.path.getsize(segment_path(store.path, 1)) == written  # no torn record left
    assert len(store) == 20

    flush_and_sync(store)  # the disk takes it again
    assert os.path.getsize(segment_path(store.path, 1)) == 2 * written - FILE_HEADER_SIZE  # ten more records, once
    assert ready_bodies(store) == [message(number).body for number in range(20)]
    store.close()
    recovered = SegmentStore(tmp_path / "q", durable=True)
    assert ready_bodies(recovered) == [message(number).body for number in range(20)]
    recovered.close()


def test_a_failed_ack_write_keeps_whole_entries_and_the_acks(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)
    for number in range(20):
        store.push(message(number))
    flush_and_sync(store)
    for _ in range(10):
        message_id, _, _ = store.take()  # type: ignore[misc]
        store.ack(message_id)

    failing_flush(store, 6)  # 40 bytes of acks; 6 fit: a torn entry and a half
    assert os.path.getsize(ack_path(store.path, 1)) == 0

    flush_and_sync(store)
    assert os.path.getsize(ack_path(store.path, 1)) == 40
    store.close()
    recovered = SegmentStore(tmp_path / "q", durable=True)
    assert ready_bodies(recovered) == [message(number).body for number in range(10, 20)]
    recovered.close()


def test_a_store_that_cannot_write_keeps_taking_and_delivering(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=64 * 1024)
    store.push(message(0))
    flush_and_sync(store)
    written = os.path.getsize(segment_path(store.path, 1))
    with file_size_limit(written):
        # Past the write-buffer limit and past segment_size: no write, no roll, no error.
        for number in range(1, 1500):
            store.push(message(number))
        assert store.take()[1].body == message(0).body  # type: ignore[index]
        with pytest.raises(OSError):
            store.flush()
    assert os.path.getsize(segment_path(store.path, 1)) == written

    flush_and_sync(store)
    store.close()
    recovered = SegmentStore(tmp_path / "q", durable=True)
    assert ready_bodies(recovered) == [message(number).body for number in range(1500)]
    recovered.close()


def test_a_failed_stream_write_is_cut_back_and_not_reported_written(tmp_path: Path) -> None:
    store = StreamStore(tmp_path / "s")
    for number in range(10):
        store.push(message(number))
    flush_and_sync(store)
    store.synced(store.written_offset)
    written = os.path.getsize(segment_path(store.path, 1))
    with file_size_limit(written + 1500):
        for number in range(10, 1500):  # past the write-buffer limit: no write, no error
            store.push(message(number))
    failing_flush(store, written + 1500)
    assert os.path.getsize(segment_path(store.path, 1)) == written
    assert store.written_offset == 10

    flush_and_sync(store)
    assert store.written_offset == 1500
    store.close()
    recovered = StreamStore(tmp_path / "s")
    cursor = recovered.cursor(0)
    assert [item[1].body for item in iter(lambda: cursor.next(1500), None)] == [
        message(number).body for number in range(1500)
    ]
    recovered.close()
