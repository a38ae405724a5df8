"""Many queues: on a small open-file limit idle queues hold no file descriptors, so
connections keep being accepted and every message survives a restart; `max_queues` caps
how many there may be."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from broker_process import BrokerFactory
from helpers import RawClient, closes_channel
from lavin.config import Config, StartupError
from limited_broker import LimitedBroker, open_fds, open_files_limit
from pamqp import commands

pytestmark = pytest.mark.timeout(120)

QUEUES = 1000
OPEN_FILE_LIMIT = 256
PERSISTENT = commands.Basic.Properties(delivery_mode=2).marshal()
# Beyond the sockets: the pool's share (an eighth of the limit, entries of up to two fds)
# and what every broker holds (interpreter, event loop, listener, lock, definitions, log).
STORE_FDS = 2 * (OPEN_FILE_LIMIT // 8)
BASE_FDS = 32


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LimitedBroker]:
    # The soft limit starts below the hard one: the broker raises it at start-up.
    process = LimitedBroker(tmp_path / "data", {"RLIMIT_NOFILE": (OPEN_FILE_LIMIT // 2, OPEN_FILE_LIMIT)})
    process.start()
    yield process
    process.kill()


def queue_name(number: int) -> str:
    return f"many-{number:04d}"


def declare_and_publish(raw: RawClient) -> None:
    """A durable queue per number with one persistent message each, confirmed."""
    channel = raw.open_channel()
    raw.call(channel, commands.Confirm.Select(), commands.Confirm.SelectOk)
    for number in range(QUEUES):
        raw.call(channel, commands.Queue.Declare(queue=queue_name(number), durable=True), commands.Queue.DeclareOk)
    raw.send_bytes(
        b"".join(
            RawClient.publish_bytes(
                channel, queue_name(number).encode(), routing_key=queue_name(number), properties=PERSISTENT
            )
            for number in range(QUEUES)
        )
    )
    confirmed = 0
    while confirmed < QUEUES:
        ack = raw.expect(channel, commands.Basic.Ack)
        confirmed = ack.delivery_tag if ack.multiple else confirmed + 1


def held_fds(broker: LimitedBroker, connections: int) -> int:
    assert broker.pid is not None
    held = open_fds(broker.pid)
    assert held <= connections + STORE_FDS + BASE_FDS, f"{held} fds with {QUEUES} queues, {connections} connections"
    return held


def test_thousands_of_queues_hold_few_files_and_connections_are_still_accepted(broker: LimitedBroker) -> None:
    assert broker.pid is not None
    assert open_files_limit(broker.pid) == (OPEN_FILE_LIMIT, OPEN_FILE_LIMIT)
    with RawClient(broker.port) as raw:
        declare_and_publish(raw)
        held_fds(broker, 1)
        with contextlib.ExitStack() as stack:
            for _ in range(20):
                stack.enter_context(RawClient(broker.port))
            held_fds(broker, 21)

    broker.kill()
    broker.start()  # recovers every queue under the same limit
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        for number in range(QUEUES):
            method, _, body = channel.basic_get(queue_name(number), auto_ack=True)
            assert method is not None and body == queue_name(number).encode(), queue_name(number)
        held_fds(broker, 1)
    finally:
        connection.close()


def queue_limit_text(name: str, limit: int) -> str:
    return f"PRECONDITION_FAILED - cannot declare queue '{name}': queue limit in cluster ({limit}) is reached"


def test_max_queues_refuses_one_queue_more_as_rabbitmq_does(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    ini = tmp_path / "lavin.ini"
    ini.write_text("[main]\nmax_queues = 3\n")
    limited = broker_factory(extra_args=("--config", str(ini)))
    connection = pika.BlockingConnection(pika.URLParameters(limited.url))
    try:
        channel = connection.channel()
        for name in ("first", "second"):
            channel.queue_declare(name, durable=True)
        channel.queue_declare("", exclusive=True)  # every queue counts, server-named ones too
        channel.queue_declare("first", durable=True)  # an existing queue may be declared again
        channel.queue_declare("second", passive=True)
        with closes_channel(406, queue_limit_text("third", 3)):
            channel.queue_declare("third", durable=True)
        channel = connection.channel()
        with closes_channel(406, "PRECONDITION_FAILED - cannot declare queue 'amq.gen-", exact=False):
            channel.queue_declare("", exclusive=True)
        channel = connection.channel()
        channel.queue_delete("first")
        channel.queue_declare("third", durable=True)  # room again
    finally:
        connection.close()


def test_a_negative_max_queues_stops_start_up() -> None:
    with pytest.raises(StartupError, match="max_queues must be 0"):
        Config(max_queues=-1)
