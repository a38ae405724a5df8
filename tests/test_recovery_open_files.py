"""A broker under an open-file limit it cannot raise (RLIMIT_NOFILE 64, soft and hard).

A queue with more segment files than that comes back whole after a kill -9 and after a
clean stop: recovery hands each segment to the open-file pool as it scans it instead of
holding all of them open at once. Segments are 4 KiB and hold one message each.

Clients that take every descriptor left do not stop the memory alarm's samples.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from broker_process import BrokerProcess
from helpers import Consumer, get_messages, open_session
from lavin.broker.runtime.alarms import CHECK_INTERVAL
from limited_broker import LimitedBroker

OPEN_FILE_LIMIT = 64
SEGMENT_SIZE = 4096
MESSAGES = 3 * OPEN_FILE_LIMIT  # one segment each: three times the descriptors there are
PERSISTENT = pika.BasicProperties(delivery_mode=2)
QUEUE = "long-queue"
QUEUE_TYPES = [
    pytest.param({}, id="classic"),
    pytest.param({"x-max-priority": 3}, id="priority"),
    pytest.param({"x-queue-type": "quorum"}, id="quorum"),
    pytest.param({"x-queue-type": "stream"}, id="stream"),
]


def body(index: int) -> bytes:
    """A distinct body that fills most of a segment, so each message rolls one over."""
    return f"{index:06d}".encode().ljust(3000, b".")


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[LimitedBroker]:
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[main]\nsegment_size = {SEGMENT_SIZE}\n")
    limits = {"RLIMIT_NOFILE": (OPEN_FILE_LIMIT, OPEN_FILE_LIMIT)}
    process = LimitedBroker(tmp_path / "data", limits, extra_args=["--config", str(ini)])
    process.start()
    yield process
    process.stop()


def publish_confirmed(process: BrokerProcess, arguments: dict[str, Any]) -> None:
    with open_session(process.url) as session:
        session.channel.queue_declare(QUEUE, durable=True, arguments=arguments)
        session.channel.confirm_delivery()
        for index in range(MESSAGES):
            session.channel.basic_publish("", QUEUE, body(index), PERSISTENT)


def read_back(process: BrokerProcess, arguments: dict[str, Any]) -> list[bytes]:
    connection = pika.BlockingConnection(pika.URLParameters(process.url))
    try:
        channel = connection.channel()
        if arguments.get("x-queue-type") == "stream":
            channel.basic_qos(prefetch_count=MESSAGES)
            consumer = Consumer(channel, QUEUE, arguments={"x-stream-offset": "first"})
            return [message.body for message in consumer.wait_for(MESSAGES)]
        return [message.body for message in get_messages(channel, QUEUE, MESSAGES)]
    finally:
        connection.close()


def segment_files(process: BrokerProcess) -> int:
    return sum(1 for _ in process.data_dir.rglob("msgs.*"))


@pytest.mark.parametrize("arguments", QUEUE_TYPES)
@pytest.mark.parametrize("halt", [BrokerProcess.kill, BrokerProcess.stop], ids=["kill-9", "clean-stop"])
def test_a_queue_of_more_segments_than_open_files_comes_back_whole(
    limited: LimitedBroker, arguments: dict[str, Any], halt: Callable[[BrokerProcess], object]
) -> None:
    publish_confirmed(limited, arguments)
    halt(limited)
    assert segment_files(limited) > OPEN_FILE_LIMIT

    limited.start()

    assert read_back(limited, arguments) == [body(index) for index in range(MESSAGES)]
    assert "Too many open files" not in limited.output
    assert "Traceback" not in limited.output


def test_an_open_file_limit_that_cannot_be_raised_is_named_in_the_log(limited: LimitedBroker) -> None:
    assert f"Open file limit {OPEN_FILE_LIMIT} is low" in limited.output


def test_clients_that_take_every_descriptor_leave_the_memory_samples_running(limited: LimitedBroker) -> None:
    with contextlib.ExitStack() as held:
        for _ in range(OPEN_FILE_LIMIT + 16):  # the kernel queues those the broker cannot accept
            held.enter_context(socket.create_connection((limited.host, limited.port)))
        time.sleep(3 * CHECK_INTERVAL)
    assert "/proc/self/statm" not in limited.output
    assert "Traceback" not in limited.output
    with open_session(limited.url) as session:
        session.declare_queue("after-the-flood")
