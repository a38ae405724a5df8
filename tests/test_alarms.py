"""Memory and disk alarms: publishers are blocked (connection.blocked, then not read) while
an alarm is on, consumers go on, and the memory held by messages still being received is
counted and given back."""

from __future__ import annotations

import time
from pathlib import Path

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess, broker_rss
from helpers import drain, open_session, process_for, process_until, unique_name, wait_until
from lavin.client.wire import Connection, connect, content_body_frame, content_header_frame, method_frame
from lavin.config import StartupError, parse_bytes, read_config_file
from pamqp import commands

MiB = 1024 * 1024
WATERMARK = 200 * MiB
BODY_SIZE = 100 * MiB  # announced by each partial message; max_message_size is 128 MiB
# Over the watermark, the broker takes at most one more socket read per connection.
OVERSHOOT = 32 * MiB


# Room for every partial body these tests start on one connection, so that the memory they
# hold is bounded by the alarms alone.
UNFINISHED_BODIES_BOUND = f"[amqp]\nmax_unfinished_body_bytes = {8 * BODY_SIZE}"


def configured(
    broker_factory: BrokerFactory, tmp_path: Path, settings: str, data_dir: Path | None = None
) -> BrokerProcess:
    ini = tmp_path / "alarms.ini"
    ini.write_text(f"[main]\n{settings}\n{UNFINISHED_BODIES_BOUND}\n")
    return broker_factory(["--config", str(ini)], data_dir=data_dir)


def blocking_connection(
    url: str, reasons: list[str], unblocked: list[bool], blocked_timeout: float
) -> pika.BlockingConnection:
    """A pika connection that notes connection.blocked and unblocked, and that pika itself
    drops once it has been blocked for `blocked_timeout` seconds."""
    connection = pika.BlockingConnection(pika.URLParameters(f"{url}?blocked_connection_timeout={blocked_timeout}"))
    connection.add_on_connection_blocked_callback(lambda _conn, frame: reasons.append(frame.method.reason))
    connection.add_on_connection_unblocked_callback(lambda _conn, _frame: unblocked.append(True))
    return connection


def start_partial_bodies(url: str, channels: range) -> Connection:
    """A connection with a publish of BODY_SIZE bytes under way on each channel; heartbeats
    every second, so that the broker finds out when it is gone while it does not read it."""
    hog = connect(url, channels=channels, heartbeat=1)
    for channel in channels:
        hog.send_raw(
            method_frame(channel, commands.Basic.Publish(exchange="", routing_key="nowhere"))
            + content_header_frame(channel, BODY_SIZE)
        )
    return hog


def stream_bodies(hog: Connection, channels: range, limit: int) -> int:
    """Send body frames round-robin until `limit` bytes, no body complete, or until the broker
    stops reading; return the bytes sent."""
    chunk = b"x" * (hog.frame_max - 8)
    frames = {channel: content_body_frame(channel, chunk) * 8 for channel in channels}
    per_round = 8 * len(chunk)
    hog.sock.settimeout(1.0)
    sent = 0
    try:
        while sent + per_round * len(channels) <= limit:
            for channel in channels:
                hog.sock.sendall(frames[channel])
                sent += per_round
    except TimeoutError:
        pass
    return sent


