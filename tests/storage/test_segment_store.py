"""SegmentStore against real files: order, acks, flush contract, recovery, purge, memory."""

from __future__ import annotations

import logging
import os
import random
import shutil
import tracemalloc
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
from lavin.api.message import Message, encode_properties, is_persistent, message_priority
from lavin.storage.segments import segment_store
from lavin.storage.segments.decoded_window import window_bytes
from lavin.storage.segments.segment_store import RESIDENT_READY_MESSAGES, SegmentStore
from lavin.storage.segments.segment_store import resident_bytes as unwritten_bytes

PERSISTENT = encode_properties({"delivery_mode": 2})
TRANSIENT = encode_properties({})


def message(body: bytes, persistent: bool = True, routing_key: str = "rk") -> Message:
    return Message("amq.direct", routing_key, PERSISTENT if persistent else TRANSIENT, body, 1_700_000_000_000)


def take(store: SegmentStore) -> tuple[int, Message, bool]:
    item = store.take()
    assert item is not None, "the store is empty"
    return item


def bodies(store: SegmentStore) -> list[bytes]:
    """Take everything that is ready, in order."""
    taken = []
    while (item := store.take()) is not None:
        taken.append(item[1].body)
    return taken


def segment_files(path: Path) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.startswith("msgs."))


