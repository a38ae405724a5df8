"""A RabbitMQ 3.10.8 export (tests/fixtures/rabbitmq-definitions.json, made by
tests/fixtures/make_rabbitmq_definitions.py) imported into Lavin, through `lavin ctl
import_definitions` and through `[main] load_definitions` at start-up: users log in with the
passwords set in RabbitMQ, and vhosts, permissions, topic permissions, limits, exchanges,
queues and bindings are there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess, hermetic_env
from control_helpers import api, ctl, ctl_ok, login, rows

FIXTURE = Path(__file__).parent / "fixtures" / "rabbitmq-definitions.json"
RABBITMQ_VERSION = "3.10.8"
LOGIN_REFUSED = pika.exceptions.ProbableAuthenticationError


def test_the_fixture_is_a_rabbitmq_export() -> None:
    document = json.loads(FIXTURE.read_text())
    assert document["rabbit_version"] == RABBITMQ_VERSION
    assert {user["name"] for user in document["users"]} == {"guest", "app", "nopass", "reader"}


def check_imported(broker: BrokerProcess) -> None:
    """Everything the RabbitMQ node held, as `lavin ctl` and clients see it."""
    users = dict(rows(ctl_ok(broker, "list_users")))
    assert users["app"] == "[monitoring, policymaker]"
    assert users["nopass"] == "[]"
    assert {"guest", "reader"} <= users.keys()
    assert {"/", "staging", "team/a"} <= {row[0] for row in rows(ctl_ok(broker, "list_vhosts"))}
    assert sorted(rows(ctl_ok(broker, "list_permissions", "-p", "staging"))) == [
        ["app", "^app\\.", "^app\\.", ".*"],
        ["reader", "", "", "^app\\."],
    ]
    assert rows(ctl_ok(broker, "list_permissions", "-p", "team/a")) == [["nopass", ".*", ".*", ".*"]]
    assert rows(ctl_ok(broker, "list_topic_permissions", "-p", "staging")) == [["app", "amq.topic", "^orders\\.", ".*"]]
    assert ctl_ok(broker, "-q", "list_vhost_limits", "-p", "staging") == '{"max-connections":10,"max-queues":5}\n'
    # The hashes RabbitMQ made verify against the passwords it was given.
    assert ctl_ok(broker, "authenticate_user", "app", "app-secret").endswith("Success\n")
    assert ctl_ok(broker, "authenticate_user", "reader", "reader-secret").endswith("Success\n")
    assert ctl(broker, "authenticate_user", "nopass", "").returncode != 0
    with pytest.raises(LOGIN_REFUSED):
        login(broker, "app", "wrong", "staging")
    with login(broker, "app", "app-secret", "staging") as connection:
        channel = connection.channel()
        assert channel.queue_declare("app.orders", passive=True).method.message_count == 0
        channel.basic_publish("app.events", "orders.new", b"order 1")
        _, _, body = next(channel.consume("app.orders", auto_ack=True, inactivity_timeout=5))
        assert body == b"order 1"


def test_import_through_lavin_ctl(fresh_broker: BrokerProcess) -> None:
    result = ctl(fresh_broker, "import_definitions", str(FIXTURE))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f'Importing definitions in JSON from a file at "{FIXTURE}" ...\nSuccessfully imported definitions.\n'
    )
    check_imported(fresh_broker)
    status, policy = api(fresh_broker, "GET", "/api/policies/staging/lengths")
    assert (status, policy["definition"], policy["apply-to"]) == (200, {"max-length": 1000}, "all")
    # Again: additive, and the guest user RabbitMQ exported keeps RabbitMQ's hash.
    assert ctl(fresh_broker, "import_definitions", str(FIXTURE)).returncode == 0
    status, guest = api(fresh_broker, "GET", "/api/users/guest")
    assert status == 200
    assert guest["password_hash"] == "+snmxDBAcZwLypQ9hFBhIbNsUqPy6Z9PPck/nawd8vG1JdP7"


def test_load_definitions_at_every_start(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[main]\nload_definitions = {FIXTURE}\n")
    broker = broker_factory(extra_args=("--config", str(ini)))
    check_imported(broker)
    ctl_ok(broker, "change_password", "app", "changed")
    broker.restart()  # imported again: the file's hash wins, as in RabbitMQ
    assert ctl_ok(broker, "authenticate_user", "app", "app-secret").endswith("Success\n")
    assert broker.output.count("definitions: imported") == 2


def test_an_import_names_each_object_that_fails_and_imports_the_rest(fresh_broker: BrokerProcess) -> None:
    document = {
        "users": [{"name": "kim", "password": "pw", "tags": ""}],
        "vhosts": [{"name": "partial"}],
        "queues": [{"name": "q", "vhost": "partial", "durable": True, "auto_delete": False, "arguments": {}}],
        "bindings": [
            {
                "source": "amq.direct",
                "vhost": "partial",
                "destination": "missing",
                "destination_type": "queue",
                "routing_key": "k",
                "arguments": {},
            },
        ],
        "permissions": [{"user": "nobody", "vhost": "partial", "configure": "", "write": "", "read": ""}],
    }
    result = ctl(fresh_broker, "import_definitions", "-", stdin=json.dumps(document))
    assert result.returncode == 65
    assert "permission 'nobody' in vhost 'partial': no user 'nobody'" in result.stderr
    assert "binding 'amq.direct' in vhost 'partial': no queue 'missing' in vhost 'partial'" in result.stderr
    assert ["partial"] in rows(ctl_ok(fresh_broker, "list_vhosts"))
    assert ctl_ok(fresh_broker, "authenticate_user", "kim", "pw").endswith("Success\n")
    assert "ERROR lavin.management.definitions.importer: definitions: binding" in fresh_broker.output


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"{not json", "is not JSON"), (b'{"users": {"name": "x"}}', "'users' must be a list of objects")],
)
def test_a_bad_load_definitions_file_stops_start_up(tmp_path: Path, content: bytes, reason: str) -> None:
    definitions = tmp_path / "definitions.json"
    definitions.write_bytes(content)
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[main]\nload_definitions = {definitions}\n")
    command = [sys.executable, "-m", "lavin", "serve", "--data-dir", str(tmp_path / "data"),
               "--amqp-port", "0", "--config", str(ini)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, env=hermetic_env())
    assert result.returncode == 1
    assert reason in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data" / "control.sock").exists()
