"""The open-file pool: stores keep descriptors only for the files they use most recently,
reopen the others on demand, and never lose an fsync to a descriptor the pool took."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lavin.api.message import Message, encode_properties
from lavin.storage.segments.open_files import OPEN_FILES, PooledDirectory
from lavin.storage.segments.segment_store import SegmentStore
from lavin.storage.streams.stream_store import StreamStore

PERSISTENT = encode_properties({"delivery_mode": 2})
BUDGET = 16  # entries of up to two descriptors


def message(body: bytes) -> Message:
    return Message("", "q", PERSISTENT, body, 1_700_000_000_000)


def held_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def small_pool(tmp_path: Path) -> Iterator[None]:
    budget = OPEN_FILES.budget
    # Stores of earlier tests in this process may still hold pooled fds, which this test's
    # stores would evict: counting them into `before` would make fd totals go down.
    OPEN_FILES.budget = 1
    evicts_the_others = PooledDirectory(tmp_path)
    evicts_the_others.open()
    evicts_the_others.close()
    OPEN_FILES.budget = BUDGET
    yield
    OPEN_FILES.budget = budget


def flush_and_sync(store: SegmentStore | StreamStore) -> None:
    """As the group commit does it: the fds stay pinned until the worker thread synced them."""
    OPEN_FILES.hold()
    fds = store.flush()
    OPEN_FILES.pin(fds)
    OPEN_FILES.unhold()
    for fd in fds:
        os.fsync(fd)
    OPEN_FILES.unpin(fds)


def test_many_stores_hold_no_more_than_the_budget_and_reopen_on_demand(tmp_path: Path) -> None:
    before = held_fds()
    stores = [SegmentStore(tmp_path / f"q{number}", durable=True) for number in range(100)]
    for number, store in enumerate(stores):
        store.push(message(b"body %d" % number))
        flush_and_sync(store)
    assert held_fds() - before <= 2 * BUDGET

    for number, store in enumerate(stores):  # each read reopens a file the pool took
        item = store.take()
        assert item is not None and item[1].body == b"body %d" % number
        store.ack(item[0])
        flush_and_sync(store)
    assert held_fds() - before <= 2 * BUDGET
    for store in stores:
        store.close()
    assert held_fds() == before

    for number in range(100):
        recovered = SegmentStore(tmp_path / f"q{number}", durable=True)
        assert len(recovered) == 0
        recovered.close()


def test_an_fd_handed_over_for_fsync_stays_open_while_pinned(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "pinned", durable=True)
    store.push(message(b"kept"))
    OPEN_FILES.hold()  # as the group commit flushes a store
    fds = store.flush()
    OPEN_FILES.pin(fds)
    OPEN_FILES.unhold()
    paths = {os.readlink(f"/proc/self/fd/{fd}") for fd in fds}
    assert str(tmp_path / "pinned" / "msgs.0000000001") in paths

    others = [PooledDirectory(tmp_path) for _ in range(2 * BUDGET)]
    for directory in others:  # the pool takes the store's fds back meanwhile
        directory.open()
    assert len(OPEN_FILES) <= BUDGET
    for fd in fds:  # the worker thread's fsync
        os.fsync(fd)
        assert os.readlink(f"/proc/self/fd/{fd}") in paths
    OPEN_FILES.unpin(fds)
    for directory in others:
        directory.close()
    store.close()
    recovered = SegmentStore(tmp_path / "pinned", durable=True)
    assert recovered.take() is not None
    recovered.close()


def test_a_stream_reads_segments_the_pool_took_back(tmp_path: Path) -> None:
    stream = StreamStore(tmp_path / "s", segment_size=4096)
    for number in range(400):  # about a hundred segments
        stream.push(message(b"%04d" % number * 200))
    flush_and_sync(stream)
    stream.synced(stream.written_offset)
    cursor = stream.cursor(0)
    assert [item[1].body for item in iter(lambda: cursor.next(400), None)] == [
        b"%04d" % number * 200 for number in range(400)
    ]
    assert len(OPEN_FILES) <= BUDGET
    stream.close()
