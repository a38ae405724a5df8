"""basic.publish / get / consume / cancel / ack / reject / nack / recover / qos."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from broker_process import BrokerProcess
from helpers import (
    Consumer,
    RawClient,
    bodies,
    closes_channel,
    closes_connection,
    declare_ok,
    drain,
    get_message,
    get_messages,
    message_count,
    numbered,
    open_session,
    process_for,
    process_until,
    publish_all,
    resource,
    round_trip,
    unique_name,
)
from pamqp import commands
from pika.spec import BasicProperties

pytestmark = pytest.mark.timeout(60)


def unknown_tag_text(tag: int) -> str:
    return f"PRECONDITION_FAILED - unknown delivery tag {tag}"


# --------------------------------------------------------------------------- content


def test_properties_and_headers_round_trip(broker: BrokerProcess) -> None:
    headers = {
        "text": "plain and ünïcode",
        "bytes": b"\x00\x01\xfe\xff",
        "yes": True,
        "no": False,
        "small": -123456,
        "big": 2**40,
        "zero": 0,
        "decimal": Decimal("3.14"),
        "when": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        "nested": {"inner": "value", "depth": {"n": 2}},
        "array": [1, "two", True, None, {"k": "v"}, [3]],
        "nothing": None,
    }
    sent = BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers=headers,
        delivery_mode=2,
        priority=7,
        correlation_id="corr-1",
        reply_to="replies",
        expiration="60000",
        message_id="msg-1",
        timestamp=1_700_000_000,
        type="order.created",
        user_id="guest",
        app_id="lavin-tests",
        cluster_id="c1",
    )
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"payload", sent)
        message = get_message(amqp.channel, queue, auto_ack=True)
        assert message is not None
        assert message.body == b"payload"
        assert vars(message.properties) == vars(sent)


def _shortstr(value: bytes) -> bytes:
    return bytes([len(value)]) + value


def _longstr(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _table(fields: list[tuple[bytes, bytes]]) -> bytes:
    return _longstr(b"".join(_shortstr(name) + value for name, value in fields))


# Every field type RabbitMQ accepts in a table, encoded by hand so no client library
# normalises anything on the way.
HEADERS_TABLE = _table(
    [
        (b"bool", b"t\x01"),
        (b"int8", b"b" + struct.pack(">b", -5)),
        (b"uint8", b"B" + struct.pack(">B", 250)),
        (b"int16", b"s" + struct.pack(">h", -30000)),
        (b"uint16", b"u" + struct.pack(">H", 60000)),
        (b"int32", b"I" + struct.pack(">i", -2_000_000_000)),
        (b"uint32", b"i" + struct.pack(">I", 4_000_000_000)),
        (b"int64", b"l" + struct.pack(">q", -9_000_000_000_000)),
        (b"float", b"f" + struct.pack(">f", 1.5)),
        (b"double", b"d" + struct.pack(">d", 2.718281828)),
        (b"decimal", b"D" + struct.pack(">Bi", 2, 12345)),
        (b"longstr", b"S" + _longstr("héllo".encode())),
        (b"binary", b"x" + _longstr(b"\x00\x01\xff")),
        (b"timestamp", b"T" + struct.pack(">Q", 1_700_000_000)),
        (b"void", b"V"),
        (b"array", b"A" + _longstr(b"I" + struct.pack(">i", 1) + b"S" + _longstr(b"two") + b"t\x00")),
        (b"table", b"F" + _table([(b"inner", b"S" + _longstr(b"value"))])),
    ]
)

# All fourteen basic properties present (flags 0xFFFC), in protocol order.
ALL_PROPERTIES = b"".join(
    [
        struct.pack(">H", 0xFFFC),
        _shortstr(b"application/octet-stream"),  # content-type
        _shortstr(b"identity"),  # content-encoding
        HEADERS_TABLE,  # headers
        b"\x02",  # delivery-mode
        b"\x05",  # priority
        _shortstr(b"corr-7"),  # correlation-id
        _shortstr(b"reply-here"),  # reply-to
        _shortstr(b"60000"),  # expiration
        _shortstr(b"id-7"),  # message-id
        struct.pack(">Q", 1_700_000_123),  # timestamp
        _shortstr(b"kind"),  # type
        _shortstr(b"guest"),  # user-id
        _shortstr(b"app"),  # app-id
        _shortstr(b"cluster"),  # cluster-id
    ]
)


def test_encoded_properties_are_delivered_byte_for_byte(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        queue = amqp.declare_queue()
        channel = raw.open_channel()
        raw.publish(channel, b"first", routing_key=queue, properties=ALL_PROPERTIES)
        raw.publish(channel, b"second", routing_key=queue, properties=ALL_PROPERTIES)

        raw.call(channel, commands.Basic.Get(queue=queue, no_ack=True), commands.Basic.GetOk)
        assert raw.expect_content(channel) == (ALL_PROPERTIES, b"first")

        raw.call(channel, commands.Basic.Consume(queue=queue, consumer_tag="c", no_ack=True), commands.Basic.ConsumeOk)
        raw.expect(channel, commands.Basic.Deliver)
        assert raw.expect_content(channel) == (ALL_PROPERTIES, b"second")


@pytest.mark.parametrize("size", [0, 1, 300_000])
def test_bodies_of_any_size_round_trip(broker: BrokerProcess, size: int) -> None:
    body = bytes(index % 251 for index in range(size))  # larger sizes span several frames
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, body)
        message = get_message(amqp.channel, queue, auto_ack=True)
        assert message is not None
        assert message.body == body


# --------------------------------------------------------------------------- basic.get


def test_get_on_an_empty_queue_is_get_empty(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        assert get_message(amqp.channel, queue) is None
        assert amqp.channel.is_open


def test_get_reports_the_messages_left_and_numbers_deliveries(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        messages = get_messages(amqp.channel, queue, 3)
        assert [(m.body, m.message_count, m.delivery_tag) for m in messages] == [
            (b"m-1", 2, 1),
            (b"m-2", 1, 2),
            (b"m-3", 0, 3),
        ]
        assert {(m.exchange, m.routing_key, m.redelivered) for m in messages} == {("", queue, False)}


# --------------------------------------------------------------------------- mandatory


@pytest.mark.parametrize("exchange", ["", "amq.direct"])
def test_unroutable_mandatory_message_is_returned_with_no_route(broker: BrokerProcess, exchange: str) -> None:
    returned: list[tuple[int, str, str, str, bytes, str | None]] = []
    with open_session(broker.url) as amqp:
        amqp.channel.add_on_return_callback(
            lambda _channel, method, properties, body: returned.append(
                (
                    method.reply_code,
                    method.reply_text,
                    method.exchange,
                    method.routing_key,
                    body,
                    properties.message_id,
                )
            )
        )
        key = unique_name("nobody")
        amqp.channel.basic_publish(exchange, key, b"bounce", BasicProperties(message_id="m-1"), mandatory=True)
        round_trip(amqp.channel)
        process_until(amqp.connection, lambda: bool(returned), "basic.return arrived")
        assert returned == [(312, "NO_ROUTE", exchange, key, b"bounce", "m-1")]
        assert amqp.channel.is_open


def test_unroutable_message_without_mandatory_is_dropped_silently(broker: BrokerProcess) -> None:
    returned: list[bytes] = []
    with open_session(broker.url) as amqp:
        amqp.channel.add_on_return_callback(lambda _c, _m, _p, body: returned.append(body))
        amqp.channel.basic_publish("amq.direct", unique_name("nobody"), b"dropped")
        round_trip(amqp.channel)
        process_for(amqp.connection)
        assert returned == []
        assert amqp.channel.is_open


def test_routable_mandatory_message_is_not_returned(broker: BrokerProcess) -> None:
    returned: list[bytes] = []
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.add_on_return_callback(lambda _c, _m, _p, body: returned.append(body))
        amqp.channel.basic_publish("", queue, b"delivered", mandatory=True)
        round_trip(amqp.channel)
        process_for(amqp.connection)
        assert returned == []
        assert message_count(amqp.channel, queue) == 1


# --------------------------------------------------------------------------- consumers


def test_consumer_receives_in_order_and_cancel_stops_deliveries(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 5))
        consumer = Consumer(amqp.channel, queue)
        deliveries = consumer.wait_for(5)
        assert consumer.bodies == numbered("m", 5)
        assert [d.delivery_tag for d in deliveries] == [1, 2, 3, 4, 5]
        assert {(d.consumer_tag, d.redelivered, d.exchange, d.routing_key) for d in deliveries} == {
            (consumer.tag, False, "", queue)
        }

        amqp.channel.basic_ack(5, multiple=True)
        consumer.cancel()
        publish_all(amqp.channel, queue, numbered("late", 2))
        assert len(consumer.settle()) == 5
        assert declare_ok(amqp.channel, queue) == (2, 0)


def test_server_generates_a_consumer_tag_when_none_is_given(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        queue = amqp.declare_queue()
        channel = raw.open_channel()
        first = raw.call(channel, commands.Basic.Consume(queue=queue), commands.Basic.ConsumeOk)
        second = raw.call(channel, commands.Basic.Consume(queue=queue), commands.Basic.ConsumeOk)
        assert first.consumer_tag.startswith("amq.ctag-")
        assert second.consumer_tag.startswith("amq.ctag-")
        assert first.consumer_tag != second.consumer_tag


def test_consumers_of_one_queue_take_turns(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        first = Consumer(amqp.connection.channel(), queue, auto_ack=True)
        second = Consumer(amqp.connection.channel(), queue, auto_ack=True)
        publish_all(amqp.channel, queue, numbered("m", 4))
        process_until(
            amqp.connection,
            lambda: len(first.deliveries) + len(second.deliveries) == 4,
            "all four messages were delivered",
        )
        assert (first.bodies, second.bodies) == ([b"m-1", b"m-3"], [b"m-2", b"m-4"])


def test_reusing_a_consumer_tag_on_a_channel_closes_the_connection(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        queue = amqp.declare_queue()
        channel, other_channel = raw.open_channel(1), raw.open_channel(2)
        raw.call(channel, commands.Basic.Consume(queue=queue, consumer_tag="dup"), commands.Basic.ConsumeOk)
        # The same tag on another channel is a different consumer.
        raw.call(other_channel, commands.Basic.Consume(queue=queue, consumer_tag="dup"), commands.Basic.ConsumeOk)
        raw.send(channel, commands.Basic.Consume(queue=queue, consumer_tag="dup"))
        close = raw.expect(0, commands.Connection.Close)
        assert (close.reply_code, close.reply_text) == (530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")


@pytest.mark.parametrize(("first_exclusive", "second_exclusive"), [(False, True), (True, False), (True, True)])
def test_exclusive_consumer_excludes_every_other_consumer(
    broker: BrokerProcess, first_exclusive: bool, second_exclusive: bool
) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        Consumer(amqp.connection.channel(), queue, exclusive=first_exclusive)
        with closes_channel(403, f"ACCESS_REFUSED - {resource('queue', queue)} in exclusive use"):
            Consumer(amqp.channel, queue, exclusive=second_exclusive)


def test_consume_nowait_sends_no_consume_ok(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        queue = amqp.declare_queue()
        channel = raw.open_channel()
        raw.send(channel, commands.Basic.Consume(queue=queue, consumer_tag="quiet", no_ack=True, nowait=True))
        raw.publish(channel, b"hello", routing_key=queue)
        deliver = raw.expect(channel, commands.Basic.Deliver)
        assert deliver.consumer_tag == "quiet"
        assert raw.expect_content(channel)[1] == b"hello"
        raw.send(channel, commands.Basic.Cancel(consumer_tag="quiet", nowait=True))
        raw.call(channel, commands.Basic.Qos(), commands.Basic.QosOk)


def test_no_ack_deliveries_are_never_requeued(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        consuming = amqp.connection.channel()
        consumer = Consumer(consuming, queue, auto_ack=True)
        consumer.wait_for(3)
        consuming.close()
        assert message_count(amqp.channel, queue) == 0


def test_acking_a_no_ack_delivery_is_an_unknown_tag(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"m")
        [message] = get_messages(amqp.channel, queue, 1, auto_ack=True)
        with closes_channel(406, unknown_tag_text(message.delivery_tag)):
            amqp.channel.basic_ack(message.delivery_tag)
            round_trip(amqp.channel)


def test_cancel_leaves_unacked_messages_with_the_channel(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        consuming = amqp.connection.channel()
        consumer = Consumer(consuming, queue)
        consumer.wait_for(3)
        consumer.cancel()
        # Still unacknowledged, not back in the queue.
        assert declare_ok(amqp.channel, queue) == (0, 0)
        # ...and still ours to acknowledge.
        consuming.basic_ack(1)
        round_trip(consuming)
        consuming.close()
        assert [(m.body, m.redelivered) for m in drain(amqp.channel, queue)] == [
            (b"m-2", True),
            (b"m-3", True),
        ]


# --------------------------------------------------------------------------- acknowledgements


def test_ack_settles_only_the_acknowledged_message(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        getter = amqp.connection.channel()
        get_messages(getter, queue, 3)
        getter.basic_ack(2)
        round_trip(getter)
        getter.close()
        assert bodies(drain(amqp.channel, queue)) == [b"m-1", b"m-3"]


@pytest.mark.parametrize(("tag", "left"), [(2, [b"m-3"]), (0, [])])
def test_multiple_ack_settles_everything_up_to_the_tag(broker: BrokerProcess, tag: int, left: list[bytes]) -> None:
    # Tag 0 with multiple set means every outstanding delivery.
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        getter = amqp.connection.channel()
        get_messages(getter, queue, 3)
        getter.basic_ack(tag, multiple=True)
        round_trip(getter)
        getter.close()
        assert bodies(drain(amqp.channel, queue)) == left


@pytest.mark.parametrize("method", ["ack", "reject", "nack"])
def test_settling_an_unknown_delivery_tag_is_precondition_failed(broker: BrokerProcess, method: str) -> None:
    with open_session(broker.url) as amqp:
        settle = {
            "ack": lambda: amqp.channel.basic_ack(99),
            "reject": lambda: amqp.channel.basic_reject(99),
            "nack": lambda: amqp.channel.basic_nack(99),
        }[method]
        with closes_channel(406, unknown_tag_text(99)):
            settle()
            round_trip(amqp.channel)
        assert amqp.connection.is_open


def test_acking_twice_is_precondition_failed(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"once")
        [message] = get_messages(amqp.channel, queue, 1)
        amqp.channel.basic_ack(message.delivery_tag)
        with closes_channel(406, unknown_tag_text(message.delivery_tag)):
            amqp.channel.basic_ack(message.delivery_tag)
            round_trip(amqp.channel)


@pytest.mark.parametrize("method", ["reject", "nack"])
def test_requeued_message_comes_back_marked_redelivered(broker: BrokerProcess, method: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"again")
        [first] = get_messages(amqp.channel, queue, 1)
        assert not first.redelivered
        if method == "reject":
            amqp.channel.basic_reject(first.delivery_tag, requeue=True)
        else:
            amqp.channel.basic_nack(first.delivery_tag, requeue=True)
        [second] = get_messages(amqp.channel, queue, 1)
        assert (second.body, second.redelivered) == (b"again", True)
        assert second.delivery_tag != first.delivery_tag


def test_requeued_messages_keep_their_order_ahead_of_new_ones(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 5))
        got = get_messages(amqp.channel, queue, 3)
        # Requeue out of order, one at a time.
        amqp.channel.basic_nack(got[2].delivery_tag, requeue=True)
        amqp.channel.basic_reject(got[0].delivery_tag, requeue=True)
        amqp.channel.basic_nack(got[1].delivery_tag, requeue=True)
        assert [(m.body, m.redelivered) for m in drain(amqp.channel, queue)] == [
            (b"m-1", True),
            (b"m-2", True),
            (b"m-3", True),
            (b"m-4", False),
            (b"m-5", False),
        ]


def test_nack_multiple_requeues_everything_up_to_the_tag(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 4))
        got = get_messages(amqp.channel, queue, 3)
        amqp.channel.basic_nack(got[1].delivery_tag, multiple=True, requeue=True)
        amqp.channel.basic_ack(got[2].delivery_tag)
        assert [(m.body, m.redelivered) for m in drain(amqp.channel, queue)] == [
            (b"m-1", True),
            (b"m-2", True),
            (b"m-4", False),
        ]


@pytest.mark.parametrize("method", ["reject", "nack"])
def test_reject_and_nack_without_requeue_discard_the_message(broker: BrokerProcess, method: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 2))
        getter = amqp.connection.channel()
        [first] = get_messages(getter, queue, 1)
        if method == "reject":
            getter.basic_reject(first.delivery_tag, requeue=False)
        else:
            getter.basic_nack(first.delivery_tag, requeue=False)
        round_trip(getter)
        getter.close()
        assert bodies(drain(amqp.channel, queue)) == [b"m-2"]


def test_unacked_messages_are_requeued_when_the_connection_closes(
    broker: BrokerProcess,
) -> None:
    with open_session(broker.url) as amqp, open_session(broker.url) as doomed:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 2))
        get_messages(doomed.channel, queue, 2)
        doomed.connection.close()
        process_until(
            amqp.connection, lambda: message_count(amqp.channel, queue) == 2, "both messages are back in the queue"
        )
        assert [(m.body, m.redelivered) for m in drain(amqp.channel, queue)] == [
            (b"m-1", True),
            (b"m-2", True),
        ]


def test_recover_with_requeue_redelivers_unacked_messages(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        consumer = Consumer(amqp.channel, queue)
        consumer.wait_for(3)
        amqp.channel.basic_recover(requeue=True)
        deliveries = consumer.wait_for(6)
        assert [(d.body, d.redelivered) for d in deliveries[3:]] == [
            (b"m-1", True),
            (b"m-2", True),
            (b"m-3", True),
        ]
        # The old tags are gone; the new ones settle the messages.
        amqp.channel.basic_ack(deliveries[-1].delivery_tag, multiple=True)
        consumer.cancel()
        assert declare_ok(amqp.connection.channel(), queue) == (0, 0)


def test_recover_without_requeue_is_not_implemented(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, closes_connection(540, "NOT_IMPLEMENTED - requeue=false"):
        amqp.channel.basic_recover(requeue=False)


# --------------------------------------------------------------------------- qos


def test_prefetch_count_limits_unacked_deliveries(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 5))
        amqp.channel.basic_qos(prefetch_count=2)
        consumer = Consumer(amqp.channel, queue)
        consumer.wait_for(2)
        assert len(consumer.settle()) == 2

        amqp.channel.basic_ack(consumer.deliveries[0].delivery_tag)
        consumer.wait_for(3)
        assert len(consumer.settle()) == 3

        amqp.channel.basic_ack(consumer.deliveries[2].delivery_tag, multiple=True)
        consumer.wait_for(5)
        assert consumer.bodies == numbered("m", 5)


@pytest.mark.parametrize(("global_qos", "delivered"), [(False, 6), (True, 3)])
def test_global_prefetch_is_shared_by_the_channel_s_consumers(
    broker: BrokerProcess, global_qos: bool, delivered: int
) -> None:
    with open_session(broker.url) as amqp:
        queues = [amqp.declare_queue(), amqp.declare_queue()]
        for queue in queues:
            publish_all(amqp.channel, queue, numbered(queue, 5))
        consuming = amqp.connection.channel()
        consuming.basic_qos(prefetch_count=3, global_qos=global_qos)
        consumers = [Consumer(consuming, queue) for queue in queues]
        process_until(
            amqp.connection,
            lambda: sum(len(c.deliveries) for c in consumers) >= delivered,
            f"{delivered} deliveries arrived",
        )
        process_for(amqp.connection)
        assert sum(len(c.deliveries) for c in consumers) == delivered
