"""Connections and channels as real clients use them (pika, aio-pika), plus the few
connection-level methods those clients do not expose (checked on the wire)."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import Iterator

import aio_pika
import pika
import pytest
from broker_process import BrokerProcess
from lavin.client.wire import connect
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

ONE_MIB = 1 << 20
# rabbit_guid: "amq.gen-" followed by 16 random bytes in unpadded URL-safe base64.
SERVER_NAMED_QUEUE = re.compile(r"amq\.gen-[A-Za-z0-9_-]{22}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def connection(broker: BrokerProcess) -> Iterator[BlockingConnection]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield conn
    finally:
        if conn.is_open:
            conn.close()


@pytest.fixture
def channel(connection: BlockingConnection) -> BlockingChannel:
    return connection.channel()


def test_channel_flow_active_is_confirmed(broker: BrokerProcess) -> None:
    with connect(broker.url, channels=(1,)) as conn:
        conn.send(commands.Channel.Flow(active=True), 1)
        flow_ok = conn.expect(commands.Channel.FlowOk, channel=1)

    assert isinstance(flow_ok, commands.Channel.FlowOk)
    assert flow_ok.active is True


def test_channel_flow_inactive_is_not_implemented(broker: BrokerProcess) -> None:
    # rabbit_channel.erl: protocol_error(not_implemented, "active=false", []),
    # a hard error, so it closes the connection.
    with connect(broker.url, channels=(1,)) as conn:
        conn.send(commands.Channel.Flow(active=False), 1)
        close = conn.expect_connection_close()

    assert close.reply_code == 540
    assert close.reply_text == "NOT_IMPLEMENTED - active=false"
    assert (close.class_id, close.method_id) == (20, 20)  # channel.flow


def test_client_connection_close_is_answered_with_close_ok(
    broker: BrokerProcess,
) -> None:
    with connect(broker.url, channels=(1,)) as conn:
        conn.send(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        conn.expect(commands.Connection.CloseOk, channel=0)
        assert conn.read_until_eof() == b""


def test_client_channel_close_is_answered_and_the_id_can_be_reused(
    broker: BrokerProcess,
) -> None:
    with connect(broker.url, channels=(1,)) as conn:
        conn.send(
            commands.Channel.Close(reply_code=200, reply_text="done", class_id=0, method_id=0),
            1,
        )
        conn.expect(commands.Channel.CloseOk, channel=1)
        conn.open_channel(1)


def test_many_channels_open_close_and_reopen(connection: BlockingConnection) -> None:
    channels = [connection.channel() for _ in range(200)]
    assert len({ch.channel_number for ch in channels}) == 200
    assert all(ch.is_open for ch in channels)

    for ch in channels:
        ch.close()
    assert not any(ch.is_open for ch in channels)

    reopened = [connection.channel() for _ in range(200)]
    queue = reopened[-1].queue_declare(queue="", exclusive=True).method.queue
    reopened[0].basic_publish(exchange="", routing_key=queue, body=b"after reopening")
    reopened[0].close()
    method, _, body = reopened[-1].basic_get(queue, auto_ack=True)
    assert method is not None
    assert body == b"after reopening"


def test_server_named_queue(channel: BlockingChannel) -> None:
    declared = channel.queue_declare(queue="", exclusive=True)

    assert SERVER_NAMED_QUEUE.fullmatch(declared.method.queue), declared.method.queue
    assert declared.method.message_count == 0
    assert declared.method.consumer_count == 0


def test_body_larger_than_frame_max_round_trips_with_pika(
    channel: BlockingChannel,
) -> None:
    queue = channel.queue_declare(queue="", exclusive=True).method.queue
    body = os.urandom(ONE_MIB)

    channel.basic_publish(exchange="", routing_key=queue, body=body)
    method, _, received = channel.basic_get(queue, auto_ack=True)

    assert method is not None
    assert len(received) == ONE_MIB
    assert received == body


def test_body_larger_than_frame_max_round_trips_with_aio_pika(
    broker: BrokerProcess,
) -> None:
    body = os.urandom(ONE_MIB)

    async def round_trip() -> bytes:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            ch = await connection.channel()
            queue = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        return message.body
        raise AssertionError("the queue iterator ended without a message")

    assert asyncio.run(asyncio.wait_for(round_trip(), 30)) == body


def test_aio_pika_robust_connection_publish_consume_ack(broker: BrokerProcess) -> None:
    queue_name = unique("aio-basics")
    bodies = [f"message {i}".encode() for i in range(10)]

    async def scenario() -> tuple[list[bytes], int]:
        connection = await aio_pika.connect_robust(broker.url)
        async with connection:
            ch = await connection.channel()
            await ch.set_qos(prefetch_count=3)
            queue = await ch.declare_queue(queue_name)
            for body in bodies:
                await ch.default_exchange.publish(aio_pika.Message(body), routing_key=queue_name)

            received: list[bytes] = []
            async with queue.iterator() as messages:
                async for message in messages:
                    received.append(message.body)
                    await message.ack()
                    if len(received) == len(bodies):
                        break
            await ch.close()

            # Acked messages are gone for good: nothing comes back once the consumer's
            # channel is closed.
            check = await connection.channel()
            left = await check.declare_queue(queue_name, passive=True)
            remaining = left.declaration_result.message_count
            await left.delete(if_unused=False, if_empty=False)
            return received, remaining

    received, remaining = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert received == bodies
    assert remaining == 0
