"""The `amqp`/`amqps` shovel endpoints and their asyncio client, against real brokers.

Each test drives the endpoints as the shovel engine would (open, iterate, send, settle,
close) inside `asyncio.run`, and checks what arrived with pika.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pika
import pytest
from broker_process import BrokerProcess
from helpers import Session, drain, get_messages, message_count, numbered, open_session, publish_all, unique_name
from lavin.api import (
    AckMode,
    EncodedProperties,
    EndpointFailure,
    EndpointSettings,
    InvalidEndpoint,
    LocalBroker,
    ShovelMessage,
)
from lavin.plugins.federation import amqp_client
from lavin.plugins.federation.amqp_endpoints import AmqpDestination, AmqpSource, AmqpsSource
from lavin.plugins.federation.amqp_uri import parse_uri
from tls_certs import write_tls_files

T = TypeVar("T")
PROMPTLY = 5.0  # seconds: a failure must be noticed well within this


class TcpLocalBroker(LocalBroker):
    """ "This broker" for URIs with no host: a plain connection to the test broker's port."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def open_connection(self, vhost: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


def settings(
    uri: str, definition: Mapping[str, Any], ack_mode: AckMode = AckMode.ON_CONFIRM, port: int = 0
) -> EndpointSettings:
    return EndpointSettings(
        uri=uri,
        definition=definition,
        vhost="/",
        link_name="test-shovel",
        ack_mode=ack_mode,
        local=TcpLocalBroker(port),
    )


