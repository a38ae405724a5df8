"""Conformance tests for queue types: subclass `QueueTypeKit` in your test suite.

The kit drives a store the way the core does, through `QueueType.create` with the core's
own storage toolkit, once as a transient and once as a durable queue: order, requeue,
ack, skip, remove, purge, peek, read, the counts, and the durability rules of
`lavin.api.queue` across a restart and a crash.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import pytest
from lavin.api import Arguments, Message, PreconditionFailed, QueueType, encode_properties
from lavin.storage.toolkit import SegmentStorage
from lavin.testing.entry_points import check_registered

PERSISTENT = encode_properties({"delivery_mode": 2})


def kit_message(body: bytes) -> Message:
    """A persistent message, as the core hands it to `push`."""
    return Message("kit-exchange", "kit.key", PERSISTENT, body)


def bodies(count: int) -> list[bytes]:
    return [f"m{index}".encode() for index in range(count)]


class QueueTypeKit:
    """Inherit it in a class named `Test...` and set `queue_type`. The kit expects FIFO
    order; a type with another order overrides `expected_order`."""

    queue_type: ClassVar[type[QueueType]]
    queue_arguments: ClassVar[Arguments] = {}
    # False for a type that refuses durable queues (with PreconditionFailed or InvalidArgument).
    supports_durable: ClassVar[bool] = True

    def expected_order(self, pushed: Sequence[bytes]) -> list[bytes]:
        """The bodies of messages pushed in this order, in the order `take` returns them.

        Requeued messages are expected back first, in the order they were taken.
        """
        return list(pushed)

    # -- helpers a subclass may use in tests of its own ------------------------------------

    def open_store(self, path: Path, durable: bool) -> QueueType:
        """Create (or recover) the store of a queue at `path`, as the core does."""
        store = self.queue_type.create(path, self.queue_arguments, durable, SegmentStorage())
        assert isinstance(store, QueueType), f"create returned {store!r}, not a QueueType"
        return store

    @staticmethod
    def push_all(store: QueueType, messages: Sequence[bytes]) -> dict[bytes, int]:
        """Push persistent messages with these bodies; their ids by body."""
        return {body: store.push(kit_message(body)) for body in messages}

    @staticmethod
    def take_all(store: QueueType) -> list[tuple[int, bytes, bool]]:
        """Take until the queue is empty: (id, body, redelivered) each."""
        taken = []
        while (item := store.take()) is not None:
            message_id, message, redelivered = item
            taken.append((message_id, bytes(message.body), redelivered))
        return taken

    @staticmethod
    def take_body(store: QueueType) -> bytes:
        item = store.take()
        assert item is not None, "the queue is empty"
        return bytes(item[1].body)

    @staticmethod
    def assert_counts(store: QueueType, ready: Sequence[bytes]) -> None:
        assert (len(store), store.ready_bytes) == (len(ready), sum(map(len, ready)))

    def require_durable(self) -> None:
        if not self.supports_durable:
            pytest.skip("the type refuses durable queues")

    def durable_store(self, path: Path) -> QueueType:
        self.require_durable()
        return self.open_store(path, durable=True)

    @pytest.fixture(params=[False, True], ids=["transient", "durable"])
    def durable(self, request: pytest.FixtureRequest) -> bool:
        """Each test of a `store` runs for a transient and for a durable queue."""
        if request.param:
            self.require_durable()
        return bool(request.param)

    @pytest.fixture
    def store(self, durable: bool, tmp_path: Path) -> Iterator[QueueType]:
        store = self.open_store(tmp_path / "queue", durable)
        yield store
        store.delete()

    # -- the kit ---------------------------------------------------------------------------

    def test_name_matches_its_entry_point(self) -> None:
        check_registered("lavin.queues", self.queue_type)

    def test_a_new_queue_is_empty(self, store: QueueType) -> None:
        self.assert_counts(store, [])
        assert store.take() is None and store.peek() is None
        assert store.purge() == 0

    def test_take_returns_every_message_once_in_order(self, store: QueueType) -> None:
        pushed = bodies(5)
        ids = self.push_all(store, pushed)
        assert len(set(ids.values())) == len(ids), "ids are unique until acked"
        assert all(0 <= message_id < 2**64 for message_id in ids.values())
        self.assert_counts(store, pushed)
        taken = self.take_all(store)
        assert [body for _, body, _ in taken] == self.expected_order(pushed)
        assert all(message_id == ids[body] and not redelivered for message_id, body, redelivered in taken)
        self.assert_counts(store, [])

    def test_peek_shows_what_take_returns_next(self, store: QueueType) -> None:
        pushed = bodies(3)
        self.push_all(store, pushed)
        for left in range(len(pushed), 0, -1):
            peeked = store.peek()
            assert peeked is not None and store.peek() is not None
            assert len(store) == left, "peek leaves the message ready"
            taken = store.take()
            assert taken is not None
            assert (peeked[0], peeked[1].body, peeked[2]) == (taken[0], taken[1].body, taken[2])
        assert store.peek() is None

    def test_read_returns_ready_and_taken_messages(self, store: QueueType) -> None:
        ids = self.push_all(store, bodies(3))
        store.take()
        for body, message_id in ids.items():
            message = store.read(message_id)
            assert (message.body, message.exchange, message.routing_key) == (body, "kit-exchange", "kit.key")
            assert message.properties == PERSISTENT

    def test_ack_forgets_a_taken_message(self, store: QueueType) -> None:
        pushed = bodies(3)
        self.push_all(store, pushed)
        order = self.expected_order(pushed)
        for _ in range(2):
            item = store.take()
            assert item is not None
            store.ack(item[0])
        self.assert_counts(store, order[2:])
        assert [body for _, body, _ in self.take_all(store)] == order[2:]

    def test_requeued_messages_come_back_first_in_their_order(self, store: QueueType) -> None:
        pushed = bodies(5)
        ids = self.push_all(store, pushed)
        first, second = self.expected_order(pushed)[:2]
        assert [self.take_body(store) for _ in range(2)] == [first, second]
        pushed.append(b"late")
        ids.update(self.push_all(store, [b"late"]))
        store.requeue([ids[second], ids[first]])  # the core may hand them over in any order
        never_taken = [body for body in pushed if body not in (first, second)]
        self.assert_counts(store, pushed)
        expected = [(ids[first], first, True), (ids[second], second, True)]
        expected += [(ids[body], body, False) for body in self.expected_order(never_taken)]
        assert self.take_all(store) == expected

    def test_skip_marks_the_message_just_pushed_taken(self, store: QueueType) -> None:
        ids = self.push_all(store, [b"direct"])
        store.skip(ids[b"direct"])
        self.assert_counts(store, [])
        assert store.take() is None
        self.push_all(store, [b"next"])
        assert self.take_body(store) == b"next"
        store.requeue([ids[b"direct"]])
        assert store.take() is not None and store.peek() is None
        store.ack(ids[b"direct"])

    def test_push_taken_hands_the_message_over_without_making_it_ready(self, store: QueueType) -> None:
        message_id = store.push_taken(kit_message(b"direct"))
        self.assert_counts(store, [])
        assert store.take() is None and bytes(store.read(message_id).body) == b"direct"
        store.requeue([message_id])
        assert self.take_all(store) == [(message_id, b"direct", True)]
        store.ack(message_id)

    def test_remove_drops_a_ready_message_wherever_it_waits(self, store: QueueType) -> None:
        pushed = bodies(5)
        ids = self.push_all(store, pushed)
        order = self.expected_order(pushed)
        requeued = order[0]
        assert self.take_body(store) == requeued
        store.requeue([ids[requeued]])
        for body in (requeued, order[1], order[3]):  # a requeued one, the next in line, one behind
            store.remove(ids[body])
        rest = [order[2], order[4]]
        self.assert_counts(store, rest)
        assert [body for _, body, _ in self.take_all(store)] == rest

    def test_purge_drops_ready_messages_only(self, store: QueueType) -> None:
        pushed = bodies(4)
        ids = self.push_all(store, pushed)
        taken = self.take_body(store)
        assert store.purge() == 3
        self.assert_counts(store, [])
        assert store.take() is None
        store.requeue([ids[taken]])
        self.assert_counts(store, [taken])
        assert self.take_all(store) == [(ids[taken], taken, True)]

    def test_flush_returns_open_fds(self, store: QueueType, durable: bool) -> None:
        self.push_all(store, bodies(2))
        fds = store.flush()
        for fd in fds:
            os.fstat(fd)  # the core fsyncs them
        assert fds or not durable, "a durable queue's persistent messages need an fsync"

    def test_durable_queues_are_refused_when_unsupported(self, tmp_path: Path) -> None:
        if self.supports_durable:
            pytest.skip("the type supports durable queues")
        with pytest.raises(PreconditionFailed):
            self.open_store(tmp_path / "queue", durable=True)

    def test_a_restart_keeps_messages_not_acked(self, tmp_path: Path) -> None:
        """Taken but unacked messages come back; acked and removed ones do not."""
        store = self.durable_store(tmp_path / "queue")
        pushed = bodies(6)
        ids = self.push_all(store, pushed)
        order = self.expected_order(pushed)
        fsync(store.flush())
        acked, unacked, removed = order[0], order[1], order[-1]
        assert [self.take_body(store) for _ in range(2)] == [acked, unacked]
        store.ack(ids[acked])
        store.remove(ids[removed])
        store.close()
        reopened = self.open_store(tmp_path / "queue", durable=True)
        survivors = [body for body in pushed if body not in (acked, removed)]
        self.assert_counts(reopened, survivors)
        assert [body for _, body, _ in self.take_all(reopened)] == self.expected_order(survivors)
        reopened.delete()

    def test_a_crash_keeps_what_flush_covered(self, tmp_path: Path) -> None:
        """A copy of the files just after flush and fsync is what a crash leaves behind."""
        store = self.durable_store(tmp_path / "queue")
        pushed = bodies(4)
        ids = self.push_all(store, pushed)
        acked = self.take_body(store)
        store.ack(ids[acked])
        fsync(store.flush())
        shutil.copytree(tmp_path / "queue", tmp_path / "crashed")
        store.delete()
        recovered = self.open_store(tmp_path / "crashed", durable=True)
        survivors = [body for body in pushed if body != acked]
        assert [body for _, body, _ in self.take_all(recovered)] == self.expected_order(survivors)
        recovered.delete()

    def test_purged_and_deleted_messages_stay_gone(self, tmp_path: Path) -> None:
        purged = self.durable_store(tmp_path / "purged")
        self.push_all(purged, bodies(3))
        fsync(purged.flush())
        purged.purge()
        purged.close()
        deleted = self.open_store(tmp_path / "deleted", durable=True)
        self.push_all(deleted, bodies(3))
        fsync(deleted.flush())
        deleted.delete()
        for name in ("purged", "deleted"):
            reopened = self.open_store(tmp_path / name, durable=True)
            self.assert_counts(reopened, [])
            reopened.delete()


def fsync(fds: list[int]) -> None:
    """What the core does with the fds `flush` returns before it confirms anything."""
    for fd in fds:
        os.fsync(fd)
