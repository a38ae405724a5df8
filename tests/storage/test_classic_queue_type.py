"""The classic queue type: the QueueType contract over a segment store."""

from __future__ import annotations

from pathlib import Path

from lavin.api import QueueType
from lavin.api.message import Message, encode_properties
from lavin.plugins.queues.classic import ClassicQueue
from lavin.storage.toolkit import SegmentStorage


def test_classic_queue_is_a_queue_type_backed_by_files(tmp_path: Path) -> None:
    queue = ClassicQueue.create(tmp_path / "q", {"x-queue-mode": "lazy"}, True, SegmentStorage())
    assert isinstance(queue, QueueType)
    assert queue.durable
    persistent = encode_properties({"delivery_mode": 2})
    first = queue.push(Message("", "q", persistent, b"one"))
    queue.push(Message("", "q", persistent, b"two"))
    assert (len(queue), queue.ready_bytes) == (2, 6)
    assert queue.flush()
    item = queue.take()
    assert item is not None
    message_id, message, redelivered = item
    assert (message_id, message.body, redelivered) == (first, b"one", False)
    queue.requeue([message_id])
    again = queue.take()
    assert again is not None and (again[0], again[2]) == (message_id, True)
    queue.ack(message_id)
    queue.close()

    reopened = ClassicQueue.create(tmp_path / "q", {}, True, SegmentStorage())
    survivor = reopened.take()
    assert survivor is not None and survivor[1].body == b"two"
    assert reopened.take() is None
    assert reopened.purge() == 0
    reopened.delete()
    assert not (tmp_path / "q").exists()
