"""DefinitionsStore against real files: round trip, deletes, compaction, damaged tails."""

from __future__ import annotations

import datetime
import decimal
import logging
from pathlib import Path

import pytest
from lavin.storage.metadata.definitions_store import (
    BindingDef,
    Definitions,
    DefinitionsStore,
    ExchangeDef,
    QueueDef,
)

ARGUMENTS = {
    "x-max-length": 10,
    "x-big": 2**40,
    "x-negative": -5,
    "x-ratio": 0.5,
    "x-flag": True,
    "x-text": "héllo",
    "x-bytes": b"\x00\xff",
    "x-none": None,
    "x-list": [1, "two", [3]],
    "x-table": {"nested": {"deep": 1}},
    "x-time": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
    "x-decimal": decimal.Decimal("1.25"),
}


def reloaded(path: Path) -> Definitions:
    store = DefinitionsStore(path)
    try:
        return store.load()
    finally:
        store.close()


def populate(store: DefinitionsStore) -> None:
    store.exchange_declared(ExchangeDef("events", "topic", False, False, ARGUMENTS))
    store.exchange_declared(ExchangeDef("internal", "fanout", True, True, {}))
    store.queue_declared(QueueDef("orders", False, {"x-queue-type": "classic"}))
    store.queue_declared(QueueDef("audit", True, {}))
    store.bound(BindingDef("events", "orders", "queue", "order.*", {"x-match": "all", "a": 1}))
    store.bound(BindingDef("events", "internal", "exchange", "#", {}))
    store.bound(BindingDef("internal", "audit", "queue", "", {}))


def test_definitions_round_trip_with_arguments_of_every_type(tmp_path: Path) -> None:
    store = DefinitionsStore(tmp_path / "definitions.log")
    assert store.load() == Definitions()
    populate(store)
    store.close()

    loaded = reloaded(tmp_path / "definitions.log")
    assert list(loaded.exchanges) == ["events", "internal"]
    events = loaded.exchanges["events"]
    assert (events.type, events.auto_delete, events.internal) == ("topic", False, False)
    assert events.arguments == {**ARGUMENTS, "x-bytes": bytearray(b"\x00\xff")}
    assert loaded.exchanges["internal"] == ExchangeDef("internal", "fanout", True, True, {})
    assert loaded.queues == {
        "orders": QueueDef("orders", False, {"x-queue-type": "classic"}),
        "audit": QueueDef("audit", True, {}),
    }
    assert [(b.source, b.destination, b.destination_type, b.routing_key) for b in loaded.bindings] == [
        ("events", "orders", "queue", "order.*"),
        ("events", "internal", "exchange", "#"),
        ("internal", "audit", "queue", ""),
    ]
    assert loaded.bindings[0].arguments == {"x-match": "all", "a": 1}


def test_deletes_drop_the_bindings_of_what_they_delete(tmp_path: Path) -> None:
    path = tmp_path / "definitions.log"
    store = DefinitionsStore(path)
    store.load()
    populate(store)
    store.unbound(BindingDef("events", "orders", "queue", "order.*", {"a": 1, "x-match": "all"}))
    store.queue_deleted("audit")
    store.exchange_deleted("events")
    store.bound(BindingDef("internal", "orders", "queue", "again", {}))
    store.close()

    loaded = reloaded(path)
    assert list(loaded.exchanges) == ["internal"]
    assert list(loaded.queues) == ["orders"]
    assert [(b.source, b.destination, b.routing_key) for b in loaded.bindings] == [("internal", "orders", "again")]


def test_load_compacts_a_log_that_holds_deletes(tmp_path: Path) -> None:
    path = tmp_path / "definitions.log"
    store = DefinitionsStore(path)
    store.load()
    populate(store)
    for index in range(50):
        store.queue_declared(QueueDef(f"temp-{index}", False, {}))
        store.queue_deleted(f"temp-{index}")
    store.close()
    grown = path.stat().st_size

    first = reloaded(path)
    compacted = path.stat().st_size
    assert compacted < grown
    assert reloaded(path) == first
    assert path.stat().st_size == compacted  # nothing left to compact
    assert not path.with_name(path.name + ".tmp").exists()


def test_many_deletes_compact_the_log_at_runtime(tmp_path: Path) -> None:
    path = tmp_path / "definitions.log"
    store = DefinitionsStore(path, compact_after=10)
    store.load()
    store.queue_declared(QueueDef("keep", False, {}))
    size_with_one_queue = path.stat().st_size
    for index in range(10):
        store.queue_declared(QueueDef(f"temp-{index}", False, {}))
        store.queue_deleted(f"temp-{index}")
    assert path.stat().st_size == size_with_one_queue
    store.queue_declared(QueueDef("after", False, {}))
    store.close()
    assert list(reloaded(path).queues) == ["keep", "after"]


def test_redeclaring_the_same_definition_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "definitions.log"
    store = DefinitionsStore(path)
    store.load()
    populate(store)
    size = path.stat().st_size
    populate(store)
    store.queue_deleted("never-declared")
    assert path.stat().st_size == size
    store.queue_declared(QueueDef("orders", False, {"x-max-length": 1}))  # changed: written
    assert path.stat().st_size > size
    store.close()
    assert reloaded(path).queues["orders"].arguments == {"x-max-length": 1}


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_tail_record_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    path = tmp_path / "definitions.log"
    store = DefinitionsStore(path)
    store.load()
    populate(store)
    store.close()
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        del data[-5:]
    else:
        data[-3] ^= 0x55
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING):
        store = DefinitionsStore(path)
        loaded = store.load()
    assert "record at byte" in caplog.text
    assert len(loaded.bindings) == 2  # the last binding was the damaged record
    store.bound(BindingDef("internal", "orders", "queue", "later", {}))  # appended after the cut
    store.close()
    assert [b.routing_key for b in reloaded(path).bindings] == ["order.*", "#", "later"]


def test_changes_before_load_are_refused(tmp_path: Path) -> None:
    store = DefinitionsStore(tmp_path / "definitions.log")
    with pytest.raises(RuntimeError):
        store.queue_declared(QueueDef("q", False, {}))


def test_an_argument_amqp_cannot_carry_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "definitions.log"
    store = DefinitionsStore(path)
    store.load()
    with pytest.raises(TypeError):
        store.queue_declared(QueueDef("q", False, {"x-set": {1, 2}}))
    store.queue_declared(QueueDef("q", False, {}))  # not mistaken for a redeclare
    store.close()
    assert reloaded(path).queues == {"q": QueueDef("q", False, {})}
