"""Dynamic shovels, Lavin to Lavin: set through the management API as RabbitMQ's are, run by
the broker, and seen in /api/shovels and `lavin ctl shovel_status`. Each test starts its own
brokers, publishes with pika and reads what arrived with pika."""

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
from helpers import connect, eventually, unique_name, wait_until

AUTH = ("guest", "guest")


def put_shovel(broker: BrokerProcess, name: str, value: dict[str, Any], vhost: str = "/") -> requests.Response:
    url = f"{broker.http_url}/api/parameters/shovel/{quote(vhost, safe='')}/{quote(name, safe='')}"
    return requests.put(url, json={"value": value}, auth=AUTH, timeout=10)


def shovel_status(broker: BrokerProcess, name: str) -> dict[str, Any]:
    rows = requests.get(f"{broker.http_url}/api/shovels", auth=AUTH, timeout=10).json()
    return next((row for row in rows if row["name"] == name), {})


def wait_state(broker: BrokerProcess, name: str, state: str, timeout: float = 15) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def reached() -> dict[str, Any] | None:
        seen.append(shovel_status(broker, name))
        return seen[-1] if seen[-1].get("state") == state else None

    deadline = time.monotonic() + timeout
    while (row := reached()) is None:
        assert time.monotonic() < deadline, f"shovel {name} never reached {state}: {seen[-1]}"
        time.sleep(0.1)
    return row


