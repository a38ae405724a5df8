"""RabbitMQ's own `rabbitmqadmin` (Debian's rabbitmq-server package ships it) against Lavin's
management API: it lists, declares, publishes, gets, purges, closes, deletes, exports and
imports as it does against RabbitMQ."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess, hermetic_env
from control_helpers import login
from helpers import unique_name

RABBITMQADMIN = shutil.which("rabbitmqadmin")
pytestmark = pytest.mark.skipif(
    RABBITMQADMIN is None,
    reason="rabbitmqadmin is not installed: it ships in Debian's rabbitmq-server package, "
    "which `make test` installs when apt-get is there",
)


def admin(broker: BrokerProcess, *args: str, password: str = "guest") -> subprocess.CompletedProcess[str]:
    """rabbitmqadmin against the broker's management port, as an operator runs it."""
    assert RABBITMQADMIN is not None
    command = [RABBITMQADMIN, "--host", "127.0.0.1", "--port", str(broker.http_port),
               "-u", "guest", "-p", password, *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=30, env=hermetic_env())


def admin_ok(broker: BrokerProcess, *args: str) -> str:
    result = admin(broker, *args)
    assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout}{result.stderr}"
    return result.stdout


def admin_json(broker: BrokerProcess, *args: str) -> Any:
    return json.loads(admin_ok(broker, "-f", "raw_json", *args))


def test_list_vhosts_users_and_overview(broker: BrokerProcess) -> None:
    assert "/" in [vhost["name"] for vhost in admin_json(broker, "list", "vhosts")]
    guest = [user for user in admin_json(broker, "list", "users") if user["name"] == "guest"]
    assert guest and "administrator" in guest[0]["tags"]
    table = admin_ok(broker, "list", "vhosts").splitlines()  # the default table: name and messages
    assert table[1].split() == ["|", "name", "|", "messages", "|"]
    assert any(line.startswith("| / ") for line in table)
    overview = admin_json(broker, "show", "overview")
    assert {"rabbitmq_version", "queue_totals", "object_totals"} <= overview[0].keys()


def test_declare_publish_get_purge_and_delete(broker: BrokerProcess) -> None:
    queue, exchange = unique_name("admin-q"), unique_name("admin-ex")
    assert admin(broker, "declare", "queue", f"name={queue}", "durable=false").returncode == 0
    admin_ok(broker, "declare", "exchange", f"name={exchange}", "type=topic")
    admin_ok(broker, "declare", "binding", f"source={exchange}", f"destination={queue}", "routing_key=orders.*")
    with login(broker, "guest", "guest") as connection:
        channel = connection.channel()
        assert channel.queue_declare(queue, passive=True).method.message_count == 0
        channel.exchange_declare(exchange, "topic", passive=True)

    assert [queue] in [[q["name"]] for q in admin_json(broker, "list", "queues", "name")]
    assert {"name": exchange, "type": "topic"} in admin_json(broker, "list", "exchanges", "name", "type")
    bindings = admin_json(broker, "-V", "/", "list", "bindings", "source", "destination", "routing_key")
    assert {"source": exchange, "destination": queue, "routing_key": "orders.*"} in bindings

    out = admin_ok(broker, "publish", f"exchange={exchange}", "routing_key=orders.new", "payload=first")
    assert out == "Message published\n"
    admin_ok(broker, "publish", f"exchange={exchange}", "routing_key=orders.new", "payload=second")
    assert admin_ok(broker, "publish", f"exchange={exchange}", "routing_key=nowhere", "payload=x") == (
        "Message published but NOT routed\n"
    )
    listed = admin_json(broker, "list", "queues", "name", "messages")
    assert {"name": queue, "messages": 2} in listed
    got = admin_json(broker, "get", f"queue={queue}", "ackmode=ack_requeue_false")
    assert [(m["payload"], m["routing_key"], m["exchange"], m["message_count"]) for m in got] == [
        ("first", "orders.new", exchange, 1)
    ]
    table = admin_ok(broker, "get", f"queue={queue}")  # requeued: still there
    assert "second" in table
    assert admin_ok(broker, "purge", "queue", f"name={queue}") == "queue purged\n"
    assert {"name": queue, "messages": 0} in admin_json(broker, "list", "queues", "name", "messages")

    admin_ok(broker, "delete", "binding", f"source={exchange}", "destination_type=queue", f"destination={queue}",
             "properties_key=orders.*")  # fmt: skip
    assert not [b for b in admin_json(broker, "list", "bindings") if b["source"] == exchange]
    assert admin_ok(broker, "delete", "exchange", f"name={exchange}") == "exchange deleted\n"
    assert admin_ok(broker, "delete", "queue", f"name={queue}") == "queue deleted\n"
    with login(broker, "guest", "guest") as connection, pytest.raises(pika.exceptions.ChannelClosedByBroker):
        connection.channel().queue_declare(queue, passive=True)