def test_a_disk_alarm_blocks_publishers_and_lets_consumers_consume(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    queue = unique_name("disk-alarm")
    before = broker_factory()
    with open_session(before.url) as session:
        session.channel.confirm_delivery()
        session.channel.queue_declare(queue, durable=True)
        for body in (b"one", b"two"):
            session.channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    before.stop()
    broker = configured(broker_factory, tmp_path, "disk_free_limit.absolute = 1000000TB", before.data_dir)
    reasons: list[str] = []
    publisher = blocking_connection(broker.url, reasons, [], blocked_timeout=2)
    channel = publisher.channel()
    channel.queue_declare(queue, passive=True)  # a connection that sends no content is not blocked
    # Stored or not: the broker stops reading after the frame that carried content.
    channel.basic_publish("", queue, b"three")
    process_until(publisher, lambda: bool(reasons), "connection.blocked arrives")
    assert reasons == ["low on disk"]
    channel.basic_publish("", queue, b"while blocked")
    process_for(publisher)
    with open_session(broker.url) as consumer:
        bodies = [message.body for message in drain(consumer.channel, queue)]
    assert bodies in ([b"one", b"two"], [b"one", b"two", b"three"])
    with pytest.raises(pika.exceptions.ConnectionBlockedTimeout):  # never unblocked
        process_for(publisher, 10)
    assert "disk resource limit alarm set on node" in broker.output


def test_a_memory_alarm_blocks_publishers_until_memory_is_given_back(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = configured(broker_factory, tmp_path, f"vm_memory_high_watermark.absolute = {WATERMARK // MiB}MiB")
    idle = broker_rss(broker)
    assert idle < WATERMARK / 2, f"the broker starts with {idle / MiB:.0f} MiB"
    reasons: list[str] = []
    unblocked: list[bool] = []
    observer = blocking_connection(broker.url, reasons, unblocked, blocked_timeout=20)
    try:
        channel = observer.channel()
        queue = channel.queue_declare(unique_name("memory-alarm")).method.queue
        channels = range(1, 4)
        hog = start_partial_bodies(broker.url, channels)
        try:
            sent = stream_bodies(hog, channels, len(channels) * (BODY_SIZE - MiB))
            assert sent < len(channels) * (BODY_SIZE - MiB), "the broker read every body frame"
            assert hog.expect(commands.Connection.Blocked, timeout=5).reason == "low on memory"
            assert broker_rss(broker) < WATERMARK + OVERSHOOT
            channel.basic_publish("", queue, b"while the alarm is on")
            process_until(observer, lambda: bool(reasons), "connection.blocked arrives")
            assert reasons == ["low on memory"]
        finally:
            hog.sock.close()  # the broker sees it at its next heartbeat, and frees the bodies
        process_until(observer, lambda: bool(unblocked), "connection.unblocked arrives", timeout=10)
        assert broker_rss(broker) < idle + OVERSHOOT
        channel.basic_publish("", queue, b"after the alarm")
        assert channel.queue_declare(queue, passive=True).method.message_count == 2
    finally:
        observer.close()
    assert "memory resource limit alarm set on node" in broker.output
    assert "memory resource limit alarm cleared on node" in broker.output


def test_partial_bodies_are_given_back_when_their_connection_closes(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = configured(broker_factory, tmp_path, "")
    idle = broker_rss(broker)
    channels = range(1, 9)
    hog = start_partial_bodies(broker.url, channels)
    sent = stream_bodies(hog, channels, len(channels) * (BODY_SIZE - MiB))
    wait_until(lambda: broker_rss(broker) > idle + sent * 9 // 10, "the broker holds the partial bodies")
    time.sleep(0.5)
    hog.sock.close()
    started = time.monotonic()
    wait_until(lambda: broker_rss(broker) < idle + OVERSHOOT, "the broker gives the memory back")
    assert time.monotonic() - started < 5


def test_a_watermark_of_zero_blocks_every_publisher(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker = configured(broker_factory, tmp_path, "vm_memory_high_watermark.relative = 0")
    with connect(broker.url) as publisher:
        publisher.send_raw(
            method_frame(1, commands.Basic.Publish(exchange="", routing_key="nowhere"))
            + content_header_frame(1, 1)
            + content_body_frame(1, b"x")
        )
        assert publisher.expect(commands.Connection.Blocked, timeout=5).reason == "low on memory"
        publisher.sock.close()  # connection.close would not be read


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("50000000", 50_000_000),
        ("50MB", 50_000_000),
        ("2GB", 2_000_000_000),
        ("512MiB", 512 * MiB),
        ("512Mi", 512 * MiB),
        ("512M", 512 * MiB),
        ("1gib", 1024 * MiB),
    ],
)
def test_sizes_take_rabbitmq_units(text: str, size: int) -> None:
    assert parse_bytes(text) == size


def test_a_size_in_an_unknown_unit_stops_start_up(tmp_path: Path) -> None:
    ini = tmp_path / "lavin.ini"
    ini.write_text("[main]\ndisk_free_limit.absolute = 5 parsecs\n")
    with pytest.raises(StartupError, match=r"disk_free_limit\.absolute = .5 parsecs.: expected a number of bytes"):
        read_config_file(ini)