def run(coroutine: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(60):
            return await coroutine()

    return asyncio.run(bounded())


async def shovel(source: AmqpSource, destination: AmqpDestination) -> int:
    """Move messages until the source ends, settling each once the destination confirmed it."""
    moved = 0
    pending: list[asyncio.Future[None]] = []
    async for message, settle in source.messages():
        confirmed = await destination.send(message)
        confirmed.add_done_callback(lambda future, settle=settle: settle(future.exception() is None))
        pending.append(confirmed)
        moved += 1
    await asyncio.gather(*pending)
    return moved


@pytest.fixture
def session(broker: BrokerProcess) -> Any:
    with open_session(broker.url) as opened:
        yield opened


def test_a_queue_is_moved_to_another_in_order_with_confirms(broker: BrokerProcess, session: Session) -> None:
    source_queue, dest_queue = session.declare_queue("src"), session.track_queue(unique_name("dest"))
    payloads = numbered("m", 1000)
    publish_all(session.channel, source_queue, payloads)
    definition = {
        "src-queue": source_queue,
        "src-delete-after": "queue-length",
        "src-prefetch-count": 100,
        "dest-queue": dest_queue,
    }

    async def scenario() -> tuple[int, float]:
        source, destination = (
            AmqpSource(settings(broker.url, definition)),
            AmqpDestination(settings(broker.url, definition)),
        )
        await source.open()
        await destination.open()
        started = time.monotonic()
        moved = await shovel(source, destination)
        elapsed = time.monotonic() - started
        await source.close()
        await destination.close()
        return moved, elapsed

    moved, elapsed = run(scenario)
    print(f"moved {moved} messages in {elapsed:.3f}s ({moved / elapsed:.0f} msg/s)")
    assert moved == 1000
    assert [message.body for message in drain(session.channel, dest_queue)] == payloads  # declared, in order
    assert message_count(session.channel, source_queue) == 0


def test_the_local_broker_serves_a_uri_with_no_host(broker: BrokerProcess, session: Session) -> None:
    source_queue, dest_queue = session.declare_queue("src"), session.declare_queue("dest")
    publish_all(session.channel, source_queue, [b"one", b"two"])
    definition = {"src-queue": source_queue, "src-delete-after": 2, "dest-queue": dest_queue}

    async def scenario() -> int:
        source = AmqpSource(settings("amqp://", definition, port=broker.port))
        destination = AmqpDestination(settings("amqp:///%2F", definition, port=broker.port))
        await source.open()
        await destination.open()
        moved = await shovel(source, destination)
        await source.close()
        await destination.close()
        return moved

    assert run(scenario) == 2
    assert [message.body for message in drain(session.channel, dest_queue)] == [b"one", b"two"]


def test_unsettled_messages_come_again_after_close_and_open(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("src")
    publish_all(session.channel, queue, numbered("m", 10))
    definition = {"src-queue": queue, "src-prefetch-count": 5}

    async def first_bodies() -> list[tuple[bytes, bool]]:
        source = AmqpSource(settings(broker.url, definition))
        await source.open()
        taken = []
        async for message, _settle in source.messages():
            taken.append((message.body, message.redelivered))
            if len(taken) == 3:
                break
        await source.close()
        return taken

    assert run(first_bodies) == [(b"m-1", False), (b"m-2", False), (b"m-3", False)]
    assert run(first_bodies) == [(b"m-1", True), (b"m-2", True), (b"m-3", True)]


def test_settle_false_returns_the_message_to_the_source(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("src")
    publish_all(session.channel, queue, [b"only"])
    definition = {"src-queue": queue, "src-prefetch-count": 1}

    async def scenario() -> list[tuple[bytes, bool]]:
        source = AmqpSource(settings(broker.url, definition))
        await source.open()
        seen = []
        async for message, settle in source.messages():
            seen.append((message.body, message.redelivered))
            settle(len(seen) == 2)  # refused the first time, taken the second
            if len(seen) == 2:
                break
        await source.close()
        return seen

    assert run(scenario) == [(b"only", False), (b"only", True)]
    assert message_count(session.channel, queue) == 0


def test_a_nack_fails_the_send_future(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    definition = {"src-queue": "unused", "dest-queue": queue}

    async def scenario() -> str:
        destination = AmqpDestination(settings(broker.url, definition))
        await destination.open()
        confirmed = await destination.send(ShovelMessage(body=b"refused"))
        with pytest.raises(EndpointFailure) as failure:
            await confirmed
        await destination.close()
        return str(failure.value)

    assert "nack" in run(scenario)


def test_properties_that_cannot_be_encoded_fail_the_send(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("dest")

    async def scenario() -> str:
        destination = AmqpDestination(settings(broker.url, {"dest-queue": queue}))
        await destination.open()
        try:
            with pytest.raises(EndpointFailure) as failure:
                await destination.send(ShovelMessage(body=b"x", properties={"priority": "high"}))
        finally:
            await destination.close()
        return str(failure.value)

    assert run(scenario).startswith("the message's properties cannot be encoded")


def test_wrong_credentials_fail_with_the_brokers_403(broker: BrokerProcess) -> None:
    uri = f"amqp://guest:wrong@127.0.0.1:{broker.port}/%2F"

    async def scenario() -> str:
        source = AmqpSource(settings(uri, {"src-queue": "q"}))
        try:
            with pytest.raises(EndpointFailure) as failure:
                await source.open()
        finally:
            await source.close()
        return str(failure.value)

    assert run(scenario).startswith("403 ACCESS_REFUSED")


def test_a_missing_predeclared_source_queue_fails_and_a_missing_queue_is_declared(
    broker: BrokerProcess, session: Session
) -> None:
    queue = session.track_queue(unique_name("missing"))

    async def open_source(definition: Mapping[str, Any]) -> None:
        source = AmqpSource(settings(broker.url, definition))
        try:
            await source.open()
        finally:
            await source.close()

    with pytest.raises(EndpointFailure, match=r"^404 NOT_FOUND"):
        run(lambda: open_source({"src-queue": queue, "src-predeclared": True}))
    run(lambda: open_source({"src-queue": queue}))
    assert message_count(session.channel, queue) == 0  # declared, as RabbitMQ's shovel does


def test_a_killed_broker_fails_the_source_and_the_destination_promptly(fresh_broker: BrokerProcess) -> None:
    queue = unique_name("src")  # the source declares it
    definition = {"src-queue": queue, "dest-queue": queue}

    async def scenario() -> tuple[float, str]:
        source, destination = (
            AmqpSource(settings(fresh_broker.url, definition)),
            AmqpDestination(settings(fresh_broker.url, definition)),
        )
        await source.open()
        await destination.open()

        async def first() -> None:
            async for _ in source.messages():
                pass

        waiting = asyncio.create_task(first())
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await asyncio.to_thread(fresh_broker.kill)
        with pytest.raises(EndpointFailure):
            await asyncio.wait_for(waiting, PROMPTLY)
        elapsed = time.monotonic() - started
        with pytest.raises(EndpointFailure) as failure:
            await asyncio.wait_for(destination.send(ShovelMessage(body=b"late")), PROMPTLY)
        await source.close()
        await destination.close()
        return elapsed, str(failure.value)

    elapsed, text = run(scenario)
    assert elapsed < PROMPTLY
    assert "connection lost" in text


def test_delete_after_a_number_ends_after_that_many_are_settled(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("src")
    publish_all(session.channel, queue, numbered("m", 5))
    definition = {"src-queue": queue, "src-delete-after": 3}

    async def scenario() -> list[bytes]:
        source = AmqpSource(settings(broker.url, definition))
        await source.open()
        taken, settles = [], []
        iterator = source.messages()
        async for message, settle in iterator:
            taken.append(message.body)
            settles.append(settle)
            if len(taken) == 3:
                break
        ending = asyncio.ensure_future(anext(iterator, None))
        await asyncio.sleep(0.1)
        assert not ending.done()  # the last one is not settled yet
        for settle in settles:
            settle(True)
        assert await ending is None
        await source.close()
        return taken

    assert run(scenario) == [b"m-1", b"m-2", b"m-3"]
    assert [message.body for message in get_messages(session.channel, queue, 2)] == [b"m-4", b"m-5"]


def test_delete_after_queue_length_counts_the_queue_at_start(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("src")
    publish_all(session.channel, queue, numbered("m", 4))
    definition = {"src-queue": queue, "src-delete-after": "queue-length", "src-prefetch-count": 2}

    async def scenario() -> list[bytes]:
        source = AmqpSource(settings(broker.url, definition))
        await source.open()
        publish_all(session.channel, queue, [b"later"])  # after the count was taken
        taken = []
        async for message, settle in source.messages():
            taken.append(message.body)
            settle(True)
        await source.close()
        return taken

    assert run(scenario) == numbered("m", 4)
    assert [message.body for message in drain(session.channel, queue)] == [b"later"]


def test_an_exchange_source_and_forward_and_timestamp_headers(broker: BrokerProcess, session: Session) -> None:
    exchange = session.declare_exchange("topic")
    dest_queue = session.declare_queue("dest")
    password_uri = broker.url
    definition = {
        "src-uri": password_uri,
        "src-exchange": exchange,
        "src-exchange-key": "orders.#",
        "src-delete-after": 1,
        "dest-queue": dest_queue,
        "dest-add-forward-headers": True,
        "dest-add-timestamp-header": True,
        "dest-publish-properties": {"app_id": "shovelled"},
    }

    async def scenario() -> None:
        source, destination = (
            AmqpSource(settings(broker.url, definition)),
            AmqpDestination(settings(broker.url, definition)),
        )
        await source.open()
        await destination.open()
        publish_all(session.channel, "orders.new", [b"order"], exchange=exchange)
        publish_all(session.channel, "other", [b"not bound"], exchange=exchange)
        assert await shovel(source, destination) == 1
        await source.close()
        await destination.close()

    before = int(time.time())
    run(scenario)
    [moved] = drain(session.channel, dest_queue)
    headers = moved.properties.headers
    assert moved.body == b"order" and moved.properties.app_id == "shovelled"
    [forwarded] = headers["x-shovelled"]
    assert forwarded["shovel-type"] == "dynamic"
    assert forwarded["shovel-name"] == "test-shovel"
    assert forwarded["shovel-vhost"] == "/"
    assert forwarded["src-exchange"] == exchange and forwarded["src-exchange-key"] == "orders.#"
    assert forwarded["dest-queue"] == dest_queue
    assert forwarded["src-uri"] == forwarded["dest-uri"] == f"amqp://guest@127.0.0.1:{broker.port}/%2F"
    assert before <= headers["x-shovelled-timestamp"] <= time.time() + 1


def test_a_body_larger_than_frame_max_moves_whole(broker: BrokerProcess, session: Session) -> None:
    source_queue, dest_queue = session.declare_queue("src"), session.declare_queue("dest")
    body = bytes(range(256)) * 2000  # 512,000 bytes: several frames each way
    publish_all(session.channel, source_queue, [body])
    definition = {"src-queue": source_queue, "src-delete-after": 1, "dest-queue": dest_queue}

    async def scenario() -> None:
        source, destination = (
            AmqpSource(settings(broker.url, definition)),
            AmqpDestination(settings(broker.url, definition)),
        )
        await source.open()
        await destination.open()
        await shovel(source, destination)
        await source.close()
        await destination.close()

    run(scenario)
    assert [message.body for message in drain(session.channel, dest_queue)] == [body]


def test_properties_headers_and_bodies_pass_through_unchanged(broker: BrokerProcess, session: Session) -> None:
    # The source keeps each message's encoded properties and the destination sends them on
    # as they came: every property, every kind of header value, bodies around frame_max
    # (131,072 here: a frame holds 131,064 body bytes) and names pamqp would refuse.
    source_queue = session.track_queue(unique_name("src-ü>"))
    dest_queue = session.track_queue(unique_name("dest-ключ>"))
    session.channel.queue_declare(source_queue)
    session.channel.queue_declare(dest_queue)
    headers = {
        "text": "ünïcode",
        "int": 7,
        "negative": -(2**40),
        "flag": True,
        "nested": {"list": [1, "two", {"three": 3}], "empty": {}},
        "when": datetime.datetime(2024, 5, 6, 7, 8, 9),
        "none": None,
    }
    properties = pika.BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers=headers,
        delivery_mode=2,
        priority=3,
        correlation_id="corr-1",
        reply_to="replies",
        expiration="60000",
        message_id="id-1",
        timestamp=1_700_000_000,
        type="kind",
        user_id="guest",
        app_id="app",
    )
    bodies = [b"", b"x", bytes(131_064), bytes(range(256)) * 512 + b"!", bytes(range(256)) * 1600]
    reference_queue = session.declare_queue("reference")  # what pika reads back unshovelled
    for queue in (source_queue, reference_queue):
        for body in bodies:
            session.channel.basic_publish("", queue, body, properties)
        session.channel.basic_publish("", queue, b"bare")
    definition = {"src-queue": source_queue, "src-delete-after": len(bodies) + 1, "dest-queue": dest_queue}

    async def scenario() -> None:
        source, destination = (
            AmqpSource(settings(broker.url, definition)),
            AmqpDestination(settings(broker.url, definition)),
        )
        await source.open()
        await destination.open()
        await shovel(source, destination)
        await source.close()
        await destination.close()

    run(scenario)
    moved, reference = drain(session.channel, dest_queue), drain(session.channel, reference_queue)
    assert [message.body for message in moved] == [*bodies, b"bare"]
    assert [vars(message.properties) for message in moved] == [vars(message.properties) for message in reference]
    assert moved[0].properties.headers["nested"] == headers["nested"]


def test_encoded_properties_hold_only_for_the_mapping_they_came_with() -> None:
    decoded = {"app_id": "a"}
    message = ShovelMessage(b"x", properties=decoded, encoded=EncodedProperties(decoded, b"raw"))
    assert message.raw_properties() == b"raw"
    changed = dataclasses.replace(message, properties={**decoded, "headers": {"x-received-from": []}})
    assert changed.raw_properties() is None
    assert ShovelMessage(b"x").raw_properties() is None


def test_sends_wait_while_max_unconfirmed_publishes_are_unconfirmed(
    broker: BrokerProcess, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(amqp_client, "MAX_UNCONFIRMED", 3)
    queue = session.declare_queue("dest")
    definition = {"src-queue": "unused", "dest-queue": queue}

    async def scenario() -> int:
        destination = AmqpDestination(settings(broker.url, definition))
        await destination.open()
        most = 0
        confirms = []
        for number in range(50):
            confirms.append(await destination.send(ShovelMessage(f"m-{number}".encode())))
            most = max(most, sum(not confirmed.done() for confirmed in confirms))
        await asyncio.gather(*confirms)
        await destination.close()
        return most

    assert 1 <= run(scenario) <= 3
    assert message_count(session.channel, queue) == 50


def test_acks_and_nacks_settled_out_of_order_in_one_turn(broker: BrokerProcess, session: Session) -> None:
    # Acks settled in one turn of the loop go as one multiple ack where they are
    # contiguous; a nack among them must neither be covered by it nor lost.
    queue = session.declare_queue("src")
    publish_all(session.channel, queue, numbered("m", 10))
    definition = {"src-queue": queue, "src-prefetch-count": 10}
    order = [(3, True), (1, True), (2, False), (5, True), (4, True), (6, True), (7, True), (8, False), (10, True)]

    async def scenario() -> None:
        source = AmqpSource(settings(broker.url, definition))
        await source.open()
        taken: dict[bytes, Callable[[bool], None]] = {}
        async for message, settle in source.messages():
            taken[message.body] = settle
            if len(taken) == 10:
                break
        for number, ok in order:
            taken[f"m-{number}".encode()](ok)
        await asyncio.sleep(0.2)
        taken[b"m-9"](True)  # alone, in a later turn
        await asyncio.sleep(0.2)
        await source.close()

    run(scenario)
    assert sorted(message.body for message in drain(session.channel, queue)) == [b"m-2", b"m-8"]


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ({}, "Must specify 'src-queue' or 'src-exchange'"),
        ({"src-queue": "a", "src-exchange": "b"}, "Cannot specify both 'src-queue' and 'src-exchange'"),
        ({"src-queue": "a", "src-prefetch-count": -1}, "src-prefetch-count should be a number"),
        ({"src-queue": "a", "src-prefetch-count": "many"}, "src-prefetch-count should be a number"),
        ({"src-queue": "a", "src-prefetch-count": 65536}, "src-prefetch-count should be a number between 0 and 65535"),
        ({"src-queue": "a", "src-delete-after": "sometimes"}, "src-delete-after should be a number"),
        ({"src-queue": "a", "src-delete-after": -2}, "src-delete-after should be a number"),
        ({"src-queue": 7}, "src-queue should be a string"),
    ],
)
def test_source_validation_refuses_bad_definitions(definition: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidEndpoint, match=f"^{reason}"):
        AmqpSource.validate("amqp://host/%2F", definition)


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("http://host/", "the scheme must be amqp or amqps"),
        ("amqp://host:notaport/", "Unable to parse URI"),
        ("amqp://host/a/b", "the vhost must be one path segment"),
        ("amqp://host/?heartbeat=soon", "heartbeat must be an integer"),
        ("amqps://host/?verify=maybe", "verify must be verify_peer or verify_none"),
        ("amqps://host/%2F", "the amqp endpoint cannot serve amqps:// URIs"),
    ],
)
def test_bad_uris_are_refused(uri: str, reason: str) -> None:
    with pytest.raises(InvalidEndpoint, match=reason):
        AmqpSource.validate(uri, {"src-queue": "q"})


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ({"dest-queue": "a", "dest-exchange": "b"}, "Cannot specify both 'dest-queue' and 'dest-exchange'"),
        ({"dest-publish-properties": {"delivery_mode": "two"}}, "dest-publish-properties cannot be encoded"),
        ({"dest-publish-properties": {"colour": "red"}}, "dest-publish-properties has unknown properties: colour"),
        ({"dest-publish-properties": []}, "dest-publish-properties should be an object"),
        ({"dest-queue-args": "x-max-length=1"}, "dest-queue-args should be an object"),
        ({"dest-add-forward-headers": "yes"}, "dest-add-forward-headers should be a boolean"),
    ],
)
def test_destination_validation_refuses_bad_definitions(definition: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidEndpoint, match=f"^{reason}"):
        AmqpDestination.validate("amqp://", definition)


def test_missing_queues_are_declared_with_their_arguments(broker: BrokerProcess, session: Session) -> None:
    queue = session.track_queue(unique_name("with-args"))
    definition = {"dest-queue": queue, "dest-queue-args": {"x-max-length": 1}}

    async def scenario() -> None:
        destination = AmqpDestination(settings(broker.url, definition))
        await destination.open()
        for body in (b"dropped", b"kept"):
            await (await destination.send(ShovelMessage(body=body)))
        await destination.close()

    run(scenario)
    assert [message.body for message in drain(session.channel, queue)] == [b"kept"]


def test_destination_details() -> None:
    definition = {"src-exchange": "x", "dest-exchange": "y", "dest-exchange-key": "k"}
    uri = "amqp://user:secret@example.com:5673/v%2Fh"
    assert AmqpSource(settings(uri, definition)).details() == {
        "src_uri": "amqp://user@example.com:5673/v%2Fh",
        "src_protocol": "amqp091",
        "src_exchange": "x",
        "src_exchange_key": "#",
    }
    assert AmqpSource(settings("amqp://", definition)).details()["src_uri"] == "amqp:///%2F"  # this broker
    assert AmqpDestination(settings(uri, definition)).details() == {
        "dest_uri": "amqp://user@example.com:5673/v%2Fh",
        "dest_protocol": "amqp091",
        "dest_exchange": "y",
        "dest_exchange_key": "k",
    }


def test_uri_defaults_follow_rabbitmq() -> None:
    plain, tls, local = parse_uri("amqp://h"), parse_uri("amqps://h/vh?heartbeat=5"), parse_uri("amqp://", "own")
    assert (plain.port, plain.vhost, plain.username, plain.heartbeat) == (5672, "/", "guest", 60)
    assert (tls.port, tls.vhost, tls.heartbeat) == (5671, "vh", 5)
    assert local.is_local and local.vhost == "own"


def test_amqps_through_a_real_tls_listener(tmp_path: Path, broker_factory: Any) -> None:
    (tmp_path / "tls").mkdir()
    files = write_tls_files(tmp_path / "tls")
    config = tmp_path / "lavin.ini"
    config.write_text(f"[main]\ntls_cert = {files.server.cert}\ntls_key = {files.server.key}\n")
    process = broker_factory(["--config", str(config), "--amqps-port", "0"])
    port = process.listeners["amqp/ssl"]
    with open_session(process.url) as session:
        queue = session.track_queue(unique_name("tls"))
        session.channel.queue_declare(queue, durable=True)  # a missing queue would be declared empty
        publish_all(session.channel, queue, [b"secret"])
        verified = f"amqps://guest:guest@127.0.0.1:{port}/%2F?cacertfile={files.ca}"
        unverified = f"amqps://guest:guest@127.0.0.1:{port}/%2F"

        async def take(uri: str) -> bytes:
            source = AmqpsSource(settings(uri, {"src-queue": queue, "src-delete-after": 1}))
            try:
                await source.open()
                async for message, settle in source.messages():
                    settle(True)
                    return message.body
            finally:
                await source.close()
            raise AssertionError("no message")

        with pytest.raises(EndpointFailure, match="CERTIFICATE_VERIFY_FAILED"):
            run(lambda: take(unverified))
        assert run(lambda: take(verified)) == b"secret"


def test_heartbeats_keep_an_idle_link_open(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("idle")
    uri = f"amqp://guest:guest@127.0.0.1:{broker.port}/%2F?heartbeat=1"

    async def scenario() -> bytes:
        source = AmqpSource(settings(uri, {"src-queue": queue, "src-delete-after": 1}))
        await source.open()
        await asyncio.sleep(3.5)  # several intervals with nothing but heartbeats either way
        publish_all(session.channel, queue, [b"after the silence"])
        try:
            async for message, settle in source.messages():
                settle(True)
                return message.body
        finally:
            await source.close()
        raise AssertionError("no message")

    assert run(scenario) == b"after the silence"


def test_deleting_the_source_queue_ends_the_source_with_a_failure(broker: BrokerProcess, session: Session) -> None:
    queue = session.declare_queue("doomed")
    publish_all(session.channel, queue, [b"first"])

    async def scenario() -> tuple[list[bytes], str]:
        source = AmqpSource(settings(broker.url, {"src-queue": queue}))
        await source.open()
        taken: list[bytes] = []
        with pytest.raises(EndpointFailure) as failure:
            async for message, settle in source.messages():
                taken.append(message.body)
                settle(True)
                await asyncio.to_thread(session.channel.queue_delete, queue)
        await source.close()
        return taken, str(failure.value)

    taken, text = run(scenario)
    assert taken == [b"first"]
    assert "cancelled the consumer" in text


def test_a_refused_connection_is_an_endpoint_failure(broker_factory: Any) -> None:
    process = broker_factory()
    port = process.port
    process.stop()

    async def scenario() -> str:
        destination = AmqpDestination(settings(f"amqp://127.0.0.1:{port}/%2F", {"dest-queue": "q"}))
        try:
            with pytest.raises(EndpointFailure) as failure:
                await destination.open()
        finally:
            await destination.close()
        return str(failure.value)

    assert run(scenario).startswith(f"cannot connect to amqp://guest@127.0.0.1:{port}/%2F")


def test_sends_wait_while_the_broker_blocks_publishers(broker_factory: Any, tmp_path: Path) -> None:
    ini = tmp_path / "blocked.ini"
    ini.write_text("[main]\nvm_memory_high_watermark.relative = 0\n")  # every publisher is blocked
    process = broker_factory(["--config", str(ini)])
    definition = {"dest-queue": unique_name("blocked")}

    async def scenario() -> None:
        destination = AmqpDestination(settings(process.url, definition))
        await destination.open()
        try:
            first = await destination.send(ShovelMessage(body=b"first"))  # read, then the broker blocks
            await asyncio.sleep(0.5)  # connection.blocked arrives
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(destination.send(ShovelMessage(body=b"second")), 1.0)
        finally:
            await destination.close()
        await asyncio.wait([first])
        first.exception()  # confirmed before the block, or failed by the close: either will do

    run(scenario)


def test_a_prefetch_of_zero_holds_the_broker_back_instead_of_buffering_everything(
    broker: BrokerProcess, session: Session
) -> None:
    queue = session.declare_queue("unlimited")
    publish_all(session.channel, queue, numbered("m", 1500))
    definition = {"src-queue": queue, "src-prefetch-count": 0, "src-delete-after": 1500}

    async def scenario() -> int:
        source = AmqpSource(settings(broker.url, definition))
        await source.open()
        taken = 0
        async for _message, settle in source.messages():
            if taken == 0:
                await asyncio.sleep(0.5)  # the broker sends all it has meanwhile
            settle(True)
            taken += 1
        await source.close()
        return taken

    assert run(scenario) == 1500
