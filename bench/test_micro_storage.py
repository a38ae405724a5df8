"""Micro-benchmarks of the segment store: appending and reading back 16-byte messages.

Each call handles 1,000 messages, so a call's time in ms is the time per message in µs.
`bench/bench_storage.py` measures the same paths over millions of messages.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lavin.api.message import Message, encode_properties
from lavin.storage.segments.segment_store import SegmentStore
from pytest_benchmark.fixture import BenchmarkFixture

BATCH = 1000
ROUNDS = 200  # fixed, so the store stays a few MB however fast the machine is
TICK = 100  # pushes between flushes, like one busy event-loop tick


@pytest.fixture
def store(tmp_path: Path) -> SegmentStore:
    return SegmentStore(tmp_path / "queue", durable=True)


@pytest.fixture
def message() -> Message:
    return Message("amq.direct", "orders", encode_properties({"delivery_mode": 2}), b"x" * 16, 1)


def push_batch(store: SegmentStore, message: Message) -> None:
    for index in range(BATCH):
        store.push(message)
        if index % TICK == 0:
            store.flush()
    store.flush()


def test_segment_append_1000(benchmark: BenchmarkFixture, store: SegmentStore, message: Message) -> None:
    benchmark.pedantic(push_batch, args=(store, message), rounds=ROUNDS)
    store.delete()


def test_segment_read_and_ack_1000(benchmark: BenchmarkFixture, store: SegmentStore, message: Message) -> None:
    def take_and_ack() -> None:
        take, ack = store.take, store.ack
        for _ in range(BATCH):
            item = take()
            assert item is not None
            ack(item[0])
        store.flush()

    benchmark.pedantic(take_and_ack, setup=lambda: push_batch(store, message), rounds=ROUNDS)
    store.delete()
