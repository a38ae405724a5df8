"""The storage change tap: a broker's every change under its data dir, applied at once to a
mirror through a ChangeApplier, leaves the mirror equal to the data dir, and a broker
started on the mirror holds the same queues and messages. Applying the changes twice
changes nothing; the applier refuses paths outside the replicated data."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika
import pytest
import requests
from lavin.storage.change_applier import ChangeApplier, UnsafePath
from lavin.storage.changes import CHANGES, StrPath
from lavin.storage.data_dir_index import index_data_dir, relative_path
from lavin.testing import running_broker

PERSISTENT = pika.BasicProperties(delivery_mode=2)
BIG_BODY = 200 * 1024  # 120 of them fill three 8 MiB segments
GUEST = ("guest", "guest")

Change = tuple[str, tuple[Any, ...]]


class MirroringSink:
    """Applies each change to the mirror as it is reported, and keeps the list."""

    def __init__(self, data_dir: Path, mirror: Path) -> None:
        self.data_dir = data_dir
        self.applier = ChangeApplier(mirror)
        self.changes: list[Change] = []
        self._lock = threading.Lock()  # some changes come from worker threads

    def written(self, path: StrPath, offset: int, data: bytes) -> None:
        self._apply(path, "write", offset, bytes(data))

    def truncated(self, path: StrPath, size: int) -> None:
        self._apply(path, "truncate", size)

    def replaced(self, path: StrPath, data: bytes) -> None:
        self._apply(path, "replace", bytes(data))

    def removed(self, path: StrPath) -> None:
        self._apply(path, "remove")

    def renamed(self, source: StrPath, target: StrPath) -> None:
        source_path, target_path = relative_path(self.data_dir, source), relative_path(self.data_dir, target)
        if source_path is not None and target_path is not None:
            with self._lock:
                self.changes.append(("rename", (source_path, target_path)))
                self.applier.rename(source_path, target_path)

    def _apply(self, path: StrPath, operation: str, *arguments: Any) -> None:
        relative = relative_path(self.data_dir, path)
        if relative is not None:
            with self._lock:
                self.changes.append((operation, (relative, *arguments)))
                apply(self.applier, operation, (relative, *arguments))


def apply(applier: ChangeApplier, operation: str, arguments: tuple[Any, ...]) -> None:
    getattr(applier, operation)(*arguments)


@contextmanager
def mirrored(data_dir: Path, mirror: Path) -> Iterator[MirroringSink]:
    mirror.mkdir()
    sink = MirroringSink(data_dir, mirror)
    CHANGES.sink = sink
    try:
        yield sink
    finally:
        CHANGES.sink = None
        sink.applier.sync()
        sink.applier.close()


def publish(channel: Any, routing_key: str, bodies: list[bytes], exchange: str = "", **properties: Any) -> None:
    for body in bodies:
        channel.basic_publish(exchange, routing_key, body, pika.BasicProperties(delivery_mode=2, **properties))


def big(index: int) -> bytes:
    return f"{index:06d}".encode() * (BIG_BODY // 6)


def workload(url: str, http_url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    # A queue whose first segments fill up, are consumed and deleted.
    channel.queue_declare("big", durable=True)
    publish(channel, "big", [big(index) for index in range(120)])
    for _ in range(80):
        method, _, _ = channel.basic_get("big")
        channel.basic_ack(method.delivery_tag)
    # Acks of some, requeues (delivery counts) of others.
    channel.queue_declare("work", durable=True, arguments={"x-delivery-limit": 5})
    publish(channel, "work", [f"w{index}".encode() for index in range(20)])
    for index in range(10):
        method, _, _ = channel.basic_get("work")
        if index % 2:
            channel.basic_ack(method.delivery_tag)
        else:
            channel.basic_nack(method.delivery_tag, requeue=True)
    # Purged and deleted queues.
    channel.queue_declare("purged", durable=True)
    publish(channel, "purged", [b"p"] * 10)
    channel.queue_purge("purged")
    channel.queue_declare("deleted", durable=True)
    publish(channel, "deleted", [b"d"] * 10)
    channel.queue_delete("deleted")
    # Priorities; exchanges and bindings; a message dead-lettered on expiry.
    channel.queue_declare("prio", durable=True, arguments={"x-max-priority": 5})
    for priority in (1, 5, 3):
        publish(channel, "prio", [f"prio{priority}".encode()], priority=priority)
    channel.exchange_declare("routes", "topic", durable=True)
    channel.exchange_declare("dead", "fanout", durable=True)
    channel.queue_declare("routed", durable=True)
    channel.queue_bind("routed", "routes", "a.#")
    channel.queue_bind("routed", "dead")
    channel.queue_declare("expiring", durable=True, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "dead"})
    publish(channel, "a.b", [b"routed"], exchange="routes")
    publish(channel, "expiring", [b"expired"])
    # A stream in small segments, with an offset stored for a named consumer.
    stream_arguments = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 4096}
    channel.queue_declare("log", durable=True, arguments=stream_arguments)
    publish(channel, "log", [f"log{index}".encode() * 50 for index in range(60)])
    channel.basic_qos(prefetch_count=100)
    received: list[int] = []

    def on_message(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
        received.append(method.delivery_tag)
        if len(received) <= 30:
            ch.basic_ack(method.delivery_tag)

    tracked = {"x-stream-offset": "first", "x-stream-automatic-offset-tracking": True}
    channel.basic_consume("log", on_message, consumer_tag="reader", arguments=tracked)
    deadline = time.monotonic() + 10
    while len(received) < 60 and time.monotonic() < deadline:
        connection.process_data_events(0.05)
    channel.basic_cancel("reader")
    time.sleep(0.2)  # the expired message is dead-lettered
    connection.close()
    # Policies, users, permissions, a vhost made and one made then deleted.
    session = requests.Session()
    session.auth = GUEST
    assert session.put(
        f"{http_url}/api/policies/%2F/lengths",
        json={"pattern": "^work$", "definition": {"max-length": 1000}, "apply-to": "queues"},
        timeout=10,
    ).ok
    assert session.put(f"{http_url}/api/users/alice", json={"password": "secret", "tags": ""}, timeout=10).ok
    for vhost in ("kept", "gone"):
        assert session.put(f"{http_url}/api/vhosts/{vhost}", timeout=10).ok
        assert session.put(
            f"{http_url}/api/permissions/{vhost}/alice",
            json={"configure": ".*", "write": ".*", "read": ".*"},
            timeout=10,
        ).ok
    assert session.delete(f"{http_url}/api/vhosts/gone", timeout=10).ok


def contents(url: str) -> dict[str, list[bytes]]:
    """The bodies of every classic and priority queue, read without acking."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    found = {}
    for queue in ("big", "work", "purged", "prio", "routed", "expiring"):
        bodies = []
        while (got := channel.basic_get(queue))[0] is not None:
            bodies.append(got[2])
        found[queue] = bodies
    connection.close()
    return found


