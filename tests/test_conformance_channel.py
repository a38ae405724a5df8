"""Channel-level answers where RabbitMQ 3.10 is the reference: unbinding from missing
objects, the default exchange, multiple acks of unknown tags, immediate publishes, the
user-id property, passive declares of reply addresses and queue names beyond ASCII."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess
from helpers import (
    DEFAULT_EXCHANGE_REFUSED,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    Consumer,
    RawClient,
    await_message,
    closes_channel,
    declare_ok,
    drain,
    encode_frame,
    get_message,
    get_messages,
    numbered,
    open_session,
    passive_reply_code,
    publish_all,
    round_trip,
    unique_name,
)
from lavin.api import AuthBackend, User, VHostPermissions
from lavin.config import Config
from lavin.server import load_plugins
from lavin.testing.broker import _BrokerThread
from pamqp import commands
from pika.spec import BasicProperties

REPLY_TO = "amq.rabbitmq.reply-to"

# --------------------------------------------------------------------------- unbind


@pytest.mark.parametrize("missing", ["queue", "exchange", "both"])
def test_queue_unbind_with_a_missing_queue_or_exchange_is_unbind_ok(broker: BrokerProcess, missing: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue() if missing == "exchange" else unique_name("missing")
        exchange = amqp.declare_exchange() if missing == "queue" else unique_name("missing")
        amqp.channel.queue_unbind(queue, exchange, "key")
        assert amqp.channel.is_open


def test_queue_unbind_after_the_queue_was_deleted_is_unbind_ok(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        exchange = amqp.declare_exchange()
        amqp.channel.queue_bind(queue, exchange, "key")
        amqp.channel.queue_delete(queue)
        amqp.channel.queue_unbind(queue, exchange, "key")
        amqp.channel.exchange_delete(exchange)
        amqp.channel.queue_unbind(queue, exchange, "key")
        assert amqp.channel.is_open


@pytest.mark.parametrize("missing", ["source", "destination", "both"])
def test_exchange_unbind_with_a_missing_exchange_is_unbind_ok(broker: BrokerProcess, missing: str) -> None:
    with open_session(broker.url) as amqp:
        source = amqp.declare_exchange() if missing == "destination" else unique_name("missing")
        destination = amqp.declare_exchange() if missing == "source" else unique_name("missing")
        amqp.channel.exchange_unbind(destination=destination, source=source, routing_key="k")
        assert amqp.channel.is_open


def test_unbind_from_the_default_exchange_is_refused_even_for_a_missing_queue(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        with closes_channel(403, DEFAULT_EXCHANGE_REFUSED):
            amqp.channel.queue_unbind(unique_name("missing"), "", "key")
        amqp.new_channel()
        with closes_channel(403, DEFAULT_EXCHANGE_REFUSED):
            amqp.channel.exchange_unbind(destination="", source=unique_name("missing"), routing_key="k")


# --------------------------------------------------------------------------- default exchange


def test_passive_declare_of_the_default_exchange_is_access_refused(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, closes_channel(403, DEFAULT_EXCHANGE_REFUSED):
        amqp.channel.exchange_declare("", passive=True)


# --------------------------------------------------------------------------- multiple acks


@pytest.mark.parametrize("settle", ["ack", "nack"])
def test_multiple_settle_of_an_unknown_tag_is_refused_and_settles_nothing(broker: BrokerProcess, settle: str) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        getter = amqp.connection.channel()
        tags = [message.delivery_tag for message in get_messages(getter, queue, 3)]
        getter.basic_ack(tags[1])  # tags 1 and 3 stay outstanding, 2 is not
        with closes_channel(406, f"PRECONDITION_FAILED - unknown delivery tag {tags[1]}"):
            if settle == "ack":
                getter.basic_ack(tags[1], multiple=True)
            else:
                getter.basic_nack(tags[1], multiple=True, requeue=False)
            round_trip(getter)
        # Nothing was settled by the refused call: closing the channel requeued both.
        assert sorted(message.body for message in drain(amqp.channel, queue)) == [b"m-1", b"m-3"]


def test_multiple_ack_of_a_tag_beyond_the_outstanding_ones_is_refused(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 2))
        getter = amqp.connection.channel()
        get_messages(getter, queue, 2)
        with closes_channel(406, "PRECONDITION_FAILED - unknown delivery tag 7"):
            getter.basic_ack(7, multiple=True)
            round_trip(getter)
        assert declare_ok(amqp.channel, queue) == (2, 0)


def test_multiple_ack_of_tag_zero_settles_everything_outstanding(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        publish_all(amqp.channel, queue, numbered("m", 3))
        getter = amqp.connection.channel()
        get_messages(getter, queue, 3)
        getter.basic_ack(0, multiple=True)
        getter.basic_ack(0, multiple=True)  # nothing outstanding: still fine
        round_trip(getter)
        getter.close()
        assert declare_ok(amqp.channel, queue) == (0, 0)


# --------------------------------------------------------------------------- immediate


def test_publish_with_immediate_closes_the_connection_with_not_implemented(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        queue = amqp.declare_queue()
        channel = raw.open_channel()
        method = commands.Basic.Publish(exchange="", routing_key=queue, immediate=True)
        header = struct.pack(">HHQ", 60, 0, 2) + commands.Basic.Properties().marshal()
        raw.send_bytes(
            encode_frame(FRAME_METHOD, channel, struct.pack(">I", method.index) + method.marshal())
            + encode_frame(FRAME_HEADER, channel, header)
            + encode_frame(FRAME_BODY, channel, b"hi")
        )
        close = raw.expect(0, commands.Connection.Close)
        assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")
        assert (close.class_id, close.method_id) == (60, 40)
        assert declare_ok(amqp.channel, queue) == (0, 0)


# --------------------------------------------------------------------------- user-id


def test_publish_with_another_user_id_is_precondition_failed(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        with closes_channel(
            406, "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user was 'guest'"
        ):
            amqp.channel.basic_publish("", queue, b"forged", BasicProperties(user_id="mallory"))
            round_trip(amqp.channel)
        amqp.new_channel()
        assert declare_ok(amqp.channel, queue) == (0, 0)


def test_publish_with_the_own_user_id_is_accepted(broker: BrokerProcess) -> None:
    with open_session(broker.url) as amqp:
        queue = amqp.declare_queue()
        amqp.channel.basic_publish("", queue, b"mine", BasicProperties(user_id="guest", delivery_mode=2))
        message = get_message(amqp.channel, queue, auto_ack=True)
        assert message is not None and message.properties.user_id == "guest"


class _Impersonators(AuthBackend):
    """A user that may publish on behalf of others, as RabbitMQ's `impersonator` tag allows."""

    name = "impersonators"

    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        if username != "relay":
            return None
        return User("relay", tags=("impersonator",), permissions={"/": VHostPermissions()})


