"""A deleted user's connections are closed with 320 and RabbitMQ's text `user 'x' is
deleted`, whichever way the user is deleted (HTTP DELETE, bulk-delete, `lavin ctl`): its
consumers stop receiving at once. Other users' connections, and a user whose permissions
merely change, stay open."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pika
import pytest
import requests
from broker_process import BrokerProcess
from control_helpers import ctl_ok
from helpers import closes_channel, closes_connection, round_trip, unique_name, wait_until
from pika.adapters.blocking_connection import BlockingChannel

GUEST = ("guest", "guest")


def user_url(broker: BrokerProcess, name: str) -> str:
    return f"amqp://{name}:pw@{broker.host}:{broker.port}/%2F"


@pytest.fixture
def user(broker: BrokerProcess) -> Iterator[str]:
    """A user with full permissions on '/'; deleted afterwards if the test did not."""
    name = unique_name("doomed")
    ctl_ok(broker, "add_user", name, "pw")
    ctl_ok(broker, "set_permissions", name, ".*", ".*", ".*")
    yield name
    requests.delete(f"{broker.http_url}/api/users/{name}", auth=GUEST, timeout=10)


@pytest.fixture
def guest_channel(broker: BrokerProcess) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield connection.channel()
    if connection.is_open:
        connection.close()


def consume(broker: BrokerProcess, name: str, queue: str, received: list[bytes]) -> pika.BlockingConnection:
    """A connection of user `name` consuming `queue` into `received`."""
    connection = pika.BlockingConnection(pika.URLParameters(user_url(broker, name)))
    channel = connection.channel()
    channel.basic_consume(queue, lambda ch, method, _props, body: received.append(body), auto_ack=True)
    return connection


def delivered(connection: pika.BlockingConnection, received: list[bytes]) -> list[bytes]:
    connection.process_data_events(time_limit=0.1)
    return received


def by_http(broker: BrokerProcess, name: str) -> None:
    response = requests.delete(f"{broker.http_url}/api/users/{name}", auth=GUEST, timeout=10)
    assert response.status_code == 204


def by_bulk_delete(broker: BrokerProcess, name: str) -> None:
    url = f"{broker.http_url}/api/users/bulk-delete"
    response = requests.post(url, auth=GUEST, json={"users": [name]}, timeout=10)
    assert response.status_code == 204


def by_ctl(broker: BrokerProcess, name: str) -> None:
    ctl_ok(broker, "delete_user", name)


@pytest.mark.parametrize("delete", [by_http, by_bulk_delete, by_ctl], ids=["http", "bulk-delete", "ctl"])
def test_a_deleted_users_consumer_is_closed_with_320_and_stops_receiving(
    broker: BrokerProcess, user: str, guest_channel: BlockingChannel, delete: Callable[[BrokerProcess, str], None]
) -> None:
    queue = unique_name("inbox")
    guest_channel.queue_declare(queue)
    try:
        received: list[bytes] = []
        consumer = consume(broker, user, queue, received)
        guest_channel.basic_publish("", queue, b"before")
        wait_until(lambda: delivered(consumer, received) == [b"before"], "the consumer receives")

        delete(broker, user)

        with closes_connection(320, f"CONNECTION_FORCED - user '{user}' is deleted"):
            consumer.process_data_events(time_limit=10)
        guest_channel.basic_publish("", queue, b"after")
        assert guest_channel.queue_declare(queue, passive=True).method.message_count == 1
        assert guest_channel.connection.is_open
    finally:
        guest_channel.queue_delete(queue)


def test_the_reply_text_for_a_long_user_name_is_cut_to_fit_a_shortstr(broker: BrokerProcess) -> None:
    name = unique_name("long-" + "x" * 300)
    created = requests.put(
        f"{broker.http_url}/api/users/{name}", auth=GUEST, json={"password": "pw", "tags": ""}, timeout=10
    )
    assert created.status_code == 201
    ctl_ok(broker, "set_permissions", name, ".*", ".*", ".*")
    connection = pika.BlockingConnection(pika.URLParameters(user_url(broker, name)))
    by_http(broker, name)
    text = f"CONNECTION_FORCED - user '{name}' is deleted".encode()[:252].decode() + "..."
    with closes_connection(320, text):
        connection.process_data_events(time_limit=10)


def test_a_permission_change_or_another_users_deletion_leaves_the_connection_open(
    broker: BrokerProcess, user: str
) -> None:
    other = unique_name("other")
    ctl_ok(broker, "add_user", other, "pw")
    connection = pika.BlockingConnection(pika.URLParameters(user_url(broker, user)))
    try:
        ctl_ok(broker, "set_permissions", user, "", ".*", ".*")
        by_http(broker, other)
        connection.process_data_events(time_limit=0.5)
        # The new permissions apply (configure is gone) and the connection stays open.
        with closes_channel(403, "ACCESS_REFUSED - access to queue", exact=False):
            connection.channel().queue_declare("", exclusive=True)
        round_trip(connection.channel())
        assert connection.is_open
    finally:
        if connection.is_open:
            connection.close()
