"""Damaged and half-deleted data at start-up, through a real broker child.

Each case damages real files of a stopped broker (flipped bytes, a deleted file) or kills
it with SIGKILL mid-delete, restarts it, and checks what comes back (exact counts) and
what the log says. After a crash every record's crc is checked at start; after a clean
stop it is checked when the record is first read. Small segments (`[main] segment_size`)
give a queue many segment files.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from broker_process import BrokerFactory, BrokerProcess
from lavin.client.wire import AmqpError, Connection, connect
from lavin.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE
from lavin.storage.segments.record import FILE_HEADER_SIZE, HEADER_SIZE, LENGTH, decode_record
from pamqp import commands

SEGMENT_SIZE = 64 * 1024
PERSISTENT = commands.Basic.Properties(delivery_mode=2)
BODY_SIZE = 400


def body(index: int) -> bytes:
    return b"%06d" % index + b"." * (BODY_SIZE - 6)


def start_broker(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    config = tmp_path / "lavin.ini"
    config.write_text(f"[main]\nsegment_size = {SEGMENT_SIZE}\n")
    return broker_factory(["--config", str(config)])


def vhost_dir(broker: BrokerProcess) -> Path:
    return broker.data_dir / hashlib.sha1(b"/").hexdigest()


def queue_dir(broker: BrokerProcess, name: str) -> Path:
    return vhost_dir(broker) / hashlib.sha1(name.encode()).hexdigest()


def declare(connection: Connection, name: str, *, passive: bool = False) -> int:
    """The queue's message count; a passive declare of a missing queue raises AmqpError."""
    method = commands.Queue.Declare(queue=name, durable=True, passive=passive)
    return connection.call(method, commands.Queue.DeclareOk, 1).message_count


def message_count(broker: BrokerProcess, name: str) -> int | None:
    """None when the queue does not exist."""
    with connect(broker.url) as connection:
        try:
            return declare(connection, name, passive=True)
        except AmqpError:
            return None


def publish(broker: BrokerProcess, name: str, count: int) -> None:
    """`count` persistent messages into a new durable queue, then a clean stop and start:
    every record is on disk."""
    with connect(broker.url) as connection:
        declare(connection, name)
        connection.publish(name, (body(index) for index in range(count)), PERSISTENT)
        deadline = time.monotonic() + 30
        while declare(connection, name) < count:
            assert time.monotonic() < deadline, "the broker did not store every message"
            time.sleep(0.05)
    broker.restart()


def consume_all(broker: BrokerProcess, name: str, count: int) -> list[bytes]:
    with connect(broker.url) as connection:
        connection.consume(name, no_ack=True)
        return [connection.next_delivery().body for _ in range(count)]


def segment_records(segment: Path) -> list[tuple[int, bytes]]:
    """(byte position, body) of each record of an undamaged segment file."""
    data = segment.read_bytes()
    found, position = [], FILE_HEADER_SIZE
    while position < len(data):
        found.append((position, decode_record(data, position).body))
        position += HEADER_SIZE + LENGTH.unpack_from(data, position)[0]
    return found


