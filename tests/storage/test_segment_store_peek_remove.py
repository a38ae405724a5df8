"""SegmentStore.peek and SegmentStore.remove: the head left in place, ready messages dropped
out of turn (per-message TTL), and what recovery makes of them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lavin.api.message import Message, encode_properties
from lavin.storage.segments.segment_store import SegmentStore

PERSISTENT = encode_properties({"delivery_mode": 2})


def message(body: bytes) -> Message:
    return Message("amq.direct", "rk", PERSISTENT, body, 1_700_000_000_000)


def bodies(store: SegmentStore) -> list[bytes]:
    taken = []
    while (item := store.take()) is not None:
        taken.append(item[1].body)
    return taken


def push_numbered(store: SegmentStore, count: int) -> list[int]:
    return [store.push(message(b"%03d" % index)) for index in range(count)]


@pytest.fixture(params=[True, False], ids=["durable", "transient"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SegmentStore]:
    opened = SegmentStore(tmp_path / "queue", durable=request.param, segment_size=1024)
    yield opened
    opened.delete()


def test_peek_shows_what_take_returns_without_taking_it(store: SegmentStore) -> None:
    assert store.peek() is None
    ids = push_numbered(store, 3)
    for _ in range(2):
        peeked = store.peek()
        assert peeked is not None and (peeked[0], peeked[1].body, peeked[2]) == (ids[0], b"000", False)
    assert len(store) == 3 and store.ready_bytes == 9
    taken = store.take()
    assert taken is not None and taken[0] == ids[0]
    store.requeue([ids[0]])
    peeked = store.peek()
    assert peeked is not None and (peeked[0], peeked[2]) == (ids[0], True)
    assert bodies(store) == [b"000", b"001", b"002"]
    assert store.peek() is None


def test_remove_from_the_middle_keeps_order_and_counts(store: SegmentStore) -> None:
    ids = push_numbered(store, 100)  # several segments of 1 KiB
    for index in (3, 50, 51, 99):
        store.remove(ids[index])
    assert len(store) == 96 and store.ready_bytes == 96 * 3
    assert bodies(store) == [b"%03d" % index for index in range(100) if index not in (3, 50, 51, 99)]
    assert len(store) == 0 and store.ready_bytes == 0


def test_remove_the_head_moves_peek_on(store: SegmentStore) -> None:
    ids = push_numbered(store, 3)
    store.remove(ids[0])
    peeked = store.peek()
    assert peeked is not None and peeked[0] == ids[1]
    store.remove(ids[1])
    assert bodies(store) == [b"002"]


def test_remove_from_the_requeued_heap(store: SegmentStore) -> None:
    ids = push_numbered(store, 10)
    taken = [store.take() for _ in range(6)]
    assert all(item is not None for item in taken)
    store.requeue([ids[1], ids[3], ids[5]])
    store.remove(ids[3])  # inside the heap
    store.remove(ids[1])  # its top
    assert len(store) == 5 and store.ready_bytes == 15
    peeked = store.peek()
    assert peeked is not None and (peeked[0], peeked[2]) == (ids[5], True)
    item = store.take()
    assert item is not None and (item[0], item[2]) == (ids[5], True)
    assert bodies(store) == [b"006", b"007", b"008", b"009"]


def test_skip_after_removing_everything_before_the_pushed_message(store: SegmentStore) -> None:
    ids = push_numbered(store, 30)
    for message_id in ids[1:]:
        store.remove(message_id)
    store.remove(ids[0])
    fresh = store.push(message(b"fresh"))
    store.skip(fresh)
    assert len(store) == 0 and store.ready_bytes == 0 and store.take() is None
    store.ack(fresh)
    later = store.push(message(b"later"))
    item = store.take()
    assert item is not None and item[0] == later


def test_a_segment_whose_messages_are_all_removed_is_deleted(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    ids = push_numbered(store, 200)
    store.flush()
    segments_before = len([name for name in os.listdir(store.path) if name.startswith("msgs.")])
    for message_id in ids[:150]:
        store.remove(message_id)
    store.flush()
    store.flush()
    segments_after = len([name for name in os.listdir(store.path) if name.startswith("msgs.")])
    assert segments_after < segments_before
    assert bodies(store) == [b"%03d" % index for index in range(150, 200)]
    store.close()


def test_purge_counts_only_messages_not_removed(store: SegmentStore) -> None:
    ids = push_numbered(store, 60)
    for _ in range(10):
        store.take()
    store.requeue(ids[:4])
    store.remove(ids[2])
    store.remove(ids[20])
    assert store.purge() == 58 - 6
    assert len(store) == 0 and store.ready_bytes == 0 and store.take() is None


def test_removed_messages_stay_gone_after_a_restart(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    ids = push_numbered(store, 100)
    for _ in range(5):
        store.take()
    store.requeue(ids[:5])
    removed = {2, 4, 40, 70, 71}
    for index in removed:
        store.remove(ids[index])
    store.close()

    reopened = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    expected = [b"%03d" % index for index in range(100) if index not in removed]
    assert len(reopened) == len(expected) and reopened.ready_bytes == 3 * len(expected)
    assert bodies(reopened) == expected
    reopened.close()


def test_remove_is_on_disk_once_flush_returned(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)
    ids = push_numbered(store, 5)
    store.flush()
    store.remove(ids[2])
    assert store.flush()  # the ack file and the directory need an fsync
    crash_image = tmp_path / "image"
    shutil.copytree(store.path, crash_image)
    store.close()

    recovered = SegmentStore(crash_image, durable=True)
    assert bodies(recovered) == [b"000", b"001", b"003", b"004"]
    recovered.close()


def test_remove_after_recovery_between_passed_over_records(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)
    ids = push_numbered(store, 10)
    for _ in range(4):
        store.take()
    for message_id in (ids[1], ids[3]):
        store.ack(message_id)
    store.close()

    reopened = SegmentStore(tmp_path / "q", durable=True)  # records 1 and 3 are skipped
    store_ids = [ids[0], ids[2], *ids[4:]]  # a single segment: ids survive the restart
    reopened.remove(store_ids[1])
    reopened.remove(store_ids[3])
    peeked = reopened.peek()
    assert peeked is not None and peeked[1].body == b"000"
    assert bodies(reopened) == [b"000", b"004", b"006", b"007", b"008", b"009"]
    reopened.close()
