"""Bad input that used to end a connection with 541 INTERNAL_ERROR and a traceback in the
log gets the reply RabbitMQ gives for bad input, and the log stays one line per error.

- Declare arguments and properties that are not UTF-8 where the broker needs text:
  406 PRECONDITION_FAILED, closing only the channel, as for any invalid argument.
- Field tables nested deeper than lavin.api.field_table.MAX_DEPTH: the frame does not
  decode, 501 FRAME_ERROR "cannot decode" for method arguments (as RabbitMQ's
  rabbit_misc:frame_error/2) and 502 SYNTAX_ERROR for malformed properties.
- Headers the broker has to encode again (BCC removed, direct reply-to rewritten) keep
  values pamqp's encoder refused: long strings that are not UTF-8, doubles.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess
from helpers import unique_name
from lavin.api.field_table import encode_table
from lavin.client.wire import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    PROTOCOL_HEADER,
    Connection,
    connect,
    method_frame,
    raw_frame,
)
from pamqp import commands
from pamqp.base import Frame

CHANNEL = 1
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
HEADERS, USER_ID, REPLY_TO, EXPIRATION = 0x2000, 0x0010, 0x0200, 0x0100
NOT_UTF8 = b"\xff\xfe"
DEPTH = 500
TOO_DEEP = "nested more than 100 deep"


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker for this module alone, so that its log shows what these inputs caused."""
    process = BrokerProcess(Path(tmp_path_factory.mktemp("bad-input")) / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture(autouse=True)
def quiet_log(own_broker: BrokerProcess) -> Iterator[None]:
    yield
    log = own_broker.output
    assert "Traceback" not in log, log[log.index("Traceback") :][:3000]
    assert "internal error" not in log, log


# --------------------------------------------------------------------------- frames by hand


def payload_of(method: Frame) -> bytes:
    return method_frame(0, method)[7:-1]


def with_arguments(method: Frame, arguments: bytes) -> bytes:
    """A method frame whose last argument, a table, is `arguments` as given."""
    return raw_frame(FRAME_METHOD, CHANNEL, payload_of(method)[:-4] + arguments)


def shortstr(data: bytes) -> bytes:
    return bytes((len(data),)) + data


def nested(depth: int) -> bytes:
    """A table holding a table holding ..., `depth` levels in all."""
    inner = U32.pack(0)
    for _ in range(depth - 1):
        body = shortstr(b"n") + b"F" + inner
        inner = U32.pack(len(body)) + body
    return inner


def publish(routing_key: str, properties: bytes, body: bytes = b"body") -> bytes:
    """basic.publish on the default exchange, its content header and body."""
    method = method_frame(CHANNEL, commands.Basic.Publish(exchange="", routing_key=routing_key))
    header = raw_frame(FRAME_HEADER, CHANNEL, struct.pack(">HHQ", 60, 0, len(body)) + properties)
    return method + header + raw_frame(FRAME_BODY, CHANNEL, body)


def channel_close(broker: BrokerProcess, data: bytes) -> commands.Channel.Close:
    """Send `data` on channel 1 and return the channel.close it gets; the connection must
    still open another channel afterwards."""
    with connect(broker.url, channels=(CHANNEL,)) as conn:
        conn.send_raw(data)
        close = conn.expect(commands.Channel.Close, CHANNEL)
        conn.send(commands.Channel.CloseOk(), CHANNEL)
        conn.open_channel(CHANNEL + 1)
    return close


def connection_close(broker: BrokerProcess, data: bytes) -> commands.Connection.Close:
    with connect(broker.url, channels=(CHANNEL,)) as conn:
        conn.send_raw(data)
        return conn.expect_connection_close()


# --------------------------------------------------------------------------- 406 for text that is not UTF-8


@pytest.mark.parametrize(
    ("argument", "reply_text"),
    [
        ("x-queue-type", "PRECONDITION_FAILED - unknown queue type '\\xff\\xfe' for queue '{queue}'"),
        ("x-overflow", "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue '{queue}' in vhost '/': invalid_utf8"),
        (
            "x-dead-letter-exchange",
            "PRECONDITION_FAILED - invalid arg 'x-dead-letter-exchange' for queue '{queue}' in vhost '/': invalid_utf8",
        ),
        (
            "x-dead-letter-routing-key",
            "PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue '{queue}' in vhost '/': "
            "invalid_utf8",
        ),
    ],
    ids=["x-queue-type", "x-overflow", "x-dead-letter-exchange", "x-dead-letter-routing-key"],
)
def test_a_queue_argument_that_is_not_utf8_is_a_precondition_failure(
    own_broker: BrokerProcess, argument: str, reply_text: str
) -> None:
    queue = unique_name("bad-argument")
    declare = with_arguments(commands.Queue.Declare(queue=queue), encode_table({argument: NOT_UTF8}))
    close = channel_close(own_broker, declare)
    assert (close.reply_code, close.reply_text) == (406, reply_text.format(queue=queue))
    assert (close.class_id, close.method_id) == (50, 10)


@pytest.mark.parametrize(
    ("flag", "value", "reply_text"),
    [
        (EXPIRATION, NOT_UTF8, "PRECONDITION_FAILED - invalid expiration '\\xff\\xfe': no_integer"),
        (
            USER_ID,
            NOT_UTF8,
            "PRECONDITION_FAILED - user_id property set to '\\xff\\xfe' but authenticated user was 'guest'",
        ),
    ],
    ids=["expiration", "user-id"],
)
def test_a_property_that_is_not_utf8_is_a_precondition_failure(
    own_broker: BrokerProcess, flag: int, value: bytes, reply_text: str
) -> None:
    close = channel_close(own_broker, publish("anywhere", U16.pack(flag) + shortstr(value)))
    assert (close.reply_code, close.reply_text) == (406, reply_text)
    assert (close.class_id, close.method_id) == (60, 40)


def test_a_cc_key_that_is_not_utf8_is_a_precondition_failure(own_broker: BrokerProcess) -> None:
    properties = U16.pack(HEADERS) + encode_table({"CC": ["fine", NOT_UTF8]})
    close = channel_close(own_broker, publish("anywhere", properties))
    assert (close.reply_code, close.reply_text) == (
        406,
        "PRECONDITION_FAILED - invalid CC header: expected an array of strings",
    )


# --------------------------------------------------------------------------- tables nested too deep


def test_headers_nested_too_deep_are_malformed_properties(own_broker: BrokerProcess) -> None:
    close = connection_close(own_broker, publish("anywhere", U16.pack(HEADERS) + nested(DEPTH)))
    assert close.reply_code == 502, close.reply_text
    assert (
        close.reply_text == f"SYNTAX_ERROR - malformed properties in basic.publish: field tables and arrays {TOO_DEEP}"
    )
    assert (close.class_id, close.method_id) == (60, 40)


@pytest.mark.parametrize(
    ("method", "ids"),
    [
        (commands.Queue.Declare(queue="deep"), (50, 10)),
        (commands.Exchange.Declare(exchange="deep"), (40, 10)),
        (commands.Queue.Bind(queue="deep", exchange="amq.direct"), (50, 20)),
        (commands.Basic.Consume(queue="deep"), (60, 20)),
    ],
    ids=["queue.declare", "exchange.declare", "queue.bind", "basic.consume"],
)
def test_arguments_nested_too_deep_do_not_decode(
    own_broker: BrokerProcess, method: Frame, ids: tuple[int, int]
) -> None:
    close = connection_close(own_broker, with_arguments(method, nested(DEPTH)))
    assert close.reply_code == 501, close.reply_text
    assert close.reply_text.startswith("FRAME_ERROR - cannot decode "), close.reply_text
    assert TOO_DEEP in close.reply_text
    assert (close.class_id, close.method_id) == ids


def test_client_properties_nested_too_deep_do_not_decode(own_broker: BrokerProcess) -> None:
    start_ok = U32.pack(commands.Connection.StartOk.index) + nested(DEPTH) + shortstr(b"PLAIN")
    start_ok += U32.pack(12) + b"\0guest\0guest" + shortstr(b"en_US")
    with Connection(own_broker.url) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.expect(commands.Connection.Start)
        conn.send_raw(raw_frame(FRAME_METHOD, 0, start_ok))
        close = conn.expect_connection_close()
    assert close.reply_code == 501, close.reply_text
    assert TOO_DEEP in close.reply_text
    assert (close.class_id, close.method_id) == (10, 11)


def test_a_login_response_that_is_not_utf8_is_refused(own_broker: BrokerProcess) -> None:
    """The response is opaque bytes; the compiled broker once failed on it with 541."""
    properties = encode_table({"capabilities": {"authentication_failure_close": True}})
    start_ok = U32.pack(commands.Connection.StartOk.index) + properties + shortstr(b"PLAIN")
    start_ok += U32.pack(12) + b"\0guest\0gu\xffst" + shortstr(b"en_US")
    with Connection(own_broker.url) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.expect(commands.Connection.Start)
        conn.send_raw(raw_frame(FRAME_METHOD, 0, start_ok))
        close = conn.expect_connection_close()
    assert close.reply_code == 403, close.reply_text
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused"), close.reply_text


# --------------------------------------------------------------------------- headers encoded again

# Decoded as bytes and a float; pamqp's encoder refused the first and overflowed on the second.
ODD_HEADERS = {"raw": NOT_UTF8, "wide": 1e300}


def test_bcc_is_removed_from_headers_pamqp_could_not_encode(own_broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        channel = connection.channel()
        to, bcc = unique_name("to"), unique_name("bcc")
        for queue in (to, bcc):
            channel.queue_declare(queue, exclusive=True)
        with connect(own_broker.url, channels=(CHANNEL,)) as conn:
            conn.send_raw(publish(to, U16.pack(HEADERS) + encode_table({**ODD_HEADERS, "BCC": [bcc]})))
            conn.call(commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk, CHANNEL)  # the publish is in
        for queue in (to, bcc):
            method, properties, body = channel.basic_get(queue, auto_ack=True)
            assert method is not None, f"nothing reached {queue}"
            assert (properties.headers, body) == (ODD_HEADERS, b"body")
    finally:
        connection.close()


def test_direct_reply_to_is_rewritten_in_headers_pamqp_could_not_encode(own_broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        channel = connection.channel()
        service = channel.queue_declare(unique_name("service"), exclusive=True).method.queue
        with connect(own_broker.url, channels=(CHANNEL,)) as requester:
            requester.consume("amq.rabbitmq.reply-to", no_ack=True)
            properties = U16.pack(HEADERS | REPLY_TO) + encode_table(ODD_HEADERS) + shortstr(b"amq.rabbitmq.reply-to")
            requester.send_raw(publish(service, properties))
            requester.call(commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk, CHANNEL)
            method, received, _ = channel.basic_get(service, auto_ack=True)
        assert method is not None, "the request did not reach the service queue"
        assert received.headers == ODD_HEADERS
        assert received.reply_to.startswith("amq.rabbitmq.reply-to."), received.reply_to
    finally:
        connection.close()


def test_dead_lettering_adds_x_death_to_headers_pamqp_could_not_encode(own_broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        channel = connection.channel()
        dead = channel.queue_declare(unique_name("dead"), exclusive=True).method.queue
        arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
        source = channel.queue_declare(unique_name("source"), exclusive=True, arguments=arguments).method.queue
        with connect(own_broker.url, channels=(CHANNEL,)) as conn:
            conn.send_raw(publish(source, U16.pack(HEADERS) + encode_table(ODD_HEADERS)))
            conn.call(commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk, CHANNEL)
        method, _, _ = channel.basic_get(source)
        assert method is not None, "the message did not reach its queue"
        channel.basic_reject(method.delivery_tag, requeue=False)
        method, properties, _ = channel.basic_get(dead, auto_ack=True)
        assert method is not None, "the message was not dead-lettered"
        assert {key: properties.headers[key] for key in ODD_HEADERS} == ODD_HEADERS
        assert properties.headers["x-death"][0]["reason"] == "rejected"
    finally:
        connection.close()


def test_headers_of_a_frame_each_pass_intact(own_broker: BrokerProcess) -> None:
    """Twenty messages whose headers table is about 120 KB (10,000 fields) each."""
    headers = {f"k{i:05d}": i for i in range(10_000)}
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        queue = channel.queue_declare(unique_name("big-headers"), exclusive=True).method.queue
        for number in range(20):
            channel.basic_publish("", queue, str(number).encode(), pika.BasicProperties(headers=headers))
        for number in range(20):
            method, properties, body = channel.basic_get(queue, auto_ack=True)
            assert method is not None and body == str(number).encode()
            assert properties.headers == headers
    finally:
        connection.close()