def flip(path: Path, position: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as file:
        file.seek(position)
        value = file.read(1)[0]
        file.seek(position)
        file.write(bytes([value ^ mask]))


def log_lines(broker: BrokerProcess, level: str) -> list[str]:
    return [line for line in broker.output.splitlines() if f" {level} " in line]


def segments_of(broker: BrokerProcess, name: str) -> list[Path]:
    return sorted(path for path in queue_dir(broker, name).iterdir() if path.name.startswith("msgs."))


def flip_four_records(broker: BrokerProcess, name: str) -> tuple[Path, list[tuple[int, bytes]]]:
    """Flip a byte in the middle of four messages of the queue's second segment file:
    the file and (position, body) of each damaged record."""
    segments = segments_of(broker, name)
    assert len(segments) >= 8
    segment = segments[1]
    damaged = [segment_records(segment)[number] for number in (3, 9, 15, 21)]
    for position, _ in damaged:
        flip(segment, position + HEADER_SIZE + 100)
    return segment, damaged


def test_flipped_bytes_in_a_segment_cost_only_the_damaged_records(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = start_broker(broker_factory, tmp_path)
    publish(broker, "flipped", 1200)
    broker.kill()  # a crash: the next start checks every record's crc
    segment, damaged = flip_four_records(broker, "flipped")

    broker.start()
    assert message_count(broker, "flipped") == 1196
    lost = {damaged_body for _, damaged_body in damaged}
    assert consume_all(broker, "flipped", 1196) == [body(index) for index in range(1200) if body(index) not in lost]
    [error] = log_lines(broker, "ERROR")
    assert f"{segment}: 4 damaged record(s) (" in error
    assert "kept as msgs.0000000002.corrupt" in error
    assert (segment.parent / "msgs.0000000002.corrupt").exists()


def test_after_a_clean_stop_a_damaged_record_is_passed_over_when_first_read(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = start_broker(broker_factory, tmp_path)
    publish(broker, "flipped", 1200)
    broker.stop()
    assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    segment, damaged = flip_four_records(broker, "flipped")

    broker.start()
    assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert message_count(broker, "flipped") == 1200  # the lengths are whole; crcs are not read at start
    lost = {damaged_body for _, damaged_body in damaged}
    assert consume_all(broker, "flipped", 1196) == [body(index) for index in range(1200) if body(index) not in lost]
    assert message_count(broker, "flipped") == 0
    errors = log_lines(broker, "ERROR")
    assert len(errors) == 4
    for line, (position, _) in zip(errors, damaged, strict=True):
        assert f"{segment}: the record at byte {position} fails its crc; passed over, not delivered" in line

    broker.restart()  # the damaged records were acked: none comes back
    assert message_count(broker, "flipped") == 0


def test_a_segment_of_unknown_format_is_kept_aside_and_the_queue_keeps_its_bindings(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = start_broker(broker_factory, tmp_path)
    with connect(broker.url) as connection:
        declare(connection, "versioned")
        bind = commands.Queue.Bind(queue="versioned", exchange="amq.direct", routing_key="key")
        connection.call(bind, commands.Queue.BindOk, 1)
    publish(broker, "versioned", 1200)
    broker.stop()
    segment = segments_of(broker, "versioned")[1]
    in_segment = len(segment_records(segment))
    flip(segment, 0, mask=0x62)  # format version 1 -> 99

    broker.start()
    assert message_count(broker, "versioned") == 1200 - in_segment
    with connect(broker.url) as connection:
        connection.publish("key", [b"routed"], PERSISTENT, exchange="amq.direct", mandatory=True)
        assert declare(connection, "versioned", passive=True) == 1200 - in_segment + 1  # the binding stayed
    [error] = log_lines(broker, "ERROR")
    assert f"{segment}: unsupported segment format version 99, kept as msgs.0000000002.corrupt" in error
    assert f"{1200 - in_segment} message(s) recovered from" in error
    assert (segment.parent / "msgs.0000000002.corrupt").exists()


def test_a_flipped_bit_in_the_definitions_log_loses_only_its_record(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = start_broker(broker_factory, tmp_path)
    names = [f"declared-{index}" for index in range(41)]
    with connect(broker.url) as connection:
        for name in names:
            declare(connection, name)
    broker.stop()
    log = vhost_dir(broker) / "definitions.lavin"
    data = log.read_bytes()
    offset = 0
    for _ in range(10):  # to the eleventh record
        offset += 8 + LENGTH.unpack_from(data, offset)[0]
    flip(log, offset + 30, mask=0x01)

    broker.start()
    present = [name for name in names if message_count(broker, name) is not None]
    assert present == names[:10] + names[11:]
    damage, orphan = log_lines(broker, "ERROR")
    assert "10 record(s) read before the damage and 30 after" in damage
    assert "kept as definitions.lavin.corrupt" in damage
    assert "'declared-10'" in orphan  # its directory no longer has a definition
    assert (log.parent / "definitions.lavin.corrupt").read_bytes()[offset + 30] == data[offset + 30] ^ 0x01

    broker.restart()  # the rewritten log holds every record that could be read
    assert [name for name in names if message_count(broker, name) is not None] == present


def test_queue_data_without_a_definition_is_reported_and_never_adopted(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = start_broker(broker_factory, tmp_path)
    publish(broker, "orphaned", 1000)
    broker.stop()
    directory = queue_dir(broker, "orphaned")
    (vhost_dir(broker) / "definitions.lavin").unlink()

    broker.start()
    [error] = log_lines(broker, "ERROR")
    assert f"'orphaned' ({directory.name})" in error
    assert (vhost_dir(broker) / "orphans" / directory.name / ".queue").read_text() == "orphaned"
    with connect(broker.url) as connection:
        assert declare(connection, "orphaned") == 0  # a new, empty queue
    broker.restart()
    assert message_count(broker, "orphaned") == 0


def test_a_crash_during_queue_delete_leaves_the_queue_whole_or_gone(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """SIGKILL right after queue.delete, at a few delays: the queue comes back with all its
    messages (the delete was not recorded) or not at all, never in part."""
    broker = start_broker(broker_factory, tmp_path)
    count = 20_000  # about 130 segment files to remove
    outcomes = []
    for delay in (0.0, 0.001, 0.002, 0.004):
        publish(broker, "deleted", count)
        connection = connect(broker.url)
        connection.send(commands.Queue.Delete(queue="deleted"), 1)
        time.sleep(delay)
        broker.kill()
        connection.sock.close()
        broker.start()
        left = message_count(broker, "deleted")
        outcomes.append(left)
        assert left in (None, count), f"a partial queue came back: {outcomes}"
        assert not any(name.endswith(".deleted") for name in os.listdir(vhost_dir(broker)))
        if left is not None:
            with connect(broker.url) as connection:
                connection.call(commands.Queue.Delete(queue="deleted"), commands.Queue.DeleteOk, 1)
    assert log_lines(broker, "ERROR") == []