def test_an_impersonator_may_publish_with_any_user_id(tmp_path: Path) -> None:
    config = Config(
        data_dir=tmp_path, amqp_port=0, http_port=-1, metrics_http_port=-1, auth_backends=("impersonators",)
    )
    builtin = load_plugins(Config(data_dir=tmp_path, amqp_port=0))
    registry = dataclasses.replace(builtin, auth_backends={**builtin.auth_backends, "impersonators": _Impersonators})
    thread = _BrokerThread(config, registry)
    thread.start()
    try:
        port, _ = thread.ports.result(30)
        with open_session(f"amqp://relay:any@127.0.0.1:{port}/%2F") as amqp:
            queue = amqp.declare_queue()
            amqp.channel.basic_publish("", queue, b"relayed", BasicProperties(user_id="alice"))
            message = get_message(amqp.channel, queue, auto_ack=True)
            assert message is not None and message.properties.user_id == "alice"
    finally:
        thread.stop()


# --------------------------------------------------------------------------- reply addresses


def test_passive_declare_of_a_reply_address_exists_while_its_requester_consumes(broker: BrokerProcess) -> None:
    with open_session(broker.url) as server:
        request_queue = server.declare_queue("rpc")
        requester = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            channel = requester.channel()
            channel.basic_consume(REPLY_TO, lambda *args: None, auto_ack=True)
            channel.basic_publish("", request_queue, b"ping", BasicProperties(reply_to=REPLY_TO))
            request = await_message(server.channel, request_queue, "the request arrives")
            address = request.properties.reply_to
            result = server.channel.queue_declare(address, passive=True).method
            assert (result.queue, result.message_count, result.consumer_count) == (address, 0, 1)
        finally:
            requester.close()
        assert passive_reply_code(server.connection, "queue", address) == 404
        assert passive_reply_code(server.connection, "queue", f"{REPLY_TO}.never-issued") == 404


# --------------------------------------------------------------------------- names


