"""Publishers with confirms into durable classic, quorum and stream queues while the broker
is killed with SIGKILL at random moments, round after round.

After the last restart every confirmed message must be there, once, in each publisher's
order; unconfirmed ones may be there or not (they are never re-sent). A stream's offsets
count up from 0 without gaps, and an offset a consumer was given before a crash names the
same message after it: no offset is reused. Small segments make crashes land during
segment roll-overs too.

The seed is printed on failure; CRASH_LOOP_SEED=N replays a run's kill moments.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from broker_process import BrokerFactory, BrokerProcess
from lavin.client.wire import CHANNEL, AmqpError, Connection, connect
from pamqp import commands

SEED = int(os.environ.get("CRASH_LOOP_SEED", "20240611"))
ROUNDS = 6
RUN_SECONDS = (0.3, 1.5)  # how long publishers run before the kill, drawn per round
PUBLISHERS_PER_QUEUE = 2
WINDOW = 64  # unconfirmed messages a publisher keeps in flight
SEGMENT_SIZE = 64 * 1024
PERSISTENT = commands.Basic.Properties(delivery_mode=2)
QUEUES = {
    "crash-classic": {},
    "crash-quorum": {"x-queue-type": "quorum"},
    "crash-stream": {"x-queue-type": "stream"},
}
STREAM = "crash-stream"
END = b"end"  # published once after the last restart: readers stop at it
WAIT = 10.0  # seconds any single wait may take


@dataclass
class Publisher:
    """One publisher's bodies `queue:index:seq`, with seq increasing across rounds."""

    queue: str
    index: int
    next_seq: int = 0
    confirmed: list[int] = field(default_factory=list)

    def body(self, seq: int) -> bytes:
        return f"{self.queue}:{self.index}:{seq}".encode()

    def run(self, url: str) -> None:
        """Publish until the broker goes away; record what it confirms."""
        in_flight: dict[int, int] = {}  # delivery tag -> seq, ascending
        tag = 0
        try:
            with connect(url, WAIT) as connection:
                connection.call(commands.Confirm.Select(), commands.Confirm.SelectOk, CHANNEL)
                while True:
                    batch = range(self.next_seq, self.next_seq + WINDOW - len(in_flight))
                    connection.publish(self.queue, map(self.body, batch), PERSISTENT)
                    for seq in batch:
                        tag += 1
                        in_flight[tag] = seq
                    self.next_seq = batch.stop
                    self._settle(connection, in_flight)
        except (OSError, AmqpError):
            return  # the broker was killed

    def _settle(self, connection: Connection, in_flight: dict[int, int]) -> None:
        received = connection.recv_frame(WAIT)
        if received is None:
            raise AmqpError("connection closed")
        reply = received.frame
        if isinstance(reply, commands.Basic.Ack | commands.Basic.Nack):
            settled = [t for t in in_flight if t <= reply.delivery_tag] if reply.multiple else [reply.delivery_tag]
            for settled_tag in settled:
                seq = in_flight.pop(settled_tag)
                if isinstance(reply, commands.Basic.Ack):
                    self.confirmed.append(seq)
        elif isinstance(reply, commands.Connection.Close | commands.Channel.Close):
            raise AssertionError(f"{self.queue}: the broker closed the publisher: {reply}")


@dataclass
class StreamWatcher:
    """Reads the stream while publishers write it; remembers which body each offset had."""

    seen: dict[int, bytes] = field(default_factory=dict)

    def run(self, url: str) -> None:
        start = max(self.seen, default=-1) + 1
        try:
            with connect(url, WAIT) as connection:
                connection.qos(500)
                connection.consume(STREAM, arguments={"x-stream-offset": start})
                while True:
                    delivery = connection.next_delivery()
                    self.seen[stream_offset(delivery.properties)] = delivery.body
                    connection.ack(delivery.delivery_tag)
        except (OSError, AmqpError):
            return


def stream_offset(properties: commands.Basic.Properties) -> int:
    offset = (properties.headers or {}).get("x-stream-offset")
    assert isinstance(offset, int), f"a stream delivery without x-stream-offset: {properties}"
    return offset