def publish(broker: BrokerProcess, queue: str, count: int, *, declare: bool = True, prefix: str = "m") -> None:
    connection = connect(broker.url)
    channel = connection.channel()
    if declare:
        channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    for number in range(count):
        channel.basic_publish("", queue, f"{prefix}{number}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()


def declare(broker: BrokerProcess, *queues: str) -> None:
    connection = connect(broker.url)
    channel = connection.channel()
    for queue in queues:
        channel.queue_declare(queue, durable=True)
    connection.close()


def drain(broker: BrokerProcess, queue: str, expected: int, timeout: float = 30) -> list[Any]:
    """Every message of `queue`, acked, once `expected` have arrived."""
    connection = connect(broker.url)
    channel = connection.channel()
    received: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(received) < expected and time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            connection.process_data_events(time_limit=0.05)
            continue
        received.append((properties, body))
    connection.close()
    return received


def count(broker: BrokerProcess, queue: str) -> int:
    connection = connect(broker.url)
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


@pytest.fixture
def two_brokers(broker_factory: BrokerFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    yield broker_factory(), broker_factory()


def test_local_shovel_moves_every_message_in_order(fresh_broker: BrokerProcess) -> None:
    # Names any broker takes, though pamqp's own checks would refuse them.
    source, destination = unique_name("src > é"), unique_name("dest*")
    publish(fresh_broker, source, 500)
    declare(fresh_broker, destination)
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://", "dest-queue": destination}
    assert put_shovel(fresh_broker, "local", value).status_code == 201
    received = drain(fresh_broker, destination, 500)
    assert [body for _, body in received] == [f"m{n}".encode() for n in range(500)]
    row = wait_state(fresh_broker, "local", "running")
    assert row["src_queue"] == source and row["dest_queue"] == destination
    assert row["type"] == "dynamic" and row["vhost"] == "/"
    assert count(fresh_broker, source) == 0


def test_shovel_between_brokers_on_confirm_with_credentials_hidden(
    two_brokers: tuple[BrokerProcess, BrokerProcess],
) -> None:
    upstream, downstream = two_brokers
    queue = unique_name("q")
    publish(upstream, queue, 300)
    declare(downstream, queue)
    value = {"src-uri": upstream.url, "src-queue": queue, "dest-uri": "amqp://", "dest-queue": queue}
    assert put_shovel(downstream, "pull", value).status_code == 201
    assert len(drain(downstream, queue, 300)) == 300
    row = wait_state(downstream, "pull", "running")
    assert "guest:guest" not in json.dumps(row) and row["src_uri"].startswith("amqp://guest@")
    assert eventually(lambda: count(upstream, queue) == 0 or None)


def test_source_exchange_with_key_gets_a_temporary_queue(fresh_broker: BrokerProcess) -> None:
    destination = unique_name("dest")
    declare(fresh_broker, destination)
    value = {
        "src-uri": "amqp://",
        "src-exchange": "amq.topic",
        "src-exchange-key": "orders.#",
        "dest-uri": "amqp://",
        "dest-queue": destination,
    }
    assert put_shovel(fresh_broker, "from-exchange", value).status_code == 201
    wait_state(fresh_broker, "from-exchange", "running")
    connection = connect(fresh_broker.url)
    channel = connection.channel()
    channel.confirm_delivery()
    for key in ("orders.new", "invoices.new", "orders.paid"):
        channel.basic_publish("amq.topic", key, key.encode())
    connection.close()
    assert [body for _, body in drain(fresh_broker, destination, 2)] == [b"orders.new", b"orders.paid"]


def test_delete_after_queue_length_moves_what_was_there_then_removes_itself(fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("src"), unique_name("dest")
    publish(fresh_broker, source, 50)
    declare(fresh_broker, destination)
    value = {
        "src-uri": "amqp://",
        "src-queue": source,
        "src-delete-after": "queue-length",
        "dest-uri": "amqp://",
        "dest-queue": destination,
    }
    assert put_shovel(fresh_broker, "once", value).status_code == 201
    wait_until(lambda: not shovel_status(fresh_broker, "once"), "the shovel to remove itself")
    params = requests.get(f"{fresh_broker.http_url}/api/parameters/shovel", auth=AUTH, timeout=10).json()
    assert params == []
    publish(fresh_broker, source, 5, declare=False, prefix="late")
    assert count(fresh_broker, destination) == 50 and count(fresh_broker, source) == 5


def test_changed_parameter_restarts_the_shovel_and_cleared_one_stops(fresh_broker: BrokerProcess) -> None:
    source, first, second = unique_name("src"), unique_name("first"), unique_name("second")
    declare(fresh_broker, source, first, second)
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://", "dest-queue": first}
    put_shovel(fresh_broker, "moving", value)
    wait_state(fresh_broker, "moving", "running")
    assert put_shovel(fresh_broker, "moving", {**value, "dest-queue": second}).status_code == 204
    eventually(lambda: shovel_status(fresh_broker, "moving").get("dest_queue") == second or None)
    publish(fresh_broker, source, 3, declare=False)
    assert len(drain(fresh_broker, second, 3)) == 3 and count(fresh_broker, first) == 0
    url = f"{fresh_broker.http_url}/api/parameters/shovel/%2F/moving"
    assert requests.delete(url, auth=AUTH, timeout=10).status_code == 204
    wait_until(lambda: not shovel_status(fresh_broker, "moving"), "the shovel to stop")
    publish(fresh_broker, source, 2, declare=False)
    time.sleep(0.5)
    assert count(fresh_broker, source) == 2


def test_pause_holds_messages_at_the_source_and_resume_moves_them(fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("src"), unique_name("dest")
    declare(fresh_broker, source, destination)
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://", "dest-queue": destination}
    put_shovel(fresh_broker, "held", value)
    wait_state(fresh_broker, "held", "running")
    base = f"{fresh_broker.http_url}/api/shovels/%2F/held"
    assert requests.put(f"{base}/pause", auth=AUTH, timeout=10).status_code == 204
    wait_state(fresh_broker, "held", "paused")
    publish(fresh_broker, source, 10, declare=False)
    time.sleep(0.5)
    assert count(fresh_broker, source) == 10
    assert requests.put(f"{base}/resume", auth=AUTH, timeout=10).status_code == 204
    assert len(drain(fresh_broker, destination, 10)) == 10
    restart = f"{fresh_broker.http_url}/api/shovels/vhost/%2F/held/restart"
    assert requests.delete(restart, auth=AUTH, timeout=10).status_code == 204
    wait_state(fresh_broker, "held", "running")
    missing = f"{fresh_broker.http_url}/api/shovels/vhost/%2F/nosuch/restart"
    assert requests.delete(missing, auth=AUTH, timeout=10).status_code == 404


def test_a_pause_is_kept_across_restarts_until_resumed_or_the_parameter_changes(fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("src"), unique_name("dest")
    declare(fresh_broker, source, destination)
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://", "dest-queue": destination}
    put_shovel(fresh_broker, "kept-paused", value)
    wait_state(fresh_broker, "kept-paused", "running")
    base = f"{fresh_broker.http_url}/api/shovels/%2F/kept-paused"
    assert requests.put(f"{base}/pause", auth=AUTH, timeout=10).status_code == 204
    fresh_broker.restart()
    wait_state(fresh_broker, "kept-paused", "paused")
    publish(fresh_broker, source, 4, declare=False)
    time.sleep(0.5)
    assert count(fresh_broker, source) == 4
    # The export stays RabbitMQ's: the pause is not in the parameter's value.
    exported = requests.get(f"{fresh_broker.http_url}/api/definitions", auth=AUTH, timeout=10).json()
    assert {"vhost": "/", "component": "shovel", "name": "kept-paused", "value": value} in exported["parameters"]

    assert requests.put(f"{base}/resume", auth=AUTH, timeout=10).status_code == 204
    assert len(drain(fresh_broker, destination, 4)) == 4
    fresh_broker.restart()
    wait_state(fresh_broker, "kept-paused", "running")

    requests.put(f"{base}/pause", auth=AUTH, timeout=10)
    put_shovel(fresh_broker, "kept-paused", {**value, "src-prefetch-count": 10})  # a new parameter runs
    wait_state(fresh_broker, "kept-paused", "running")
    fresh_broker.restart()
    wait_state(fresh_broker, "kept-paused", "running")
    assert "Traceback" not in fresh_broker.output


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"src-uri": "foo://x", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}, "scheme 'foo'"),
        ({"src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}, 'Key \\"src-uri\\" not found'),
        (
            {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b", "ack-mode": "maybe"},
            "ack-mode should be one of on-confirm, on-publish, no-ack",
        ),
        (
            {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b", "reconnect-delay": -1},
            "reconnect-delay should be a number",
        ),
        ({"src-uri": ["amqp://"], "src-queue": "a", "dest-uri": [], "dest-queue": "b"}, "dest-uri should be a URI"),
    ],
)
def test_bad_shovel_is_a_400_and_nothing_is_stored(broker: BrokerProcess, value: dict[str, Any], reason: str) -> None:
    name = unique_name("bad")
    response = put_shovel(broker, name, value)
    assert response.status_code == 400, response.text
    assert reason in response.text
    assert requests.get(f"{broker.http_url}/api/parameters/shovel/%2F/{name}", auth=AUTH, timeout=10).status_code == 404
    assert not shovel_status(broker, name)


def test_unreachable_or_refused_source_is_an_error_state_with_the_reason(
    two_brokers: tuple[BrokerProcess, BrokerProcess],
) -> None:
    upstream, downstream = two_brokers
    wrong = upstream.url.replace("guest:guest", "guest:wrong")
    value = {"src-uri": wrong, "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q", "reconnect-delay": 1}
    put_shovel(downstream, "refused", value)
    assert "403" in wait_state(downstream, "refused", "error")["reason"]
    missing = {**value, "src-uri": upstream.url, "src-queue": unique_name("nosuch"), "src-predeclared": True}
    put_shovel(downstream, "missing", missing)
    assert "404" in wait_state(downstream, "missing", "error")["reason"]
    assert "Traceback" not in downstream.output


def test_shovels_come_back_after_a_restart_and_round_trip_through_definitions(fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("src"), unique_name("dest")
    declare(fresh_broker, source, destination)
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://", "dest-queue": destination}
    put_shovel(fresh_broker, "kept", value)
    exported = requests.get(f"{fresh_broker.http_url}/api/definitions", auth=AUTH, timeout=10).json()
    assert {"vhost": "/", "component": "shovel", "name": "kept", "value": value} in exported["parameters"]
    fresh_broker.restart()
    wait_state(fresh_broker, "kept", "running")
    publish(fresh_broker, source, 5, declare=False)
    assert len(drain(fresh_broker, destination, 5)) == 5
    assert "Traceback" not in fresh_broker.output


def test_ctl_shovel_status_lists_the_shovel(fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("src"), unique_name("dest")
    declare(fresh_broker, source, destination)
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://", "dest-queue": destination}
    put_shovel(fresh_broker, "listed", value)
    wait_state(fresh_broker, "listed", "running")
    (row,) = json.loads(ctl_ok(fresh_broker, "shovel_status", "--formatter", "json"))
    assert row["name"] == "listed" and row["state"] == "running" and row["dest_uri"] == "amqp://"


def test_a_shovel_may_name_only_vhosts_its_setter_can_use(fresh_broker: BrokerProcess) -> None:
    base = fresh_broker.http_url
    for vhost in ("mine", "theirs"):
        assert requests.put(f"{base}/api/vhosts/{vhost}", auth=AUTH, timeout=10).status_code == 201
    body = {"password": "pw", "tags": "policymaker"}
    assert requests.put(f"{base}/api/users/maker", json=body, auth=AUTH, timeout=10).status_code == 201
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert requests.put(f"{base}/api/permissions/mine/maker", json=grant, auth=AUTH, timeout=10).status_code == 201
    value = {"src-uri": "amqp:///theirs", "src-queue": "secrets", "dest-uri": "amqp://", "dest-queue": "loot"}
    url = f"{base}/api/parameters/shovel/mine/steal"
    refused = requests.put(url, json={"value": value}, auth=("maker", "pw"), timeout=10)
    assert refused.status_code == 400 and "no access to vhost 'theirs'" in refused.text
    assert requests.get(url, auth=AUTH, timeout=10).status_code == 404
    allowed = {**value, "src-uri": "amqp:///mine"}
    assert requests.put(url, json={"value": allowed}, auth=("maker", "pw"), timeout=10).status_code == 201


def test_a_list_of_destination_uris_runs_on_one_of_them(fresh_broker: BrokerProcess) -> None:
    source, destination = unique_name("src"), unique_name("dest")
    declare(fresh_broker, source, destination)
    uris = ["amqp://", "amqp:///%2F", fresh_broker.url]
    value = {"src-uri": "amqp://", "src-queue": source, "dest-uri": uris, "dest-queue": destination}
    assert put_shovel(fresh_broker, "many", value).status_code == 201
    row = wait_state(fresh_broker, "many", "running")
    assert row["dest_uri"] in {"amqp://", "amqp:///%2F", fresh_broker.url.replace("guest:guest@", "guest@")}
    publish(fresh_broker, source, 5, declare=False)
    assert len(drain(fresh_broker, destination, 5)) == 5
    refused = put_shovel(fresh_broker, "bad-list", {**value, "dest-uri": ["amqp://", "gopher://x"]})
    assert refused.status_code == 400 and "scheme 'gopher'" in refused.text
