"""Shovels and federation between Lavin and a real RabbitMQ node (3.10, Debian's, with its
shovel and federation plugins): Lavin's links against RabbitMQ, RabbitMQ's own shovel into
Lavin, and RabbitMQ's definitions export imported into Lavin unchanged. Every message is
counted on both sides."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pika
import requests
from broker_process import BrokerProcess
from helpers import connect, unique_name
from test_federation import add_upstream, bound_queue, declare_topic, federate, get_all, wait_running
from test_shovels import AUTH, count, declare, drain, publish, put_shovel, wait_state

if TYPE_CHECKING:
    from rabbitmq_node import RabbitNode

pytest_plugins = ["rabbitmq_node"]  # its rabbitmq_node fixture; imported only here, so pytest rewrites its asserts
COUNT = 300
QUIET = 1.0  # seconds to wait for a message that must not come


def numbered(prefix: str, total: int = COUNT) -> list[bytes]:
    return [f"{prefix}{number}".encode() for number in range(total)]


def bodies(received: list[Any]) -> list[bytes]:
    return [body for _, body in received]


def wait_empty(broker: BrokerProcess | RabbitNode, queue: str, timeout: float = 15) -> None:
    """The source settles a message after the destination confirmed it: give the acks time."""
    deadline = time.monotonic() + timeout
    while (left := count(broker, queue)) != 0:
        assert time.monotonic() < deadline, f"{left} messages still in {queue}"
        time.sleep(0.1)


def test_lavin_shovel_pulls_from_rabbitmq(rabbitmq_node: RabbitNode, fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("from-rabbit"), unique_name("into-lavin")
    publish(rabbitmq_node, source, COUNT)
    value = {"src-uri": rabbitmq_node.url, "src-queue": source, "dest-uri": "amqp://", "dest-queue": destination,
             "ack-mode": "on-confirm", "dest-add-forward-headers": True}  # fmt: skip
    assert put_shovel(fresh_broker, "pull", value).status_code in (201, 204)
    row = wait_state(fresh_broker, "pull", "running")
    assert "guest:guest" not in row["src_uri"]
    received = drain(fresh_broker, destination, COUNT)
    assert bodies(received) == numbered("m")
    (hop,) = received[0][0].headers["x-shovelled"]
    assert hop["shovel-name"] == "pull" and hop["src-queue"] == source
    wait_empty(rabbitmq_node, source)
    assert drain(fresh_broker, destination, 1, timeout=QUIET) == []


def test_lavin_shovel_pushes_into_rabbitmq_on_confirm(rabbitmq_node: RabbitNode, fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("from-lavin"), unique_name("into-rabbit")
    declare(rabbitmq_node, destination)
    publish(fresh_broker, source, COUNT)
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": rabbitmq_node.url, "dest-queue": destination,
             "ack-mode": "on-confirm"}  # fmt: skip
    assert put_shovel(fresh_broker, "push", value).status_code in (201, 204)
    assert bodies(drain(rabbitmq_node, destination, COUNT)) == numbered("m")
    wait_empty(fresh_broker, source)
    assert wait_state(fresh_broker, "push", "running")["state"] == "running"
    assert drain(rabbitmq_node, destination, 1, timeout=QUIET) == []


def test_rabbitmq_dynamic_shovel_delivers_into_lavin(rabbitmq_node: RabbitNode, fresh_broker: BrokerProcess) -> None:
    source, destination, name = unique_name("rabbit-src"), unique_name("lavin-dest"), unique_name("to-lavin")
    declare(rabbitmq_node, source)
    value = {"src-protocol": "amqp091", "src-uri": "amqp://", "src-queue": source,
             "dest-protocol": "amqp091", "dest-uri": fresh_broker.url, "dest-queue": destination,
             "ack-mode": "on-confirm", "dest-add-forward-headers": True}  # fmt: skip
    rabbitmq_node.ctl("set_parameter", "shovel", name, json.dumps(value))
    try:
        rabbitmq_node.wait_shovel_running(name)
        publish(rabbitmq_node, source, COUNT, declare=False)
        received = drain(fresh_broker, destination, COUNT)
        assert bodies(received) == numbered("m")
        (hop,) = received[0][0].headers["x-shovelled"]
        assert hop["shovel-name"] == name and hop["shovel-type"] == "dynamic"
        wait_empty(rabbitmq_node, source)
        assert drain(fresh_broker, destination, 1, timeout=QUIET) == []
    finally:
        rabbitmq_node.ctl("clear_parameter", "shovel", name)


def test_exchange_federation_from_rabbitmq_follows_lavin_bindings(
    rabbitmq_node: RabbitNode, fresh_broker: BrokerProcess
) -> None:
    exchange = unique_name("fed.x")
    declare_topic(rabbitmq_node, exchange)
    declare_topic(fresh_broker, exchange)
    europe = bound_queue(fresh_broker, exchange, "eu.#")
    add_upstream(fresh_broker, "rabbit", {"uri": rabbitmq_node.url})
    federate(fresh_broker, f"^{exchange}$", "exchanges", {"federation-upstream": "rabbit"})
    (row,) = wait_running(fresh_broker)
    assert row["type"] == "exchange" and row["upstream_exchange"] == exchange
    time.sleep(0.5)  # the upstream queue's bindings follow the link's start
    keys = [f"{region}.{number}" for number in range(COUNT // 3) for region in ("eu", "us", "eu")]
    publish_keys(rabbitmq_node, exchange, keys)
    received = get_all(fresh_broker, europe, len(keys) * 2 // 3)
    assert bodies(received) == [key.encode() for key in keys if key.startswith("eu.")]
    (hop,) = received[0][0].headers["x-received-from"]
    assert hop["exchange"] == exchange and hop["redelivered"] is False and "guest:guest" not in hop["uri"]
    assert get_all(fresh_broker, europe, 1, timeout=QUIET) == []
    america = bound_queue(fresh_broker, exchange, "us.#")
    time.sleep(0.5)
    publish_keys(rabbitmq_node, exchange, ["us.late", "asia.late"])
    assert bodies(get_all(fresh_broker, america, 1)) == [b"us.late"]
    assert get_all(fresh_broker, america, 1, timeout=QUIET) == []


def publish_keys(node: RabbitNode, exchange: str, keys: list[str]) -> None:
    """Each key published as its own body, with confirms."""
    connection = node.connect()
    channel = connection.channel()
    channel.confirm_delivery()
    for key in keys:
        channel.basic_publish(exchange, key, key.encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()


def test_queue_federation_from_rabbitmq_moves_to_lavin_consumers(
    rabbitmq_node: RabbitNode, fresh_broker: BrokerProcess
) -> None:
    queue = unique_name("fed.q")
    with rabbitmq_node.connect() as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, "amq.topic", "order.#")
    keys = [f"order.{number}" for number in range(COUNT)]
    publish_keys(rabbitmq_node, "amq.topic", keys)
    add_upstream(fresh_broker, "rabbit", {"uri": rabbitmq_node.url})
    federate(fresh_broker, f"^{queue}$", "queues", {"federation-upstream": "rabbit"})
    connection = connect(fresh_broker.url)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    (row,) = wait_running(fresh_broker)
    assert row["type"] == "queue" and row["upstream_queue"] == queue
    received: list[bytes] = []

    def take(channel: Any, method: Any, properties: Any, body: bytes) -> None:
        headers = properties.headers
        (hop,) = headers["x-received-from"]
        assert hop["queue"] == queue and "guest:guest" not in hop["uri"]
        assert (headers["x-original-exchange"], headers["x-original-routing-key"]) == ("amq.topic", body.decode())
        received.append(body)
        channel.basic_ack(method.delivery_tag)

    channel.basic_qos(prefetch_count=50)
    channel.basic_consume(queue, take)
    deadline = time.monotonic() + 30
    while len(received) < COUNT and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    connection.process_data_events(time_limit=QUIET)
    connection.close()
    assert sorted(received) == sorted(key.encode() for key in keys) and len(received) == COUNT
    wait_empty(rabbitmq_node, queue)


def test_rabbitmq_definitions_with_shovels_and_upstreams_import_unchanged(
    rabbitmq_node: RabbitNode, fresh_broker: BrokerProcess
) -> None:
    source, destination = unique_name("exported-src"), unique_name("exported-dest")
    shovel, upstream = unique_name("exported-shovel"), unique_name("exported-upstream")
    declare(rabbitmq_node, source)
    shovel_value = {"src-protocol": "amqp091", "src-uri": rabbitmq_node.url, "src-queue": source,
                    "dest-protocol": "amqp091", "dest-uri": "amqp://", "dest-queue": destination,
                    "ack-mode": "on-confirm", "src-delete-after": "never"}  # fmt: skip
    upstream_value = {"uri": rabbitmq_node.url, "expires": 3600000, "max-hops": 1, "ack-mode": "on-confirm"}
    rabbitmq_node.ctl("set_parameter", "federation-upstream", upstream, json.dumps(upstream_value))
    rabbitmq_node.ctl("set_parameter", "shovel", shovel, json.dumps(shovel_value))
    try:
        exported = rabbitmq_node.definitions()
    finally:  # from here on only Lavin runs the shovel, as after a migration
        rabbitmq_node.ctl("clear_parameter", "shovel", shovel)
        rabbitmq_node.ctl("clear_parameter", "federation-upstream", upstream)
    components = {(item["component"], item["name"]) for item in exported["parameters"]}
    assert {("shovel", shovel), ("federation-upstream", upstream)} <= components
    response = requests.post(f"{fresh_broker.http_url}/api/definitions", json=exported, auth=AUTH, timeout=30)
    assert response.status_code in (200, 201, 204), response.text
    upstreams = requests.get(f"{fresh_broker.http_url}/api/parameters/federation-upstream", auth=AUTH, timeout=10)
    assert [row["value"] for row in upstreams.json() if row["name"] == upstream] == [upstream_value]
    wait_state(fresh_broker, shovel, "running")
    publish(rabbitmq_node, source, COUNT, declare=False)
    assert bodies(drain(fresh_broker, destination, COUNT)) == numbered("m")
    wait_empty(rabbitmq_node, source)
    assert drain(fresh_broker, destination, 1, timeout=QUIET) == []
    assert "Traceback" not in fresh_broker.output
