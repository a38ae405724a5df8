"""A broker as a team would run it away from localhost: bound to its own address, one
application user set up with `lavin ctl`, allowed on its own vhost and its own names only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from access_helpers import open_refusal
from broker_process import BrokerProcess
from control_helpers import ctl_ok, login
from helpers import closes_channel

APP_PATTERN = "^app\\."


class AddressedBroker(BrokerProcess):
    host = "127.0.0.2"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = AddressedBroker(Path(tmp_path_factory.mktemp("remote")) / "data")
    process.start()
    ctl_ok(process, "add_vhost", "prod")
    ctl_ok(process, "add_user", "app", "s3cret")
    ctl_ok(process, "set_permissions", "-p", "prod", "app", APP_PATTERN, APP_PATTERN, APP_PATTERN)
    ctl_ok(process, "set_permissions", "-p", "prod", "guest", ".*", ".*", ".*")
    admin = login(process, "guest", "guest", "prod")
    admin.channel().queue_declare("billing.ledger")
    admin.close()
    try:
        yield process
    finally:
        process.stop()


def refused(kind: str, name: str) -> str:
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost 'prod' refused for user 'app'"


def test_the_app_user_works_in_its_vhost(broker: BrokerProcess) -> None:
    connection = login(broker, "app", "s3cret", "prod")
    try:
        channel = connection.channel()
        channel.exchange_declare("app.events", "topic")
        channel.queue_declare("app.jobs", durable=True)
        channel.queue_bind("app.jobs", "app.events", "job.#")
        channel.confirm_delivery()
        channel.basic_publish("app.events", "job.new", b"work", pika.BasicProperties(delivery_mode=2))
        method, _, body = channel.basic_get("app.jobs", auto_ack=True)
        assert method is not None and body == b"work"
        channel.queue_delete("app.jobs")
        channel.exchange_delete("app.events")
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("operation", "kind", "name"),
    [
        ("declare a queue outside its names", "queue", "billing.jobs"),
        ("publish to an exchange outside its names", "exchange", "amq.direct"),
        ("publish to the default exchange", "exchange", "amq.default"),
        ("read a queue outside its names", "queue", "billing.ledger"),
    ],
)
def test_the_app_user_is_refused_outside_its_patterns(
    broker: BrokerProcess, operation: str, kind: str, name: str
) -> None:
    connection = login(broker, "app", "s3cret", "prod")
    try:
        channel = connection.channel()
        with closes_channel(403, refused(kind, name)):
            if operation.startswith("declare"):
                channel.queue_declare(name)
            elif operation.startswith("publish"):
                channel.confirm_delivery()
                channel.basic_publish("" if name == "amq.default" else name, "app.jobs", b"x")
            else:
                channel.basic_get(name)
    finally:
        if connection.is_open:
            connection.close()


def test_the_app_user_cannot_open_another_vhost(broker: BrokerProcess) -> None:
    url = f"amqp://app:s3cret@{broker.host}:{broker.port}/%2F"
    assert open_refusal(url) == (530, "NOT_ALLOWED - access to vhost '/' refused for user 'app'")


def test_a_wrong_password_is_refused_with_access_refused_only(broker: BrokerProcess) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        login(broker, "app", "wrong", "prod")
    assert "app" in broker.log_path.read_text(errors="replace")