@pytest.fixture(params=[True, False], ids=["durable", "transient"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SegmentStore]:
    opened = SegmentStore(tmp_path / "queue", durable=request.param, segment_size=4096)
    yield opened
    opened.delete()


def test_take_returns_messages_in_publish_order_with_their_fields(store: SegmentStore) -> None:
    sent = Message("ex", "key.1", encode_properties({"content_type": "text/plain", "delivery_mode": 2}), b"x" * 10, 42)
    first = store.push(sent)
    store.push(message(b"second"))
    assert len(store) == 2 and store.ready_bytes == 16

    message_id, received, redelivered = take(store)
    assert (message_id, redelivered) == (first, False)
    assert (received.exchange, received.routing_key) == ("ex", "key.1")
    assert (received.body, received.timestamp) == (b"x" * 10, 42)
    assert received.props == {"content_type": "text/plain", "delivery_mode": 2}
    assert bodies(store) == [b"second"]
    assert store.take() is None
    assert len(store) == 0 and store.ready_bytes == 0


def test_take_sees_records_before_and_after_flush(store: SegmentStore) -> None:
    for index in range(300):  # several segments of 4 KiB
        store.push(message(b"%d" % index))
        if index % 7 == 0:
            store.flush()
    assert bodies(store) == [b"%d" % index for index in range(300)]


def test_requeued_messages_come_first_in_publish_order_as_redelivered(store: SegmentStore) -> None:
    ids = [store.push(message(b"%d" % index)) for index in range(200)]
    taken = [take(store)[0] for _ in range(150)]
    assert taken == ids[:150]
    store.requeue([taken[120], taken[3], taken[77]])
    assert len(store) == 53
    assert store.ready_bytes == sum(len(b"%d" % index) for index in [3, 77, 120, *range(150, 200)])
    again = [take(store) for _ in range(3)]
    assert [(item[0], item[2]) for item in again] == [(ids[3], True), (ids[77], True), (ids[120], True)]
    assert bodies(store) == [b"%d" % index for index in range(150, 200)]


def test_read_returns_any_stored_message(store: SegmentStore) -> None:
    ids = [store.push(message(b"body %d" % index)) for index in range(100)]
    store.flush()
    ids.append(store.push(message(b"unflushed")))
    assert store.read(ids[42]).body == b"body 42"
    assert store.read(ids[-1]).body == b"unflushed"


def test_skip_marks_the_just_pushed_message_taken(store: SegmentStore) -> None:
    for index in range(500):
        message_id = store.push(message(b"%d" % index))
        store.skip(message_id)
        assert len(store) == 0 and store.ready_bytes == 0
        store.ack(message_id)
    last = store.push(message(b"last"))
    assert take(store)[0] == last


def test_a_message_pushed_taken_is_kept_as_its_record_only(store: SegmentStore) -> None:
    """Delivered at once, it needs no decoded copy: a requeue reads it back from its record."""
    held_before = window_bytes()
    sent = Message("ex", "key", encode_properties({"content_type": "text/plain", "delivery_mode": 2}), b"x" * 10, 42)
    message_id = store.push_taken(sent)
    assert (len(store), store.ready_bytes, window_bytes()) == (0, 0, held_before)
    store.push(message(b"next"))
    assert take(store)[1].body == b"next"
    store.requeue([message_id])
    taken_id, taken, redelivered = take(store)
    assert (taken_id, redelivered) == (message_id, True)
    assert (taken.exchange, taken.routing_key, taken.properties, taken.body, taken.timestamp) == (
        "ex", "key", sent.properties, b"x" * 10, 42)  # fmt: skip
    store.ack(message_id)


def test_skip_of_the_head_when_more_are_queued(store: SegmentStore) -> None:
    first = store.push(message(b"first"))
    second = store.push(message(b"second"))
    with pytest.raises(ValueError):
        store.skip(second)
    store.skip(first)
    assert store.ready_bytes == len(b"second")
    assert take(store)[0] == second
    with pytest.raises(ValueError):
        store.skip(second)


def test_overlong_names_are_refused_and_leave_the_store_intact(store: SegmentStore) -> None:
    with pytest.raises(ValueError):
        store.push(Message("x" * 256, "rk", PERSISTENT, b"body"))
    store.push(message(b"fine"))
    assert bodies(store) == [b"fine"]


def test_a_message_larger_than_a_segment_and_the_read_ahead(store: SegmentStore) -> None:
    big = os.urandom(300_000)
    store.push(message(b"small"))
    big_id = store.push(message(big))
    store.push(message(b"after"))
    store.flush()
    assert bodies(store) == [b"small", big, b"after"]
    assert store.read(big_id).body == big


def test_fully_acked_segments_are_deleted(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    ids = [store.push(message(b"m" * 40)) for _ in range(200)]
    store.flush()
    assert len(segment_files(store.path)) > 5
    for message_id in ids[:-1]:
        assert take(store)[0] == message_id
        store.ack(message_id)
    store.flush()
    # the one unacked message keeps its segment; the write segment stays too
    assert len(segment_files(store.path)) <= 2
    assert take(store)[0] == ids[-1]
    store.ack(ids[-1])
    store.push(message(b"next"))  # rolls, and the finished write segment goes
    store.flush()
    store.flush()
    assert len(segment_files(store.path)) == 1
    acks = [name for name in os.listdir(store.path) if name.startswith("acks.")]
    assert len(acks) <= 1
    store.close()


def test_flush_returns_fds_only_when_persistent_data_or_acks_were_written(tmp_path: Path) -> None:
    transient_store = SegmentStore(tmp_path / "transient", durable=False)
    transient_store.push(message(b"p"))
    assert transient_store.flush() == []
    transient_store.ack(take(transient_store)[0])
    assert transient_store.flush() == []
    transient_store.close()

    store = SegmentStore(tmp_path / "durable", durable=True)
    store.push(message(b"transient", persistent=False))
    assert store.flush() == []
    store.push(message(b"persistent"))
    fds = store.flush()
    assert len(fds) == 2  # the segment, and the directory that gained it
    assert all(os.fstat(fd) for fd in fds)
    assert store.flush() == []
    first = take(store)[0]
    store.ack(first)  # a transient record: recovery drops it anyway, but it shares a segment
    assert len(store.flush()) == 2  # the new ack file, and the directory
    store.ack(take(store)[0])
    assert len(store.flush()) == 1
    assert store.flush() == []
    store.close()


def test_recovery_keeps_unacked_persistent_messages_in_order(tmp_path: Path) -> None:
    path = tmp_path / "q"
    store = SegmentStore(path, durable=True, segment_size=2048)
    ids = [store.push(message(b"%d" % index)) for index in range(300)]
    store.push(message(b"transient", persistent=False))
    for message_id in ids[:100]:
        assert take(store)[0] == message_id
    for message_id in ids[:100:2]:
        store.ack(message_id)
    store.close()

    reopened = SegmentStore(path, durable=True, segment_size=2048)
    expected = [b"%d" % index for index in range(1, 100, 2)] + [b"%d" % index for index in range(100, 300)]
    assert len(reopened) == len(expected)
    assert reopened.ready_bytes == sum(map(len, expected))
    first = take(reopened)
    assert first[1].body == b"1" and first[2] is False
    assert bodies(reopened) == expected[1:]
    reopened.close()


def test_skip_after_recovery_passes_over_acked_records(tmp_path: Path) -> None:
    path = tmp_path / "q"
    store = SegmentStore(path, durable=True)
    ids = [store.push(message(b"%d" % index)) for index in range(10)]
    for _ in ids:
        store.take()
    for message_id in ids[1:]:
        store.ack(message_id)
    store.close()

    reopened = SegmentStore(path, durable=True)
    assert take(reopened)[1].body == b"0"  # unacked at shutdown: ready again
    fresh = reopened.push(message(b"fresh"))
    reopened.skip(fresh)
    assert len(reopened) == 0 and reopened.take() is None
    reopened.close()


def test_recovery_after_a_crash_sees_what_flush_handed_to_the_os(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=4096)
    for index in range(200):
        store.push(message(b"%d" % index))
    store.ack(take(store)[0])
    store.flush()
    store.push(message(b"never flushed"))
    crash_image = tmp_path / "image"
    shutil.copytree(store.path, crash_image)

    recovered = SegmentStore(crash_image, durable=True, segment_size=4096)
    assert bodies(recovered) == [b"%d" % index for index in range(1, 200)]
    recovered.close()
    store.close()


def test_transient_messages_do_not_survive_a_restart(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    for index in range(100):
        store.push(message(b"%d" % index, persistent=index % 3 == 0))
    store.close()
    reopened = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    assert bodies(reopened) == [b"%d" % index for index in range(0, 100, 3)]
    reopened.close()


def test_a_non_durable_store_starts_empty(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)  # leaves a segment file behind
    store.push(message(b"gone", persistent=True))
    store.close()
    reopened = SegmentStore(tmp_path / "q", durable=False)
    assert len(reopened) == 0 and reopened.take() is None
    assert segment_files(reopened.path) == ["msgs.0000000001"]
    reopened.delete()
    assert not (tmp_path / "q").exists()


def test_a_non_durable_store_keeps_messages_in_flight_off_the_disk(tmp_path: Path) -> None:
    before = unwritten_bytes()
    store = SegmentStore(tmp_path / "q", durable=False, segment_size=4096)
    for batch in range(50):
        sent = [b"%d.%d " % (batch, index) * 40 for index in range(20)]
        ids = [store.push(message(body, persistent=False)) for body in sent]
        assert store.flush() == []
        for message_id, body in zip(ids, sent, strict=True):
            taken = take(store)
            assert (taken[0], taken[1].body) == (message_id, body)
            store.ack(message_id)
    assert not store.path.exists(), "acked before they had to be written: no file, no directory"
    assert 0 < unwritten_bytes() - before <= 4096 + 1024, "only the write segment is held"
    store.delete()
    assert unwritten_bytes() == before


def test_a_non_durable_backlog_goes_to_disk_and_comes_back_with_what_is_held(tmp_path: Path) -> None:
    before = unwritten_bytes()
    store = SegmentStore(tmp_path / "q", durable=False, segment_size=64 << 10)
    sent = [b"message %d" % index for index in range(RESIDENT_READY_MESSAGES + 500)]
    for body in sent[:100]:
        store.push(message(body, persistent=False))
    store.flush()
    assert not store.path.exists()
    for body in sent[100:]:
        store.push(message(body, persistent=False))
    store.flush()
    assert segment_files(store.path) and unwritten_bytes() == before, "a backlog is written, all of it"
    first = [take(store) for _ in sent]
    assert [item[1].body for item in first] == sent
    later = [b"later %d" % index for index in range(100)]
    later_ids = [store.push(message(body, persistent=False)) for body in later]
    store.flush()
    assert unwritten_bytes() > before, "in flight again: held"
    store.requeue([item[0] for item in first[:10]])  # read from the files
    assert bodies(store) == sent[:10] + later
    store.requeue(later_ids)  # read from memory
    assert bodies(store) == later
    store.delete()
    assert unwritten_bytes() == before


def mixed_bodies(count: int) -> list[bytes]:
    """Small bodies, copied into the write buffer, between large ones, kept apart."""
    return [(b"%d:" % index) * (20_000 if index % 3 == 0 else 5) for index in range(count)]


def test_large_bodies_kept_apart_are_written_and_recovered(tmp_path: Path) -> None:
    sent = mixed_bodies(30)
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=100_000)
    for body in sent:
        store.push(message(body))
    store.flush()
    store.close()
    reopened = SegmentStore(tmp_path / "q", durable=True, segment_size=100_000)
    assert bodies(reopened) == sent, "every record whole, its crc right"
    reopened.close()


def test_large_bodies_held_in_memory_read_back_whole(tmp_path: Path) -> None:
    before = unwritten_bytes()
    store = SegmentStore(tmp_path / "q", durable=False, segment_size=100_000)
    sent = mixed_bodies(30)
    ids = [store.push(message(body, persistent=False)) for body in sent]
    assert [take(store)[1].body for _ in sent] == sent
    store.requeue(ids)  # read from the pieces in memory, past the decoded window
    assert bodies(store) == sent
    assert not store.path.exists()
    store.delete()
    assert unwritten_bytes() == before


def test_records_of_alike_and_differing_messages_keep_their_own_fields(tmp_path: Path) -> None:
    """Heads are reused for a run of alike messages: each record must still carry its own
    exchange, routing key, properties, timestamp and body, and a crc that recovery accepts."""
    props = [PERSISTENT, encode_properties({"delivery_mode": 2, "content_type": "a/b"})]
    exchanges = ["ex0", "ex1", "ex2"]
    keys = ["k1", "k2", "".join(["k", "1"])]  # the last equals the first, as another object
    # Runs of messages alike but for one field, that field changing at a different pace each.
    sent = [
        Message(
            exchanges[(index + 3) // 20 % 3],
            keys[(index + 4) // 10 % 3],
            props[index // 5 % 2],
            b"%02d" % index if index % 7 else b"%03d" % index,
            1_000 + index // 3,
        )
        for index in range(60)
    ]
    store = SegmentStore(tmp_path / "q", durable=True)
    for item in sent:
        store.push(item)
    store.close()
    reopened = SegmentStore(tmp_path / "q", durable=True)
    received = [take(reopened)[1] for _ in sent]
    assert reopened.take() is None
    for expected, got in zip(sent, received, strict=True):
        assert (got.exchange, got.routing_key, got.properties, got.body, got.timestamp) == (
            expected.exchange,
            expected.routing_key,
            expected.properties,
            expected.body,
            expected.timestamp,
        )
    reopened.close()


def _close_with_messages(path: Path, count: int) -> Path:
    store = SegmentStore(path, durable=True)
    for index in range(count):
        store.push(message(b"message %d" % index))
    store.close()
    return path / segment_files(path)[0]


def test_a_truncated_tail_record_is_cut_off_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    segment = _close_with_messages(tmp_path / "q", 10)
    size = segment.stat().st_size
    os.truncate(segment, size - 3)

    with caplog.at_level(logging.WARNING):
        store = SegmentStore(tmp_path / "q", durable=True)
    assert "truncated record" in caplog.text and segment.name in caplog.text
    assert bodies(store) == [b"message %d" % index for index in range(9)]
    assert segment.stat().st_size < size - 3  # cut back to the last whole record
    store.push(message(b"after"))
    store.close()
    reopened = SegmentStore(tmp_path / "q", durable=True)
    assert len(reopened) == 10
    reopened.close()


def test_a_record_failing_its_crc_is_passed_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    segment = _close_with_messages(tmp_path / "q", 10)
    data = bytearray(segment.read_bytes())
    data[data.index(b"message 6")] ^= 0xFF
    segment.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING):
        store = SegmentStore(tmp_path / "q", durable=True)
    assert "1 damaged record(s)" in caplog.text  # more in tests/storage/test_damaged_files.py
    assert bodies(store) == [b"message %d" % index for index in range(10) if index != 6]
    store.close()


def test_a_torn_ack_entry_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)
    for index in range(3):
        store.push(message(b"%d" % index))
    store.ack(take(store)[0])
    store.close()
    ack_file = tmp_path / "q" / "acks.0000000001"
    with open(ack_file, "ab") as file:
        file.write(b"\x01\x02")

    with caplog.at_level(logging.WARNING):
        reopened = SegmentStore(tmp_path / "q", durable=True)
    assert "torn ack entry" in caplog.text
    assert ack_file.stat().st_size == 4
    assert bodies(reopened) == [b"1", b"2"]
    reopened.close()


def test_purge_drops_ready_messages_and_keeps_taken_ones(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    ids = [store.push(message(b"%03d" % index)) for index in range(300)]
    taken = [take(store)[0] for _ in range(20)]
    store.requeue(taken[5:8])
    assert store.purge() == 283
    assert len(store) == 0 and store.ready_bytes == 0 and store.take() is None
    assert store.read(taken[0]).body == b"000"
    for message_id in taken[:5] + taken[8:]:
        store.ack(message_id)
    store.flush()
    assert segment_files(store.path) == [segment_files(store.path)[-1]]
    after = store.push(message(b"after"))
    assert after > ids[-1]
    store.close()

    reopened = SegmentStore(tmp_path / "q", durable=True, segment_size=1024)
    assert bodies(reopened) == [b"after"]
    assert reopened.purge() == 0
    reopened.close()


def test_purge_after_recovery_passes_over_dropped_records(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)
    for body, persistent in [(b"taken", True), (b"transient", False), (b"p1", True), (b"p2", True)]:
        store.push(message(body, persistent))
    store.close()
    reopened = SegmentStore(tmp_path / "q", durable=True)
    assert take(reopened)[1].body == b"taken"  # keeps the segment; the cursor now faces the dropped record
    assert reopened.purge() == 2
    reopened.close()
    restarted = SegmentStore(tmp_path / "q", durable=True)
    assert bodies(restarted) == [b"taken"]
    restarted.close()


def test_purge_keeps_the_segment_of_unacked_messages_on_restart(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=True)
    store.push(message(b"taken"))
    store.push(message(b"ready"))
    store.take()
    assert store.purge() == 1
    store.close()
    reopened = SegmentStore(tmp_path / "q", durable=True)
    assert bodies(reopened) == [b"taken"]
    reopened.close()


def test_is_persistent_reads_delivery_mode_behind_other_properties() -> None:
    props = {"content_type": "a/b", "content_encoding": "gzip", "headers": {"k": "v" * 300}}
    assert is_persistent(encode_properties({**props, "delivery_mode": 2}))
    assert not is_persistent(encode_properties({**props, "delivery_mode": 1}))
    assert not is_persistent(encode_properties({**props, "priority": 2}))
    assert not is_persistent(b"")


def test_message_priority_reads_the_priority_behind_other_properties() -> None:
    props = {"content_type": "a/b", "content_encoding": "gzip", "headers": {"k": "v" * 300}}
    assert message_priority(encode_properties({**props, "delivery_mode": 2, "priority": 7, "reply_to": "r"})) == 7
    assert message_priority(encode_properties({"priority": 255})) == 255
    assert message_priority(encode_properties({**props, "delivery_mode": 2})) == 0
    assert message_priority(b"") == 0


class Model:
    """What a queue should hold, kept the simple way: every id in a list."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.persistent: set[int] = set()
        self.ready: deque[int] = deque()
        self.requeued: list[int] = []
        self.taken: list[int] = []

    def ready_bytes(self) -> int:
        return sum(self.sizes[i] for i in self.ready) + sum(self.sizes[i] for i in self.requeued)

    def restart(self) -> None:
        """Unacked persistent messages are ready again, in publish order; the rest are gone."""
        survivors = [*self.ready, *self.requeued, *self.taken]
        self.ready = deque(sorted(i for i in survivors if i in self.persistent))
        self.requeued, self.taken = [], []


def test_random_operations_match_a_simple_model(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = SegmentStore(tmp_path / "q", durable=True, segment_size=512)
    model = Model()
    for _ in range(20_000):
        op = rng.random()
        if op < 0.33:
            body = b"b" * rng.randrange(0, 100)
            persistent = rng.random() < 0.5
            straight = not model.ready and not model.requeued and rng.random() < 0.5  # to a waiting consumer
            if straight and rng.random() < 0.5:
                message_id = store.push_taken(message(body, persistent))
            else:
                message_id = store.push(message(body, persistent))
                if straight:
                    store.skip(message_id)
            (model.taken if straight else model.ready).append(message_id)
            model.sizes[message_id] = len(body)
            # ids restart at segment 1 when a restart leaves no segment behind
            (model.persistent.add if persistent else model.persistent.discard)(message_id)
        elif op < 0.58:
            item = store.take()
            redelivered = bool(model.requeued)
            if model.requeued:
                expected = min(model.requeued)
                model.requeued.remove(expected)
            elif model.ready:
                expected = model.ready.popleft()
            else:
                assert item is None
                continue
            assert item is not None and (item[0], item[2]) == (expected, redelivered)
            assert len(item[1].body) == model.sizes[expected]
            model.taken.append(expected)
        elif op < 0.76 and model.taken:
            store.ack(model.taken.pop(rng.randrange(len(model.taken))))
        elif op < 0.85 and model.taken:
            count = rng.randrange(1, len(model.taken) + 1)
            batch = [model.taken.pop(rng.randrange(len(model.taken))) for _ in range(count)]
            store.requeue(batch)
            model.requeued.extend(batch)
        elif op < 0.91 and (model.ready or model.requeued):
            index = rng.randrange(len(model.ready) + len(model.requeued))
            if index < len(model.ready):
                removed = model.ready[index]
                del model.ready[index]
            else:
                removed = model.requeued.pop(index - len(model.ready))
            store.remove(removed)
        elif op < 0.945:
            peeked = store.peek()
            if model.requeued:
                assert peeked is not None and (peeked[0], peeked[2]) == (min(model.requeued), True)
            elif model.ready:
                assert peeked is not None and (peeked[0], peeked[2]) == (model.ready[0], False)
            else:
                assert peeked is None
        elif op < 0.955:
            assert store.purge() == len(model.ready) + len(model.requeued)
            model.ready.clear()
            model.requeued.clear()
        elif op < 0.96:
            store.close()
            store = SegmentStore(tmp_path / "q", durable=True, segment_size=512)
            model.restart()
        else:
            store.flush()
        assert len(store) == len(model.ready) + len(model.requeued)
        assert store.ready_bytes == model.ready_bytes()
    for message_id in model.taken:
        store.ack(message_id)
    while (item := store.take()) is not None:
        store.ack(item[0])
    store.flush()
    store.flush()
    assert len(segment_files(store.path)) == 1
    store.close()
    # The empty containers every idle store and segment shares were never added to.
    assert not segment_store._NO_IDS and not segment_store._NO_POSITIONS


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_a_million_queued_messages_hold_no_python_objects(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "q", durable=False)
    queued = message(b"0123456789abcdef")
    before = resident_bytes()
    for index in range(1_000_000):
        store.push(queued)
        if index % 1000 == 0:
            store.flush()
    store.flush()
    growth = resident_bytes() - before
    assert len(store) == 1_000_000
    # One int per message would already take 36 MB.
    assert growth < 20 * 1024 * 1024, f"RSS grew {growth / 1e6:.1f} MB for 1M queued messages"
    count = 0
    while (item := store.take()) is not None:
        store.ack(item[0])
        count += 1
    assert count == 1_000_000
    assert segment_files(store.path) == [segment_files(store.path)[-1]]
    store.delete()


def test_recent_messages_come_back_in_order_across_removals_and_segments(store: SegmentStore) -> None:
    """Recently pushed messages are handed back without reading their records; what comes
    back must not depend on that: removed ones stay gone, order holds across segment
    roll-overs (4 KiB segments here) and a window smaller than the backlog."""
    ids = [store.push(message(b"%05d" % n + b"." * 200)) for n in range(3000)]
    for message_id in ids[1:3000:7]:
        store.remove(message_id)
    expected = [b"%05d" % n + b"." * 200 for n in range(3000) if n % 7 != 1]
    assert bodies(store) == expected
    assert len(store) == 0 and store.ready_bytes == 0


def test_a_message_taken_straight_after_its_push_is_the_one_stored(store: SegmentStore) -> None:
    pushed = message(b"body", routing_key="key")
    message_id = store.push(pushed)
    taken_id, taken, redelivered = take(store)
    assert (taken_id, redelivered) == (message_id, False)
    assert (taken.routing_key, taken.body, taken.timestamp, taken.persistent) == (
        "key",
        b"body",
        pushed.timestamp,
        True,
    )
    store.requeue([message_id])
    again = take(store)
    assert again[0] == message_id and again[2] is True
    assert (again[1].routing_key, again[1].body, again[1].timestamp) == ("key", b"body", pushed.timestamp)


def test_a_purge_drops_recent_messages_too(store: SegmentStore) -> None:
    for n in range(10):
        store.push(message(b"%d" % n))
    assert store.purge() == 10
    store.push(message(b"after"))
    assert bodies(store) == [b"after"]


def test_an_empty_durable_store_stays_small(tmp_path: Path) -> None:
    """A broker may hold 100,000 queues that never see a message: an empty store allocates
    no buffers for messages it does not have (the window of recent appends was 760 bytes,
    and an empty set and two arrays another 376)."""
    SegmentStore(tmp_path / "first", durable=True).close()  # module state made once
    tracemalloc.start()
    stores = [SegmentStore(tmp_path / f"q{index}", durable=True) for index in range(1000)]
    per_store = tracemalloc.get_traced_memory()[0] / len(stores)
    tracemalloc.stop()
    for store in stores:
        store.close()
    assert per_store < 2100, f"{per_store:.0f} bytes per empty durable store"
