"""What survives a restart (SIGTERM) or a crash (SIGKILL) of the broker, via pika."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from broker_process import BrokerProcess
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.spec import PERSISTENT_DELIVERY_MODE, TRANSIENT_DELIVERY_MODE, BasicProperties

Restart = Callable[[BrokerProcess], None]


def restart_gracefully(broker: BrokerProcess) -> None:
    broker.restart()


def restart_after_crash(broker: BrokerProcess) -> None:
    broker.kill()
    broker.start()


RESTARTS = [
    pytest.param(restart_gracefully, id="sigterm"),
    pytest.param(restart_after_crash, id="sigkill"),
]
PERSISTENT = BasicProperties(delivery_mode=PERSISTENT_DELIVERY_MODE)
TRANSIENT = BasicProperties(delivery_mode=TRANSIENT_DELIVERY_MODE)


@contextlib.contextmanager
def opened(broker: BrokerProcess) -> Iterator[BlockingChannel]:
    """A channel on a new connection; tolerates the broker having died under it."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield connection.channel()
    finally:
        close_quietly(connection)


def close_quietly(connection: BlockingConnection) -> None:
    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
        if connection.is_open:
            connection.close()


def declare_durable_queue(channel: BlockingChannel, name: str) -> None:
    channel.queue_declare(queue=name, durable=True)


def publish_confirmed(
    channel: BlockingChannel,
    queue: str,
    bodies: list[bytes],
    properties: BasicProperties,
) -> None:
    """Publish with confirms: each basic_publish returns once the broker acked it."""
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish(
            exchange="",
            routing_key=queue,
            body=body,
            properties=properties,
            mandatory=True,
        )


def drain(channel: BlockingChannel, queue: str) -> list[bytes]:
    """Get and ack every message in the queue, in order."""
    bodies: list[bytes] = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def assert_not_found(broker: BrokerProcess, declare: Callable[[BlockingChannel], object], text: str) -> None:
    with (
        opened(broker) as channel,
        pytest.raises(pika.exceptions.ChannelClosedByBroker) as info,
    ):
        declare(channel)
    assert info.value.reply_code == 404
    assert info.value.reply_text == text


def numbered(count: int) -> list[bytes]:
    return [f"message {i:04d}".encode() for i in range(count)]


@pytest.mark.parametrize("restart", RESTARTS)
def test_durable_topology_survives(fresh_broker: BrokerProcess, restart: Restart) -> None:
    with opened(fresh_broker) as channel:
        channel.exchange_declare("orders", exchange_type="topic", durable=True)
        channel.exchange_declare("audit", exchange_type="fanout", durable=True)
        declare_durable_queue(channel, "orders.created")
        declare_durable_queue(channel, "audit.all")
        channel.queue_bind("orders.created", "orders", routing_key="orders.*.created")
        channel.exchange_bind(destination="audit", source="orders", routing_key="#")
        channel.queue_bind("audit.all", "audit")

    restart(fresh_broker)

    with opened(fresh_broker) as channel:
        channel.exchange_declare("orders", exchange_type="topic", passive=True)
        channel.exchange_declare("audit", exchange_type="fanout", passive=True)
        channel.confirm_delivery()
        channel.basic_publish("orders", "orders.eu.created", b"order 1", mandatory=True)
        assert drain(channel, "orders.created") == [b"order 1"]
        assert drain(channel, "audit.all") == [b"order 1"]


def test_confirmed_persistent_message_survives_a_crash_byte_exact(
    fresh_broker: BrokerProcess,
) -> None:
    body = bytes(range(256)) * 1024 + b"\x00\xce\xff"  # spans several body frames
    properties = BasicProperties(
        content_type="application/octet-stream",
        content_encoding="identity",
        headers={
            "x-trace": "abc-123",
            "attempt": 3,
            "nested": {"ok": True},
            "tags": ["a", "b"],
            "big": 2**40,
        },
        delivery_mode=PERSISTENT_DELIVERY_MODE,
        priority=4,
        correlation_id="corr-1",
        reply_to="replies",
        message_id="msg-1",
        timestamp=1_700_000_000,
        type="order.created",
        user_id="guest",
        app_id="durability-test",
    )
    with opened(fresh_broker) as channel:
        declare_durable_queue(channel, "precious")
        publish_confirmed(channel, "precious", [body], properties)

    restart_after_crash(fresh_broker)

    with opened(fresh_broker) as channel:
        method, received_properties, received_body = channel.basic_get("precious", auto_ack=True)
    assert method is not None, "the confirmed persistent message was lost"
    assert received_body == body
    for name in (
        "content_type",
        "content_encoding",
        "headers",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
    ):
        assert getattr(received_properties, name) == getattr(properties, name), name


def test_thousand_confirmed_messages_survive_a_crash_in_order(
    fresh_broker: BrokerProcess,
) -> None:
    bodies = numbered(1000)
    with opened(fresh_broker) as channel:
        declare_durable_queue(channel, "bulk")
        publish_confirmed(channel, "bulk", bodies, PERSISTENT)

    restart_after_crash(fresh_broker)

    with opened(fresh_broker) as channel:
        assert drain(channel, "bulk") == bodies


