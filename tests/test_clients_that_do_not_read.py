"""A client that never reads its socket cannot make the broker buffer what is written to it:
basic.return, replies and every other answer stop at the connection's high-water mark."""

from __future__ import annotations

import time

from broker_process import BrokerProcess, broker_rss
from lavin.client.wire import Connection, connect, content_body_frame, content_header_frame, method_frame
from pamqp import commands

MiB = 1024 * 1024
BODY = b"x" * 65536
COUNT = 3000  # 3000 x 64 KiB: about 190 MiB written back if nothing held it
GROWTH_LIMIT = 48 * MiB  # the 4 MiB high-water mark, read buffers and allocator slack
REPLY_TO = "amq.rabbitmq.reply-to"


def publish_frames(routing_key: str, mandatory: bool = False) -> bytes:
    publish = commands.Basic.Publish(exchange="", routing_key=routing_key, mandatory=mandatory)
    return method_frame(1, publish) + content_header_frame(1, len(BODY)) + content_body_frame(1, BODY)


def send_until_blocked(connection: Connection, frames: bytes, count: int) -> int:
    """Write `frames` `count` times; return how many went out before a write blocked for 1 s."""
    connection.sock.settimeout(1.0)
    for sent in range(count):
        try:
            connection.sock.sendall(frames)
        except TimeoutError:
            return sent
    return count


def answers_quickly(broker: BrokerProcess) -> bool:
    with connect(broker.url) as other:
        started = time.monotonic()
        other.call(commands.Exchange.Declare(exchange="amq.direct", passive=True), commands.Exchange.DeclareOk, 1)
        return time.monotonic() - started < 1.0


def test_returns_to_a_publisher_that_never_reads_stop_its_publishing(fresh_broker: BrokerProcess) -> None:
    idle = broker_rss(fresh_broker)
    publisher = connect(fresh_broker.url)  # never reads
    try:
        sent = send_until_blocked(publisher, publish_frames("nowhere", mandatory=True), COUNT)
        assert sent < COUNT, "the broker kept reading a publisher whose returns pile up"
        assert broker_rss(fresh_broker) - idle < GROWTH_LIMIT
        assert answers_quickly(fresh_broker)
    finally:
        publisher.sock.close()  # connection.close would not be read


def test_replies_to_a_requester_that_never_reads_are_dropped(fresh_broker: BrokerProcess) -> None:
    idle = broker_rss(fresh_broker)
    with connect(fresh_broker.url) as requester, connect(fresh_broker.url) as responder:
        requester.call(commands.Basic.Consume(queue=REPLY_TO, no_ack=True), commands.Basic.ConsumeOk, 1)
        address = request_address(requester, responder)  # from now on the requester does not read
        # The responder is another connection: it is not slowed, its replies are dropped.
        assert send_until_blocked(responder, publish_frames(address), COUNT) == COUNT
        responder.call(commands.Queue.Declare(queue=address, passive=True), commands.Queue.DeclareOk, 1)
        assert broker_rss(fresh_broker) - idle < GROWTH_LIMIT
        received = replies_until_quiet(requester)
        assert 0 < received < COUNT
        responder.send_raw(publish_frames(address))  # the requester still gets new replies
        assert requester.next_delivery().body == BODY


def request_address(requester: Connection, responder: Connection) -> str:
    """Send a request with a direct reply-to; return the reply address the responder sees."""
    queue = responder.call(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk, 1).queue
    properties = commands.Basic.Properties(reply_to=REPLY_TO)
    requester.send_raw(
        method_frame(1, commands.Basic.Publish(exchange="", routing_key=queue))
        + content_header_frame(1, 1, properties)
        + content_body_frame(1, b"?")
    )
    responder.call(commands.Basic.Consume(queue=queue, no_ack=True), commands.Basic.ConsumeOk, 1)
    reply_to = responder.next_delivery().properties.reply_to
    assert reply_to is not None and reply_to.startswith(REPLY_TO + ".")
    return reply_to


def replies_until_quiet(requester: Connection) -> int:
    """Read deliveries until none comes for half a second; return how many came."""
    count = 0
    requester.sock.settimeout(0.5)
    try:
        while True:
            requester.next_delivery()
            count += 1
    except TimeoutError:
        return count