# Unique per run: the shared broker keeps what a failed test left behind.
RUN = unique_name("")
NAMES = ["été", "order*queue", "q!", "名前 with spaces", "é" * 127 + "!"]  # the last is 255 bytes


@pytest.mark.parametrize("name", NAMES)
def test_any_utf8_name_works_end_to_end(broker: BrokerProcess, name: str) -> None:
    # Queues and exchanges have separate namespaces: both may carry the name.
    queue = exchange = name if len(name.encode()) == 255 else name + RUN
    with open_session(broker.url) as amqp:
        amqp.track_queue(queue)
        amqp.track_exchange(exchange)
        result = amqp.channel.queue_declare(queue).method
        assert (result.queue, result.message_count, result.consumer_count) == (queue, 0, 0)
        amqp.channel.exchange_declare(exchange, "direct")
        amqp.channel.queue_bind(queue, exchange, name)
        amqp.channel.basic_publish(exchange, name, b"routed")
        consumer = Consumer(amqp.channel, queue, auto_ack=True)
        [delivery] = consumer.wait_for(1)
        assert (delivery.body, delivery.exchange, delivery.routing_key) == (b"routed", exchange, name)
        consumer.cancel()
        amqp.channel.queue_unbind(queue, exchange, name)
        assert amqp.channel.queue_declare(queue, passive=True).method.queue == queue
        assert amqp.channel.queue_delete(queue).method.message_count == 0
        amqp.channel.exchange_delete(exchange)
        assert passive_reply_code(amqp.connection, "queue", queue) == 404


def test_a_durable_queue_with_a_utf8_name_survives_a_restart(fresh_broker: BrokerProcess) -> None:
    name = "durable-été*!"
    with open_session(fresh_broker.url) as amqp:
        amqp.channel.queue_declare(name, durable=True)
        amqp.channel.basic_publish("", name, b"kept", BasicProperties(delivery_mode=2))
        round_trip(amqp.channel)
    fresh_broker.restart()
    with open_session(fresh_broker.url) as amqp:
        assert declare_ok(amqp.channel, name) == (1, 0)
        message = get_message(amqp.channel, name, auto_ack=True)
        assert message is not None and message.body == b"kept"


@pytest.mark.parametrize("class_id, method_id", [(50, 10), (40, 10)], ids=["queue.declare", "exchange.declare"])
def test_invalid_utf8_in_a_name_closes_only_the_channel(broker: BrokerProcess, class_id: int, method_id: int) -> None:
    name = b"bad-\xff\xfe"
    # ticket, name, then for exchange.declare an empty type; the flags; no arguments.
    kind = b"\x00" if class_id == 40 else b""
    payload = struct.pack(">HHH", class_id, method_id, 0) + bytes((len(name),)) + name + kind + b"\x00" + bytes(4)
    with open_session(broker.url) as amqp, RawClient(broker.port) as raw:
        channel = raw.open_channel()
        raw.send_bytes(encode_frame(FRAME_METHOD, channel, payload))
        close = raw.expect(channel, commands.Channel.Close)
        assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - invalid UTF-8 in a name or key")
        assert (close.class_id, close.method_id) == (class_id, method_id)
        raw.open_channel(channel + 1)  # the connection goes on
        assert passive_reply_code(amqp.connection, "queue", "bad-\ufffd\ufffd") == 404


@pytest.mark.parametrize("bad_field", ["exchange", "routing-key"])
def test_invalid_utf8_in_a_publish_closes_only_the_channel(broker: BrokerProcess, bad_field: str) -> None:
    bad, good = b"bad-\xff\xfe", b"q"
    exchange, routing_key = (bad, good) if bad_field == "exchange" else (b"", bad)
    payload = struct.pack(">HHH", 60, 40, 0) + bytes((len(exchange),)) + exchange
    payload += bytes((len(routing_key),)) + routing_key + b"\x00"
    header = struct.pack(">HHQ", 60, 0, 2) + commands.Basic.Properties().marshal()
    with RawClient(broker.port) as raw:
        channel = raw.open_channel()
        # Method, header and body in one write: the fast path hands it to the ordinary one.
        raw.send_bytes(
            encode_frame(FRAME_METHOD, channel, payload)
            + encode_frame(FRAME_HEADER, channel, header)
            + encode_frame(FRAME_BODY, channel, b"hi")
        )
        close = raw.expect(channel, commands.Channel.Close)
        assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - invalid UTF-8 in a name or key")
        assert (close.class_id, close.method_id) == (60, 40)
        raw.open_channel(channel + 1)  # the connection goes on