def test_transient_messages_in_a_durable_queue_are_dropped_on_restart(
    fresh_broker: BrokerProcess,
) -> None:
    with opened(fresh_broker) as channel:
        declare_durable_queue(channel, "mixed")
        channel.confirm_delivery()
        for body, properties in [
            (b"t1", TRANSIENT),
            (b"p1", PERSISTENT),
            (b"t2", TRANSIENT),
        ]:
            channel.basic_publish("", "mixed", body, properties=properties, mandatory=True)

    restart_gracefully(fresh_broker)

    with opened(fresh_broker) as channel:
        assert drain(channel, "mixed") == [b"p1"]


@pytest.mark.parametrize("restart", RESTARTS)
@pytest.mark.parametrize(
    "declare_flags",
    [
        pytest.param({"durable": False}, id="non-durable"),
        pytest.param({"durable": False, "auto_delete": True}, id="non-durable-auto-delete"),
        pytest.param({"durable": True, "exclusive": True}, id="durable-exclusive"),
    ],
)
def test_temporary_queues_are_not_recovered(
    fresh_broker: BrokerProcess, restart: Restart, declare_flags: dict[str, bool]
) -> None:
    # The declaring connection stays open across the restart, so an exclusive queue's
    # owner is "alive" right up to the moment the broker goes away.
    owner = pika.BlockingConnection(pika.URLParameters(fresh_broker.url))
    try:
        owner.channel().queue_declare(queue="temporary", **declare_flags)
        restart(fresh_broker)
    finally:
        close_quietly(owner)

    assert_not_found(
        fresh_broker,
        lambda channel: channel.queue_declare("temporary", passive=True),
        "NOT_FOUND - no queue 'temporary' in vhost '/'",
    )


@pytest.mark.parametrize("restart", RESTARTS)
def test_non_durable_exchange_is_not_recovered(fresh_broker: BrokerProcess, restart: Restart) -> None:
    with opened(fresh_broker) as channel:
        channel.exchange_declare("fleeting", exchange_type="direct", durable=False)
        channel.exchange_declare("lasting", exchange_type="direct", durable=True)

    restart(fresh_broker)

    with opened(fresh_broker) as channel:
        channel.exchange_declare("lasting", exchange_type="direct", passive=True)
    assert_not_found(
        fresh_broker,
        lambda channel: channel.exchange_declare("fleeting", passive=True),
        "NOT_FOUND - no exchange 'fleeting' in vhost '/'",
    )


def test_unacked_messages_at_crash_are_delivered_again(
    fresh_broker: BrokerProcess,
) -> None:
    bodies = numbered(3)
    consumer = pika.BlockingConnection(pika.URLParameters(fresh_broker.url))
    try:
        channel = consumer.channel()
        declare_durable_queue(channel, "in-flight")
        publish_confirmed(channel, "in-flight", bodies, PERSISTENT)
        for expected in bodies[:2]:
            method, _, body = channel.basic_get("in-flight", auto_ack=False)
            assert method is not None
            assert body == expected
        restart_after_crash(fresh_broker)
    finally:
        close_quietly(consumer)

    with opened(fresh_broker) as channel:
        assert drain(channel, "in-flight") == bodies


def test_acked_messages_do_not_come_back(fresh_broker: BrokerProcess) -> None:
    bodies = numbered(5)
    with opened(fresh_broker) as channel:
        declare_durable_queue(channel, "done")
        publish_confirmed(channel, "done", bodies, PERSISTENT)
        for _ in range(3):
            method, _, _ = channel.basic_get("done", auto_ack=False)
            assert method is not None
            channel.basic_ack(method.delivery_tag)
        # A synchronous round trip after the acks: the broker has processed them.
        assert channel.queue_declare("done", passive=True).method.message_count == 2

    restart_gracefully(fresh_broker)

    with opened(fresh_broker) as channel:
        assert drain(channel, "done") == bodies[3:]


def segment_files(data_dir: Path) -> list[Path]:
    """Message segment files (msgs.<number>), oldest first."""
    return sorted(
        (path for path in data_dir.rglob("msgs.*") if path.is_file() and path.suffix[1:].isdigit()),
        key=lambda path: (path.parent, int(path.suffix[1:])),
    )


def test_garbage_after_the_last_record_is_survived_with_a_warning(
    fresh_broker: BrokerProcess,
) -> None:
    bodies = numbered(20)
    with opened(fresh_broker) as channel:
        declare_durable_queue(channel, "torn")
        publish_confirmed(channel, "torn", bodies, PERSISTENT)
    fresh_broker.kill()

    segments = segment_files(fresh_broker.data_dir)
    assert segments, f"no msgs.* segment files under {fresh_broker.data_dir}"
    with segments[-1].open("ab") as segment:
        segment.write(b"\xde\xad\xbe\xef" * 5 + b"\x00\x00\x10\x00torn write")
    log_before_start = len(fresh_broker.output)

    fresh_broker.start()

    new_log = fresh_broker.output[log_before_start:]
    warnings = [line for line in new_log.splitlines() if re.search(r"warn", line, re.IGNORECASE)]
    assert warnings, f"no warning logged on start-up after a torn segment tail:\n{new_log}"
    with opened(fresh_broker) as channel:
        assert drain(channel, "torn") == bodies
