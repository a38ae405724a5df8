"""The priority queue type over real files: order, ids, counts, argument checks, recovery."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from lavin.api import PreconditionFailed, QueueType
from lavin.api.message import Message, encode_properties
from lavin.plugins.queues.priority import PriorityQueue
from lavin.storage.toolkit import SegmentStorage


def message(body: bytes, priority: int | None = None, persistent: bool = True) -> Message:
    props: dict[str, int] = {"delivery_mode": 2 if persistent else 1}
    if priority is not None:
        props["priority"] = priority
    return Message("", "q", encode_properties(props), body)


def bodies(queue: PriorityQueue) -> list[bytes]:
    taken = []
    while (item := queue.take()) is not None:
        taken.append(item[1].body)
    return taken


@pytest.fixture(params=[True, False], ids=["durable", "transient"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PriorityQueue]:
    opened = PriorityQueue.create(tmp_path / "q", {"x-max-priority": 10}, request.param, SegmentStorage())
    yield opened
    opened.delete()


def test_higher_priority_first_and_fifo_within_a_priority(queue: PriorityQueue) -> None:
    assert isinstance(queue, QueueType) and queue.name == "priority" and queue.max_priority == 10
    for body, priority in [(b"low", 1), (b"none", None), (b"high-1", 9), (b"mid", 5), (b"high-2", 9), (b"over", 200)]:
        queue.push(message(body, priority))
    assert len(queue) == 6 and queue.ready_bytes == sum(
        map(len, [b"low", b"none", b"high-1", b"mid", b"high-2", b"over"])
    )
    peeked = queue.peek()
    assert peeked is not None and peeked[1].body == b"over"  # above the maximum counts as the maximum
    assert bodies(queue) == [b"over", b"high-1", b"high-2", b"mid", b"low", b"none"]
    assert len(queue) == 0 and queue.ready_bytes == 0 and queue.peek() is None


def test_ids_carry_their_level_and_requeue_goes_to_the_front_of_it(queue: PriorityQueue) -> None:
    first = queue.push(message(b"a", 3))
    queue.push(message(b"b", 3))
    queue.push(message(b"low", 1))
    assert first >> 56 == 3 and queue.push(message(b"zero")) >> 56 == 0
    taken = queue.take()
    assert taken is not None and taken[0] == first
    assert queue.read(first).body == b"a"
    queue.requeue([first])
    queue.push(message(b"top", 7))
    items = [queue.take() for _ in range(3)]
    assert [(item[1].body, item[2]) for item in items if item] == [(b"top", False), (b"a", True), (b"b", False)]


def test_skip_remove_and_purge_keep_the_totals(queue: PriorityQueue) -> None:
    pushed = queue.push(message(b"direct", 4))
    queue.skip(pushed)
    queue.ack(pushed)
    assert len(queue) == 0 and queue.ready_bytes == 0
    ids = [queue.push(message(b"%d" % level, level)) for level in (2, 2, 6, 8)]
    queue.remove(ids[3])  # the only message of the top level
    queue.remove(ids[0])
    assert len(queue) == 2 and queue.ready_bytes == 2
    peeked = queue.peek()
    assert peeked is not None and peeked[0] == ids[2]
    taken = queue.take()
    assert taken is not None
    queue.requeue([taken[0]])
    assert queue.purge() == 2
    assert len(queue) == 0 and queue.ready_bytes == 0 and queue.take() is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (256, "{max_value_exceeded,256}"),
        (-1, "{value_negative,-1}"),
        ("a", "{unacceptable_type,longstr}"),
        (1.5, "{unacceptable_type,double}"),
        (True, "{unacceptable_type,bool}"),
    ],
)
def test_x_max_priority_must_be_an_integer_from_0_to_255(tmp_path: Path, value: object, reason: str) -> None:
    with pytest.raises(PreconditionFailed, match=f"invalid arg 'x-max-priority': {reason}"):
        PriorityQueue.create(tmp_path / "q", {"x-max-priority": value}, False, SegmentStorage())


def test_x_max_priority_0_is_a_queue_of_one_level(tmp_path: Path) -> None:
    queue = PriorityQueue.create(tmp_path / "q", {"x-max-priority": 0}, False, SegmentStorage())
    queue.push(message(b"first", 9))
    queue.push(message(b"second"))
    assert bodies(queue) == [b"first", b"second"]
    queue.delete()


def test_levels_survive_a_restart_and_empty_ones_are_dropped(tmp_path: Path) -> None:
    queue = PriorityQueue.create(tmp_path / "q", {"x-max-priority": 10}, True, SegmentStorage())
    gone = queue.push(message(b"acked", 8))
    queue.push(message(b"transient", 6, persistent=False))
    for body, priority in [(b"p1", 1), (b"p5-a", 5), (b"p5-b", 5), (b"p0", None)]:
        queue.push(message(body, priority))
    assert all(os.fstat(fd) for fd in queue.flush())
    taken = [queue.take(), queue.take()]
    assert [item[1].body for item in taken if item] == [b"acked", b"transient"]
    queue.ack(gone)  # "transient" stays unacked: a restart drops it all the same
    queue.close()

    reopened = PriorityQueue.create(tmp_path / "q", {"x-max-priority": 10}, True, SegmentStorage())
    assert len(reopened) == 4 and reopened.ready_bytes == len(b"p1p5-ap5-bp0")
    assert sorted(os.listdir(tmp_path / "q")) == ["prio.000", "prio.001", "prio.005"]
    assert bodies(reopened) == [b"p5-a", b"p5-b", b"p1", b"p0"]
    reopened.delete()
    assert not (tmp_path / "q").exists()


def test_a_transient_queue_starts_empty(tmp_path: Path) -> None:
    queue = PriorityQueue.create(tmp_path / "q", {"x-max-priority": 3}, False, SegmentStorage())
    queue.push(message(b"gone", 2))
    queue.close()
    reopened = PriorityQueue.create(tmp_path / "q", {"x-max-priority": 3}, False, SegmentStorage())
    assert len(reopened) == 0 and os.listdir(tmp_path / "q") == []
    reopened.delete()


def test_random_operations_match_a_simple_model(tmp_path: Path) -> None:
    """Per level: requeued ids (smallest first) before never-taken ones (in push order)."""
    rng = random.Random(11)
    queue = PriorityQueue.create(tmp_path / "q", {"x-max-priority": 4}, True, SegmentStorage())
    ready: dict[int, int] = {}  # id -> body size
    requeued: set[int] = set()
    taken: list[int] = []

    def expected_next() -> tuple[int, bool] | None:
        if not ready:
            return None
        top = max(message_id >> 56 for message_id in ready)
        level_requeued = [i for i in requeued if i >> 56 == top]
        if level_requeued:
            return min(level_requeued), True
        return min(i for i in ready if i >> 56 == top), False

    for _ in range(5000):
        op = rng.random()
        if op < 0.4:
            body = b"x" * rng.randrange(50)
            ready[queue.push(message(body, rng.choice([None, 0, 1, 2, 3, 4, 9])))] = len(body)
        elif op < 0.65:
            expected = expected_next()
            item = queue.take()
            assert (None if item is None else (item[0], item[2])) == expected
            if item:
                del ready[item[0]]
                requeued.discard(item[0])
                taken.append(item[0])
        elif op < 0.75 and taken:
            queue.ack(taken.pop(rng.randrange(len(taken))))
        elif op < 0.85 and taken:
            batch = [taken.pop(rng.randrange(len(taken))) for _ in range(rng.randrange(1, len(taken) + 1))]
            queue.requeue(sorted(batch))
            requeued.update(batch)
            ready.update((i, len(queue.read(i).body)) for i in batch)
        elif op < 0.92 and ready:
            removed = rng.choice(sorted(ready))
            queue.remove(removed)
            del ready[removed]
            requeued.discard(removed)
        else:
            peeked = queue.peek()
            assert (None if peeked is None else (peeked[0], peeked[2])) == expected_next()
        assert len(queue) == len(ready) and queue.ready_bytes == sum(ready.values())
    queue.delete()
