"""A disk that refuses writes: what could not be written is nacked, never confirmed.

The broker child runs with a small RLIMIT_FSIZE: once a queue's segment file would grow
past it, `write` stores part of the data and then fails with EFBIG. Other queues, whose
files stay small, go on writing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from helpers import RawClient, closes_channel, drain
from limited_broker import LimitedBroker
from pamqp import commands

pytestmark = pytest.mark.timeout(60)

PERSISTENT = commands.Basic.Properties(delivery_mode=2).marshal()
FILE_SIZE_LIMIT = 256 * 1024
BIG = 4000  # bytes of a body that fills the limited queue
BATCH = 25
FULL = "fills-its-file"
HEALTHY = "small"


@pytest.fixture
def limited_broker(tmp_path: Path) -> Iterator[LimitedBroker]:
    broker = LimitedBroker(tmp_path / "data", {"RLIMIT_FSIZE": (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT)})
    broker.start()
    yield broker
    broker.kill()


def body(number: int, size: int = BIG) -> bytes:
    return f"{number:08d}".encode().ljust(size, b".")


class ConfirmingPublisher:
    """A channel in confirm mode on a bare client: publishes and the broker's answers."""

    def __init__(self, raw: RawClient) -> None:
        self.raw = raw
        self.channel = raw.open_channel()
        raw.call(self.channel, commands.Confirm.Select(), commands.Confirm.SelectOk)
        self.published = 0

    def publish(self, messages: list[tuple[str, bytes]]) -> list[bool]:
        """Publish (queue, body) pairs and wait for their confirms: acked or not, in order."""
        first = self.published + 1
        self.raw.send_bytes(
            b"".join(
                RawClient.publish_bytes(self.channel, data, routing_key=queue, properties=PERSISTENT)
                for queue, data in messages
            )
        )
        self.published += len(messages)
        outcome: dict[int, bool] = {}
        while len(outcome) < len(messages):
            frame = self.raw.read_frame().value
            assert isinstance(frame, (commands.Basic.Ack, commands.Basic.Nack)), frame
            tags = range(first + len(outcome), frame.delivery_tag + 1) if frame.multiple else [frame.delivery_tag]
            for tag in tags:
                outcome[tag] = isinstance(frame, commands.Basic.Ack)
        return [outcome[tag] for tag in range(first, self.published + 1)]

    def fill_until_nacked(self, queue: str) -> tuple[set[bytes], int]:
        """Publish big messages into `queue` until some are nacked: (acked bodies, nacks)."""
        acked: set[bytes] = set()
        for first in range(0, 4 * FILE_SIZE_LIMIT // BIG, BATCH):
            bodies = [body(number) for number in range(first, first + BATCH)]
            outcome = self.publish([(queue, data) for data in bodies])
            acked.update(data for data, ok in zip(bodies, outcome, strict=True) if ok)
            if not all(outcome):
                return acked, outcome.count(False)
        pytest.fail(f"no publish into {queue} was nacked: the file size limit was never reached")


def declare_durable(raw: RawClient, channel: int, *queues: str) -> None:
    for queue in queues:
        raw.call(channel, commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk)


def bodies_in(broker: LimitedBroker, queue: str) -> set[bytes]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        return {message.body for message in drain(connection.channel(), queue)}
    finally:
        connection.close()


def test_what_could_not_be_written_is_nacked_and_every_ack_survives_a_crash(limited_broker: LimitedBroker) -> None:
    acked: set[bytes] = set()
    nacks = 0
    with RawClient(limited_broker.port) as raw:
        publisher = ConfirmingPublisher(raw)
        declare_durable(raw, publisher.channel, FULL)
        acked, nacks = publisher.fill_until_nacked(FULL)
        # The file stays full: every later publish into it is nacked too.
        for first in range(10_000, 10_000 + 4 * BATCH, BATCH):
            bodies = [body(number) for number in range(first, first + BATCH)]
            outcome = publisher.publish([(FULL, data) for data in bodies])
            assert not any(outcome)
            nacks += len(outcome)

    limited_broker.kill()
    limited_broker.limits = {}
    limited_broker.start()
    lost = acked - bodies_in(limited_broker, FULL)
    assert not lost, f"{len(lost)} of {len(acked)} acked messages were lost after a crash"
    assert acked
    assert nacks >= 4 * BATCH
    assert "could not write <MessageQueue 'fills-its-file'>: [Errno 27] File too large" in limited_broker.output


def test_only_publishes_into_the_failing_queue_are_nacked(limited_broker: LimitedBroker) -> None:
    with RawClient(limited_broker.port) as raw:
        publisher = ConfirmingPublisher(raw)
        declare_durable(raw, publisher.channel, FULL, HEALTHY)
        publisher.fill_until_nacked(FULL)
        small = [body(number, 100) for number in range(40)]
        # One channel, alternating: each publish is judged by the store it went into.
        messages = [(queue, data) for data in small for queue in (FULL, HEALTHY)]
        outcome = publisher.publish(messages)
        assert outcome == [queue == HEALTHY for queue, _ in messages]
    limited_broker.kill()
    limited_broker.limits = {}
    limited_broker.start()
    assert bodies_in(limited_broker, HEALTHY) == set(small)


def test_a_commit_whose_publish_could_not_be_written_is_refused(limited_broker: LimitedBroker) -> None:
    with RawClient(limited_broker.port) as raw:
        publisher = ConfirmingPublisher(raw)
        declare_durable(raw, publisher.channel, FULL, HEALTHY)
        publisher.fill_until_nacked(FULL)
    connection = pika.BlockingConnection(pika.URLParameters(limited_broker.url))
    try:
        channel = connection.channel()
        channel.tx_select()
        channel.basic_publish("", HEALTHY, b"committed", pika.BasicProperties(delivery_mode=2))
        channel.tx_commit()
        channel.basic_publish("", FULL, body(99_999), pika.BasicProperties(delivery_mode=2))
        with closes_channel(406, "PRECONDITION_FAILED - partial tx completion"):
            channel.tx_commit()
    finally:
        connection.close()
    limited_broker.kill()
    limited_broker.limits = {}
    limited_broker.start()
    assert bodies_in(limited_broker, HEALTHY) == {b"committed"}


def test_a_broker_that_cannot_write_stops_cleanly(limited_broker: LimitedBroker) -> None:
    with RawClient(limited_broker.port) as raw:
        publisher = ConfirmingPublisher(raw)
        declare_durable(raw, publisher.channel, FULL)
        acked, _ = publisher.fill_until_nacked(FULL)
    assert limited_broker.stop() == 0
    assert "Traceback" not in limited_broker.output
    assert "could not write everything before closing: [Errno 27] File too large" in limited_broker.output
    limited_broker.limits = {}
    limited_broker.start()
    assert acked <= bodies_in(limited_broker, FULL)
