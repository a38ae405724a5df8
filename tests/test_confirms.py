"""Publisher confirms (confirm.select, basic.ack/nack from the broker)."""

from __future__ import annotations

import asyncio

import aio_pika
import pika.spec
import pytest
from broker_process import BrokerProcess
from helpers import (
    RawClient,
    bodies,
    closes_channel,
    drain,
    get_message,
    message_count,
    numbered,
    open_session,
    publish_all,
    unique_name,
)
from pamqp import commands
from pika.exceptions import UnroutableError

pytestmark = pytest.mark.timeout(60)

MANY = 1000


def test_every_publish_on_a_confirm_channel_is_acked(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.confirm_delivery()
        # In confirm mode pika waits for each ack and raises on a nack or a timeout.
        publish_all(amqp.channel, queue, numbered("m", 50))
        assert bodies(drain(amqp.channel, queue)) == numbered("m", 50)


def test_acks_cover_every_pipelined_publish_exactly_once(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        queue = amqp.declare_queue()
        channel = raw.open_channel()
        raw.call(channel, commands.Confirm.Select(), commands.Confirm.SelectOk)
        raw.send_bytes(RawClient.publish_bytes(channel, b"x", routing_key=queue) * MANY)

        confirmed: set[int] = set()
        while len(confirmed) < MANY:
            ack = raw.expect(channel, commands.Basic.Ack)
            assert 1 <= ack.delivery_tag <= MANY
            covered = set(range(1, ack.delivery_tag + 1)) if ack.multiple else {ack.delivery_tag}
            assert covered - confirmed, f"ack {ack.delivery_tag} confirmed nothing new"
            confirmed |= covered
        assert confirmed == set(range(1, MANY + 1))
        assert message_count(amqp.channel, queue) == MANY


def test_thousand_concurrent_publishes_are_confirmed_with_aio_pika(
    broker: BrokerProcess,
) -> None:
    async def publish_concurrently() -> tuple[list[object], int]:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue(unique_name("confirm"))
            try:
                confirmations = await asyncio.gather(
                    *(
                        channel.default_exchange.publish(
                            aio_pika.Message(f"m-{index}".encode()), routing_key=queue.name
                        )
                        for index in range(MANY)
                    )
                )
                declared = await channel.declare_queue(queue.name, passive=True)
                return list(confirmations), declared.declaration_result.message_count
            finally:
                await queue.delete(if_unused=False, if_empty=False)

    confirmations, count = asyncio.run(asyncio.wait_for(publish_concurrently(), timeout=30))
    assert len(confirmations) == MANY
    assert all(isinstance(result, commands.Basic.Ack) for result in confirmations)
    assert count == MANY


def test_unroutable_mandatory_message_is_returned_then_acked(broker: BrokerProcess) -> None:
    key = unique_name("nobody")
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.confirm_delivery()
        # pika raises UnroutableError only when basic.return came before the basic.ack
        # (a nack would raise NackError instead).
        with pytest.raises(UnroutableError) as info:
            amqp.channel.basic_publish("amq.direct", key, b"bounce", mandatory=True)
        [returned] = info.value.messages
        assert (
            returned.method.reply_code,
            returned.method.reply_text,
            returned.method.exchange,
            returned.method.routing_key,
            returned.body,
        ) == (312, "NO_ROUTE", "amq.direct", key, b"bounce")
        # The channel carries on confirming.
        amqp.channel.basic_publish("", queue, b"after")
        assert message_count(amqp.channel, queue) == 1


def test_return_comes_before_the_ack_on_the_wire(broker: BrokerProcess) -> None:
    key = unique_name("nobody")
    with RawClient(broker.port) as raw:
        channel = raw.open_channel()
        raw.call(channel, commands.Confirm.Select(), commands.Confirm.SelectOk)
        raw.publish(channel, b"bounce", exchange="amq.direct", routing_key=key, mandatory=True)
        returned = raw.expect(channel, commands.Basic.Return)
        assert (returned.reply_code, returned.reply_text, returned.routing_key) == (312, "NO_ROUTE", key)
        assert raw.expect_content(channel)[1] == b"bounce"
        ack = raw.expect(channel, commands.Basic.Ack)
        assert (ack.delivery_tag, ack.multiple) == (1, False)


def test_unroutable_message_without_mandatory_is_acked(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        amqp.channel.confirm_delivery()
        amqp.channel.basic_publish("amq.direct", unique_name("nobody"), b"dropped")
        assert amqp.channel.is_open


def test_persistent_message_to_a_durable_queue_is_confirmed(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue(durable=True)
        amqp.channel.confirm_delivery()
        amqp.channel.basic_publish("", queue, b"kept", pika.spec.BasicProperties(delivery_mode=2))
        message = get_message(amqp.channel, queue, auto_ack=True)
        assert message is not None
        assert (message.body, message.properties.delivery_mode) == (b"kept", 2)


def test_confirm_select_nowait_sends_no_select_ok(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        queue = amqp.declare_queue()
        channel = raw.open_channel()
        raw.send(channel, commands.Confirm.Select(nowait=True))
        raw.publish(channel, b"one", routing_key=queue)
        ack = raw.expect(channel, commands.Basic.Ack)
        assert (ack.delivery_tag, ack.multiple) == (1, False)


def test_confirm_select_on_a_transactional_channel_is_precondition_failed(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp:
        amqp.channel.tx_select()
        with closes_channel(406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode"):
            amqp.channel.confirm_delivery()
