"""The broker fixtures of the lavin pytest plugin, and `running_broker` under them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pika
import pytest
from lavin.config import StartupError
from lavin.testing import LavinBroker, running_broker
from pika.adapters.blocking_connection import BlockingChannel


@contextmanager
def channel_to(url: str) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def publish(url: str, queue: str, body: bytes) -> None:
    """To a durable queue, as a persistent message."""
    with channel_to(url) as channel:
        channel.queue_declare(queue, durable=True)
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
        channel.queue_declare(queue, passive=True)  # a round trip: the publish is handled


def get(url: str, queue: str) -> bytes | None:
    with channel_to(url) as channel:
        channel.queue_declare(queue, durable=True)
        body: bytes | None = channel.basic_get(queue, auto_ack=True)[2]
        return body


def test_lavin_url_reaches_a_broker_of_the_test(lavin_broker: LavinBroker, lavin_url: str) -> None:
    assert lavin_url == f"amqp://guest:guest@127.0.0.1:{lavin_broker.port}/%2F"
    publish(lavin_url, "greetings", b"hello")
    assert get(lavin_url, "greetings") == b"hello"


def test_the_session_broker_is_shared(lavin_broker_session: LavinBroker, lavin_broker: LavinBroker) -> None:
    assert lavin_broker_session.port != lavin_broker.port
    publish(lavin_broker_session.url, "session-greetings", b"hi")
    assert get(lavin_broker_session.url, "session-greetings") == b"hi"


def test_a_broker_runs_in_a_thread_and_stops_with_the_block(tmp_path: Path) -> None:
    threads_before = set(threading.enumerate())
    with running_broker(tmp_path / "data") as broker:
        publish(broker.url, "kept", b"durable")
        with pytest.raises(StartupError, match="in use by another broker"), running_broker(tmp_path / "data"):
            pass
    assert set(threading.enumerate()) <= threads_before
    with running_broker(tmp_path / "data") as restarted:
        assert get(restarted.url, "kept") == b"durable"


class TestPlugins:
    """`lavin_plugins` names what the brokers enable, as `lavin serve --plugin` does."""

    @pytest.fixture
    def lavin_plugins(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sequence[str]:
        monkeypatch.setenv("LAVIN_TEST_EVENTS_FILE", str(tmp_path / "events.jsonl"))
        return ["lifecycle_plugin"]  # tests/lifecycle_plugin.py, importable from tests/

    def test_the_broker_runs_the_named_plugins(self, lavin_broker: LavinBroker, tmp_path: Path) -> None:
        events = [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
        assert "startup" in events