def http_names(http_url: str, kind: str) -> list[str]:
    response = requests.get(f"{http_url}/api/{kind}", auth=GUEST, timeout=10)
    return sorted(item["name"] for item in response.json())


@pytest.fixture
def mirrored_run(tmp_path: Path) -> tuple[Path, Path, MirroringSink]:
    data, mirror = tmp_path / "data", tmp_path / "mirror"
    with mirrored(data, mirror) as sink, running_broker(data) as lavin:
        workload(lavin.url, lavin.http_url)
    return data, mirror, sink


def test_the_mirror_equals_the_data_dir_and_serves_the_same_messages(
    mirrored_run: tuple[Path, Path, MirroringSink],
) -> None:
    data, mirror, sink = mirrored_run
    assert {"write", "replace", "remove", "rename"} <= {operation for operation, _ in sink.changes}
    assert index_data_dir(data) == index_data_dir(mirror)
    names = {entry.path.rsplit("/", 1)[-1] for entry in index_data_dir(mirror)}
    assert {"acks.0000000001", "consumer_offsets", "delivery_counts", "first_segment", "users.json"} <= names
    with running_broker(data) as lavin:
        expected = contents(lavin.url), http_names(lavin.http_url, "vhosts"), http_names(lavin.http_url, "policies")
    with running_broker(mirror) as lavin:
        assert (contents(lavin.url), http_names(lavin.http_url, "vhosts"), http_names(lavin.http_url, "policies")) == (
            expected
        )
        assert http_names(lavin.http_url, "users") == ["alice", "guest"]
    big_bodies, work_bodies, _, prio_bodies, routed, _ = expected[0].values()
    assert big_bodies == [big(index) for index in range(80, 120)]
    assert len(work_bodies) == 15 and prio_bodies == [b"prio5", b"prio3", b"prio1"]
    assert routed == [b"routed", b"expired"]
    assert expected[1] == ["/", "kept"]


def test_applying_every_change_again_changes_nothing(
    tmp_path: Path, mirrored_run: tuple[Path, Path, MirroringSink]
) -> None:
    data, mirror, sink = mirrored_run
    # A copy of the final data dir, then every change from the start: a follower that
    # fetched files part-way through the stream and then receives what came after.
    again = tmp_path / "again"
    shutil.copytree(mirror, again)
    applier = ChangeApplier(again)
    for operation, arguments in sink.changes:
        apply(applier, operation, arguments)
    applier.sync()
    applier.close()
    assert index_data_dir(again) == index_data_dir(data)


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", ".lock", "v/transient/q/msgs.0000000001", ""])
def test_the_applier_refuses_paths_outside_the_replicated_data(tmp_path: Path, path: str) -> None:
    applier = ChangeApplier(tmp_path)
    with pytest.raises(UnsafePath):
        applier.write(path, 0, b"x")
    with pytest.raises(UnsafePath):
        applier.rename("a", path)
    assert list(tmp_path.iterdir()) == []


def test_the_applier_does_not_follow_a_symlink_out_of_its_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(UnsafePath):
        ChangeApplier(root).replace("link/users.json", b"[]")
    assert list(outside.iterdir()) == []