def test_close_a_connection(broker: BrokerProcess) -> None:
    client_name = unique_name("admin-client")
    parameters = pika.ConnectionParameters(
        broker.host, broker.port, client_properties={"connection_name": client_name}, connection_attempts=1
    )
    connection = pika.BlockingConnection(parameters)
    try:
        connections = admin_json(broker, "list", "connections", "name", "client_properties")
        names = [c["name"] for c in connections if c["client_properties"].get("connection_name") == client_name]
        assert len(names) == 1
        assert admin_ok(broker, "close", "connection", f"name={names[0]}") == "connection closed\n"
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            connection.process_data_events(time_limit=5)
    finally:
        if connection.is_open:
            connection.close()


def test_errors_as_against_rabbitmq(broker: BrokerProcess) -> None:
    refused = admin(broker, "list", "queues", password="wrong")
    assert refused.returncode != 0
    assert "Access refused: /api/queues" in refused.stderr
    missing = admin(broker, "delete", "queue", "name=admin-no-such-queue")
    assert missing.returncode != 0
    assert "Not found: /api/queues/%2F/admin-no-such-queue" in missing.stderr


def test_export_then_import_into_another_broker(
    broker: BrokerProcess, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    queue, exchange = unique_name("admin-exported"), unique_name("admin-exported-ex")
    admin_ok(broker, "declare", "queue", f"name={queue}", 'arguments={"x-max-length": 5}')
    admin_ok(broker, "declare", "exchange", f"name={exchange}", "type=fanout")
    admin_ok(broker, "declare", "binding", f"source={exchange}", f"destination={queue}")
    exported = tmp_path / "definitions.json"
    admin_ok(broker, "export", str(exported))
    document = json.loads(exported.read_text())
    assert {"name": queue, "vhost": "/", "durable": True, "auto_delete": False,
            "arguments": {"x-max-length": 5}} in document["queues"]  # fmt: skip

    other = broker_factory()
    assert admin(other, "import", str(exported)).returncode == 0
    assert {"name": queue, "arguments": {"x-max-length": 5}} in admin_json(other, "list", "queues", "name", "arguments")
    assert {"source": exchange, "destination": queue} in admin_json(other, "list", "bindings", "source", "destination")


def test_users_vhosts_permissions_policies_and_limits(broker: BrokerProcess) -> None:
    vhost, user, policy = unique_name("admin-vhost"), unique_name("admin-user"), unique_name("admin-policy")
    admin_ok(broker, "declare", "vhost", f"name={vhost}")
    admin_ok(broker, "declare", "user", f"name={user}", "password=pw", "tags=monitoring")
    admin_ok(broker, "declare", "permission", f"vhost={vhost}", f"user={user}", "configure=.*", "write=.*", "read=.*")
    admin_ok(broker, "declare", "vhost_limit", f"vhost={vhost}", "name=max-queues", "value=3")
    definition = 'definition={"max-length": 5}'
    admin_ok(broker, "-V", vhost, "declare", "policy", f"name={policy}", "pattern=^jobs$", definition, "priority=2",
             "apply-to=queues")  # fmt: skip
    assert {"name": user, "tags": ["monitoring"]} in admin_json(broker, "list", "users", "name", "tags")
    assert {"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"} in admin_json(
        broker, "list", "permissions", "user", "vhost", "configure", "write", "read"
    )
    assert {"vhost": vhost, "value": {"max-queues": 3}} in admin_json(broker, "list", "vhost_limits")
    assert {"vhost": vhost, "name": policy, "pattern": "^jobs$", "apply-to": "queues",
            "definition": {"max-length": 5}, "priority": 2} in admin_json(broker, "list", "policies")  # fmt: skip
    with login(broker, user, "pw", vhost) as connection:
        connection.channel().queue_declare("jobs")
    assert {"name": "jobs", "policy": policy} in admin_json(broker, "-V", vhost, "list", "queues", "name", "policy")

    admin_ok(broker, "-V", vhost, "delete", "policy", f"name={policy}")
    admin_ok(broker, "delete", "vhost_limit", f"vhost={vhost}", "name=max-queues")
    admin_ok(broker, "delete", "permission", f"vhost={vhost}", f"user={user}")
    admin_ok(broker, "delete", "user", f"name={user}")
    admin_ok(broker, "delete", "vhost", f"name={vhost}")
    assert vhost not in [entry["name"] for entry in admin_json(broker, "list", "vhosts")]
