"""Federation, Lavin to Lavin: upstreams and policies set through the management API as
RabbitMQ's are, two brokers started by the test, messages through pika."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest
import requests
from broker_process import BrokerFactory, BrokerProcess
from control_helpers import ctl_ok
from helpers import connect, unique_name

AUTH = ("guest", "guest")


def api_put(broker: BrokerProcess, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.put(f"{broker.http_url}/api/{path}", json=body, auth=AUTH, timeout=10)


def add_upstream(broker: BrokerProcess, name: str, value: dict[str, Any]) -> None:
    response = api_put(broker, f"parameters/federation-upstream/%2F/{quote(name, safe='')}", {"value": value})
    assert response.status_code in (201, 204), response.text


def federate(broker: BrokerProcess, pattern: str, apply_to: str, definition: dict[str, Any]) -> None:
    body = {"pattern": pattern, "apply-to": apply_to, "definition": definition, "priority": 1}
    response = api_put(broker, f"policies/%2F/{unique_name('federate')}", body)
    assert response.status_code in (201, 204), response.text


def links(broker: BrokerProcess) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = requests.get(f"{broker.http_url}/api/federation-links", auth=AUTH, timeout=10).json()
    return rows


def wait_running(broker: BrokerProcess, count: int = 1) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        rows = links(broker)
        if len(rows) == count and all(row["status"] == "running" for row in rows):
            return rows
        assert time.monotonic() < deadline, f"links never all running: {rows}"
        time.sleep(0.1)


def get_all(broker: BrokerProcess, queue: str, expected: int, timeout: float = 15) -> list[tuple[Any, bytes]]:
    connection = connect(broker.url)
    channel = connection.channel()
    received: list[tuple[Any, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(received) < expected and time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            connection.process_data_events(time_limit=0.05)
        else:
            received.append((properties, body))
    connection.close()
    return received


def publish(broker: BrokerProcess, exchange: str, keys: list[str]) -> None:
    connection = connect(broker.url)
    channel = connection.channel()
    channel.confirm_delivery()
    for key in keys:
        channel.basic_publish(exchange, key, key.encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()


@pytest.fixture
def pair(broker_factory: BrokerFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    yield broker_factory(), broker_factory()


def declare_topic(broker: BrokerProcess, exchange: str) -> None:
    connection = connect(broker.url)
    connection.channel().exchange_declare(exchange, "topic", durable=True)
    connection.close()


def bound_queue(broker: BrokerProcess, exchange: str, key: str) -> str:
    queue = unique_name("q")
    connection = connect(broker.url)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, key)
    connection.close()
    return queue


def test_exchange_federation_follows_downstream_bindings(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    upstream, downstream = pair
    exchange = "fed.orders"
    declare_topic(upstream, exchange)
    declare_topic(downstream, exchange)
    queue = bound_queue(downstream, exchange, "eu.#")
    add_upstream(downstream, "origin", {"uri": upstream.url})
    federate(downstream, r"^fed\.", "exchanges", {"federation-upstream-set": "all"})
    (row,) = wait_running(downstream)
    assert row["type"] == "exchange" and row["exchange"] == exchange and row["upstream"] == "origin"
    assert row["upstream_exchange"] == exchange and "guest:guest" not in row["uri"]
    time.sleep(0.5)  # the upstream queue's bindings follow the link's start
    publish(upstream, exchange, ["eu.new", "us.new", "eu.paid"])
    received = get_all(downstream, queue, 2)
    assert [body for _, body in received] == [b"eu.new", b"eu.paid"]
    (hop,) = received[0][0].headers["x-received-from"]
    assert hop["exchange"] == exchange and hop["redelivered"] is False and "guest:guest" not in hop["uri"]
    later = bound_queue(downstream, exchange, "us.#")
    time.sleep(0.5)
    publish(upstream, exchange, ["us.late"])
    assert [body for _, body in get_all(downstream, later, 1)] == [b"us.late"]
    assert get_all(downstream, queue, 1, timeout=0.5) == []
    assert upstream_keys(upstream, exchange) == {"eu.#", "us.#"}
    connection = connect(downstream.url)
    connection.channel().queue_unbind(queue, exchange, "eu.#")
    connection.close()
    deadline = time.monotonic() + 10
    while upstream_keys(upstream, exchange) != {"us.#"}:
        assert time.monotonic() < deadline, upstream_keys(upstream, exchange)
        time.sleep(0.1)


def upstream_keys(upstream: BrokerProcess, exchange: str) -> set[str]:
    """The keys the federation queue on the upstream is bound with, from its exchange."""
    url = f"{upstream.http_url}/api/exchanges/%2F/{exchange}/bindings/source"
    bindings = requests.get(url, auth=AUTH, timeout=10).json()
    return {b["routing_key"] for b in bindings if b["destination"].startswith(f"federation: {exchange} -> ")}


def test_max_hops_stops_a_cycle(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    first, second = pair
    exchange = "fed.ring"
    for broker, other in ((first, second), (second, first)):
        declare_topic(broker, exchange)
        add_upstream(broker, "peer", {"uri": other.url, "max-hops": 1})
        federate(broker, r"^fed\.ring$", "exchanges", {"federation-upstream": "peer"})
    queues = {broker.http_port: bound_queue(broker, exchange, "#") for broker in (first, second)}
    wait_running(first)
    wait_running(second)
    time.sleep(0.5)
    publish(first, exchange, ["once"])
    assert len(get_all(second, queues[second.http_port], 1)) == 1
    time.sleep(1)
    assert len(get_all(first, queues[first.http_port], 5, timeout=1)) == 1
    assert get_all(second, queues[second.http_port], 1, timeout=0.5) == []


def test_queue_federation_pulls_only_for_consumers(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    upstream, downstream = pair
    queue = unique_name("fq")
    connection = connect(upstream.url)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    for number in range(20):
        channel.basic_publish("", queue, str(number).encode())
    connection.close()
    add_upstream(downstream, "origin", {"uri": upstream.url})
    federate(downstream, f"^{queue}$", "queues", {"federation-upstream": "origin"})
    local = connect(downstream.url)
    local_channel = local.channel()
    local_channel.queue_declare(queue, durable=True)
    (row,) = wait_running(downstream)
    assert row["type"] == "queue" and row["queue"] == queue and row["upstream_queue"] == queue
    time.sleep(1)
    assert local_channel.queue_declare(queue, passive=True).method.message_count == 0
    local_channel.basic_qos(prefetch_count=5)
    received: list[bytes] = []

    def take(channel: Any, method: Any, _properties: Any, body: bytes) -> None:
        received.append(body)
        channel.basic_ack(method.delivery_tag)

    local_channel.basic_consume(queue, take)
    deadline = time.monotonic() + 15
    while len(received) < 20 and time.monotonic() < deadline:
        local.process_data_events(time_limit=0.1)
    local.close()
    assert sorted(received, key=int) == [str(n).encode() for n in range(20)]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"uri": "nosuch://x"}, "scheme 'nosuch'"),
        ({}, 'Key \\"uri\\" not found'),
        ({"uri": "amqp://", "prefetch-count": 0}, "prefetch-count should be an integer of at least 1"),
        ({"uri": "amqp://", "max-hops": "two"}, "max-hops should be an integer of at least 1"),
        ({"uri": "amqp://", "ack-mode": "sometimes"}, "ack-mode should be one of"),
    ],
)
def test_bad_upstream_is_a_400(broker: BrokerProcess, value: dict[str, Any], reason: str) -> None:
    name = unique_name("up")
    response = api_put(broker, f"parameters/federation-upstream/%2F/{name}", {"value": value})
    assert response.status_code == 400 and reason in response.text, response.text


def test_ctl_federation_status_and_definitions_round_trip(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    upstream, downstream = pair
    declare_topic(upstream, "fed.ctl")
    declare_topic(downstream, "fed.ctl")
    add_upstream(downstream, "origin", {"uri": upstream.url, "expires": 60000})
    api_put(downstream, "parameters/federation-upstream-set/%2F/both", {"value": [{"upstream": "origin"}]})
    federate(downstream, r"^fed\.ctl$", "exchanges", {"federation-upstream-set": "both"})
    wait_running(downstream)
    (row,) = json.loads(ctl_ok(downstream, "federation_status", "--formatter", "json"))
    assert row["exchange"] == "fed.ctl" and row["status"] == "running" and row["upstream"] == "origin"
    exported = requests.get(f"{downstream.http_url}/api/definitions", auth=AUTH, timeout=10).json()
    components = {(item["component"], item["name"]) for item in exported["parameters"]}
    assert {("federation-upstream", "origin"), ("federation-upstream-set", "both")} <= components
    downstream.restart()
    wait_running(downstream)
    assert "Traceback" not in downstream.output
