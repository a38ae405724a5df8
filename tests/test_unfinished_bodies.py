"""One connection's unfinished message bodies are bounded (`max_unfinished_body_bytes`): a
content header that would take their declared sizes, added up, over the bound closes its
channel with 406, while the other channels and the connection go on."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from broker_process import BrokerFactory, BrokerProcess, broker_rss
from helpers import open_session, wait_until
from lavin.client.wire import Connection, connect, content_body_frame, content_header_frame, method_frame
from pamqp import commands

MiB = 1024 * 1024
DEFAULT_BOUND = 128 * MiB  # max_unfinished_body_bytes' default


def start_body(connection: Connection, channel: int, routing_key: str, size: int) -> None:
    """basic.publish and a content header announcing `size` bytes: a body under way."""
    connection.send_raw(
        method_frame(channel, commands.Basic.Publish(exchange="", routing_key=routing_key))
        + content_header_frame(channel, size)
    )


def send_body(connection: Connection, channel: int, body: bytes) -> None:
    step = connection.frame_max - 8
    connection.send_raw(b"".join(content_body_frame(channel, body[at : at + step]) for at in range(0, len(body), step)))


def refusal_text(size: int, unfinished: int, bound: int) -> str:
    return (
        f"PRECONDITION_FAILED - message size {size} would take this connection's unfinished message bodies to "
        f"{unfinished} bytes, over max_unfinished_body_bytes {bound}"
    )


def expect_refusal(connection: Connection, channel: int, text: str) -> None:
    close = connection.expect(commands.Channel.Close, channel, timeout=10)
    assert (close.reply_code, close.reply_text) == (406, text)
    assert (close.class_id, close.method_id) == (60, 40)
    connection.send(commands.Channel.CloseOk(), channel)


def test_a_body_that_would_take_the_connection_over_the_bound_closes_only_its_channel(
    broker: BrokerProcess,
) -> None:
    size = 100 * MiB
    with open_session(broker.url) as session:
        queue = session.declare_queue("unfinished")
        body = os.urandom(MiB) * 100
        with connect(broker.url, channels=(1, 2)) as publisher:
            start_body(publisher, 1, queue, size)
            send_body(publisher, 1, body[: 10 * MiB])
            start_body(publisher, 2, queue, size)
            # In flight before the channel.close arrives: discarded until close-ok.
            send_body(publisher, 2, body[:MiB])
            expect_refusal(publisher, 2, refusal_text(size, 2 * size, DEFAULT_BOUND))
            send_body(publisher, 1, body[10 * MiB :])
            # The connection stays open, and channel 2 can be opened again and publish.
            publisher.open_channel(2)
            start_body(publisher, 2, queue, 3)
            send_body(publisher, 2, b"end")
            publisher.call(commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk, channel=2)
        wait_until(
            lambda: session.channel.queue_declare(queue, passive=True).method.message_count == 2,
            "both messages are in the queue",
        )
        first = session.channel.basic_get(queue, auto_ack=True)[2]
        assert first is not None
        assert hashlib.sha256(first).digest() == hashlib.sha256(body).digest()
        assert session.channel.basic_get(queue, auto_ack=True)[2] == b"end"


def test_the_bound_is_given_back_when_a_body_completes_or_its_channel_is_closed(broker: BrokerProcess) -> None:
    size = 60 * MiB
    with open_session(broker.url) as session:
        queue = session.declare_queue("timeout", arguments={"x-consumer-timeout": 200})
        session.channel.basic_publish("", queue, b"left unacked")
        with connect(broker.url, channels=(1, 2, 3)) as publisher:
            for _ in range(3):  # completed bodies leave nothing reserved
                start_body(publisher, 1, "nowhere", size)
                send_body(publisher, 1, bytes(size))
            publisher.call(commands.Basic.Consume(queue=queue), commands.Basic.ConsumeOk, channel=2)
            start_body(publisher, 2, "nowhere", size)  # under way when the consumer timeout closes channel 2
            close = publisher.expect(commands.Channel.Close, 2, timeout=10)
            assert close.reply_code == 406
            publisher.send(commands.Channel.CloseOk(), 2)
            start_body(publisher, 1, "nowhere", size)
            start_body(publisher, 3, "nowhere", size)  # 120 MiB under way: within the bound
            send_body(publisher, 1, bytes(size))
            send_body(publisher, 3, bytes(size))
            publisher.call(commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk, channel=3)


def test_one_connection_cannot_hold_many_partial_bodies(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    bound, size, channels = 8 * MiB, 6 * MiB, range(1, 9)
    ini = tmp_path / "bound.ini"
    ini.write_text(f"[amqp]\nmax_unfinished_body_bytes = {bound}\n")
    broker = broker_factory(["--config", str(ini)])
    idle = broker_rss(broker)
    with connect(broker.url, channels=channels) as hog:
        for channel in channels:
            start_body(hog, channel, "nowhere", size)
        partial = b"x" * (size - MiB // 2)
        for channel in channels:  # before any close-ok: the refused channels' frames are discarded
            send_body(hog, channel, partial)
        for channel in channels[1:]:
            expect_refusal(hog, channel, refusal_text(size, 2 * size, bound))
        send_body(hog, 1, b"x" * (MiB // 2))  # the one body within the bound completes
        hog.call(commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk, channel=1)  # all frames read
        held = broker_rss(broker) - idle
        assert held < 3 * size, f"the broker holds {held / MiB:.0f} MiB for one connection's partial bodies"
