"""The traffic of the chaos loop (`lavin.bench.chaos`): publishers that number their messages
and retry what was not confirmed, and the final drain that checks what the queues hold.

Each publisher has its own durable queue and stamps every body with its id and a sequence
number. It publishes a batch, waits for the confirms, and sends again (same numbers) whatever
was nacked or left unconfirmed when its connection broke; then it reconnects to any running
node (followers proxy to the leader). A message counts as confirmed once the broker acked it,
so a confirmed number missing from the queue at the end is a lost message.
"""

from __future__ import annotations

import random
import struct
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from lavin.client.wire import CHANNEL, AmqpError, Connection, connect
from pamqp import commands

STAMP = struct.Struct(">IQ")  # publisher id, sequence number
BODY_SIZE = 16
BATCH = 100  # messages published before waiting for their confirms
CONNECT_TIMEOUT = 5.0
CONFIRM_TIMEOUT = 10.0  # no confirm for this long: the connection is as good as gone
RETRY_PAUSE = 0.2
PERSISTENT = commands.Basic.Properties(delivery_mode=2)
FAILURES = (OSError, AmqpError, EOFError, ValueError)  # a broken or refused connection: reconnect


def queue_name(publisher: int) -> str:
    return f"chaos-{publisher}"


def body(publisher: int, sequence: int) -> bytes:
    return STAMP.pack(publisher, sequence).ljust(BODY_SIZE, b".")


class ConfirmClock:
    """When confirms arrived (monotonic seconds), from every publisher, and when the
    connection each came on was opened, for failover times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.times = array("d")
        self.opened = array("d")  # for each confirm, when its connection was opened

    def tick(self, opened: float) -> None:
        now = time.monotonic()
        with self._lock:
            self.times.append(now)
            self.opened.append(opened)

    def last_before(self, moment: float) -> float | None:
        with self._lock:
            return next((t for t in reversed(self.times) if t <= moment), None)

    def first_after(self, moment: float) -> float | None:
        """The first confirm on a connection opened after `moment`: one read just after a
        kill may have been sent by the killed leader before it died."""
        with self._lock:
            return next((t for t, o in zip(self.times, self.opened, strict=True) if o > moment), None)


class Publisher(threading.Thread):
    """Publishes numbered persistent messages with confirms until `stop` is set."""

    def __init__(self, number: int, uris: Callable[[], list[str]], clock: ConfirmClock, stop: threading.Event) -> None:
        super().__init__(name=f"chaos-publisher-{number}", daemon=True)
        self.number = number
        self.uris = uris
        self.clock = clock
        self.stop_event = stop
        self.confirmed = bytearray()  # confirmed[sequence] == 1 once the broker acked it
        self.next_sequence = 0
        self.reconnects = 0
        self.resend: list[int] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            uris = self.uris()
            if not uris:
                time.sleep(RETRY_PAUSE)
                continue
            try:
                opened = time.monotonic()
                with connect(random.choice(uris), CONNECT_TIMEOUT) as connection:
                    self.publish_on(connection, opened)
            except FAILURES:
                self.reconnects += 1
                time.sleep(RETRY_PAUSE)

    def publish_on(self, connection: Connection, opened: float) -> None:
        connection.call(commands.Confirm.Select(), commands.Confirm.SelectOk, CHANNEL)
        declare = commands.Queue.Declare(queue=queue_name(self.number), durable=True)
        connection.call(declare, commands.Queue.DeclareOk, CHANNEL)
        tag = 0
        while not self.stop_event.is_set():
            fresh = BATCH - len(self.resend)
            batch = self.resend + list(range(self.next_sequence, self.next_sequence + fresh))
            self.next_sequence += fresh
            self.confirmed.extend(bytes(fresh))
            self.resend = batch  # all unconfirmed until the acks say otherwise
            pending = {tag + 1 + offset: sequence for offset, sequence in enumerate(batch)}
            tag += len(batch)
            connection.publish(queue_name(self.number), [body(self.number, s) for s in batch], PERSISTENT)
            nacked = self.await_confirms(connection, pending, opened)
            self.resend = sorted(nacked)

    def await_confirms(self, connection: Connection, pending: dict[int, int], opened: float) -> list[int]:
        """Mark acked sequences confirmed; return the nacked ones. Raises when the connection fails."""
        nacked: list[int] = []
        while pending:
            received = connection.recv_frame(CONFIRM_TIMEOUT)
            if received is None:
                raise EOFError("the broker closed the connection")
            frame = received.frame
            if not isinstance(frame, commands.Basic.Ack | commands.Basic.Nack):
                continue
            settled = [t for t in pending if t <= frame.delivery_tag] if frame.multiple else [frame.delivery_tag]
            for settled_tag in settled:
                sequence = pending.pop(settled_tag, None)
                if sequence is None:
                    continue
                if isinstance(frame, commands.Basic.Ack):
                    self.confirmed[sequence] = 1
                else:
                    nacked.append(sequence)
            if isinstance(frame, commands.Basic.Ack):
                self.clock.tick(opened)
        return nacked


@dataclass
class QueueCheck:
    """What a publisher's queue held: first sightings out of order, repeats, confirmed ones missing."""

    delivered: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    lost: int = 0


def check_queue(uri: str, publisher: Publisher) -> QueueCheck:
    """Read the whole queue without acking it (nothing is removed, so a retry sees it all again)."""
    with connect(uri, CONFIRM_TIMEOUT) as connection:
        declare = commands.Queue.Declare(queue=queue_name(publisher.number), durable=True, passive=True)
        count = connection.call(declare, commands.Queue.DeclareOk, CHANNEL).message_count
        connection.consume(queue_name(publisher.number))
        seen = bytearray(len(publisher.confirmed) + 1)
        check = QueueCheck()
        highest = -1
        for _ in range(count):
            ident, sequence = STAMP.unpack_from(connection.next_delivery().body)
            check.delivered += 1
            if ident != publisher.number or sequence >= len(seen):
                check.duplicated += 1  # nothing sent it under this number
            elif seen[sequence]:
                check.duplicated += 1
            else:
                seen[sequence] = 1
                check.out_of_order += sequence < highest
                highest = max(highest, sequence)
        check.lost = sum(1 for s, c in enumerate(publisher.confirmed) if c and not seen[s])
        return check