@pytest.fixture
def crashing_broker(tmp_path: Path, broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker with small segments, so that kills land during roll-overs too."""
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[main]\nsegment_size = {SEGMENT_SIZE}\n")
    return broker_factory(extra_args=["--config", str(ini)])


def run_round(broker: BrokerProcess, publishers: list[Publisher], watcher: StreamWatcher, seconds: float) -> None:
    """Publishers and the stream watcher run for `seconds`, then the broker is killed."""
    threads = [threading.Thread(target=publisher.run, args=(broker.url,)) for publisher in publishers]
    threads.append(threading.Thread(target=watcher.run, args=(broker.url,)))
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    broker.kill()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a client did not notice the broker die"


Recovered = list[tuple[commands.Basic.Properties, bytes]]


def read_until_end(connection: Connection) -> Recovered:
    """Properties and body of every message delivered before the END marker."""
    messages: Recovered = []
    while True:
        delivery = connection.next_delivery()
        if delivery.body == END:
            return messages
        messages.append((delivery.properties, delivery.body))
        connection.ack(delivery.delivery_tag)


def recovered(broker: BrokerProcess, queue: str) -> Recovered:
    """Everything in the queue, read from the start: END is appended first and ends the read."""
    with connect(broker.url, WAIT) as connection:
        connection.call(commands.Confirm.Select(), commands.Confirm.SelectOk, CHANNEL)
        connection.publish(queue, [END], PERSISTENT)
        connection.expect(commands.Basic.Ack, CHANNEL)
        connection.qos(1000)
        connection.consume(queue, arguments={"x-stream-offset": "first"} if queue == STREAM else None)
        return read_until_end(connection)


def check_publisher_order(queue: str, bodies: list[bytes], publishers: list[Publisher], seed: int) -> None:
    by_publisher: dict[int, list[int]] = {}
    for body in bodies:
        name, index, seq = body.decode().split(":")
        assert name == queue, f"seed {seed}: {body!r} in {queue}"
        by_publisher.setdefault(int(index), []).append(int(seq))
    for publisher in (p for p in publishers if p.queue == queue):
        seqs = by_publisher.get(publisher.index, [])
        assert all(a < b for a, b in itertools.pairwise(seqs)), f"seed {seed}: {queue} #{publisher.index} out of order"
        missing = set(publisher.confirmed) - set(seqs)
        assert not missing, (
            f"seed {seed}: {queue} #{publisher.index} lost {len(missing)} confirmed: {sorted(missing)[:10]}"
        )


def test_confirmed_messages_survive_repeated_kills(crashing_broker: BrokerProcess) -> None:
    broker = crashing_broker
    rng = random.Random(SEED)
    with connect(broker.url, WAIT) as connection:
        for name, arguments in QUEUES.items():
            connection.call(
                commands.Queue.Declare(queue=name, durable=True, arguments=arguments), commands.Queue.DeclareOk, CHANNEL
            )
    publishers = [Publisher(queue, index) for queue in QUEUES for index in range(PUBLISHERS_PER_QUEUE)]
    watcher = StreamWatcher()
    for _ in range(ROUNDS):
        run_round(broker, publishers, watcher, rng.uniform(*RUN_SECONDS))
        broker.start()

    for publisher in publishers:
        assert publisher.confirmed, f"seed {SEED}: {publisher.queue} #{publisher.index} never got a confirm"
    contents = {queue: recovered(broker, queue) for queue in QUEUES}
    for queue, messages in contents.items():
        check_publisher_order(queue, [body for _, body in messages], publishers, SEED)
    stream = contents[STREAM]
    offsets = [stream_offset(properties) for properties, _ in stream]
    assert offsets == list(range(len(offsets))), f"seed {SEED}: stream offsets are not 0, 1, 2, ...: {offsets[:20]}"
    by_offset = {offset: body for offset, (_, body) in zip(offsets, stream, strict=True)}
    changed = {offset for offset, body in watcher.seen.items() if by_offset.get(offset) != body}
    assert not changed, f"seed {SEED}: offsets read before a crash name other messages after it: {sorted(changed)[:10]}"
