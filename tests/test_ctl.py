"""`lavin ctl` and the management API on the control socket, against a broker child process:
rabbitmqctl's output and exit codes, RabbitMQ's JSON and errors, and a socket only the
broker's user can open."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess, hermetic_env
from control_helpers import api, api_path, control_socket, ctl, ctl_ok, login, rows

LOGIN_REFUSED = pika.exceptions.ProbableAuthenticationError
VHOST_REFUSED = pika.exceptions.ProbableAccessDeniedError
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}
# sysexits, as rabbitmqctl exits
EX_DATAERR, EX_NOUSER, EX_UNAVAILABLE, EX_SOFTWARE = 65, 67, 69, 70


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module: every test uses names of its own."""
    process = BrokerProcess(tmp_path_factory.mktemp("ctl") / "data")
    process.start()
    yield process
    process.stop()


# ---- users -------------------------------------------------------------------------------


def test_add_user_then_log_in_with_its_password(broker: BrokerProcess) -> None:
    result = ctl(broker, "add_user", "alice", "s3cret")
    assert result.returncode == 0
    assert result.stdout.startswith('Adding user "alice" ...\nDone.')
    ctl_ok(broker, "set_permissions", "alice", ".*", ".*", ".*")
    login(broker, "alice", "s3cret").close()
    with pytest.raises(LOGIN_REFUSED):
        login(broker, "alice", "wrong")


def test_add_user_twice_fails_as_rabbitmqctl(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_user", "bob", "one")
    result = ctl(broker, "add_user", "bob", "two")
    assert result.returncode == EX_SOFTWARE
    assert result.stderr == 'Error:\nUser "bob" already exists\n'
    assert ctl(broker, "authenticate_user", "bob", "one").returncode == 0


def test_change_password_clear_password_and_authenticate_user(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_user", "carol", "old")
    ctl_ok(broker, "change_password", "carol", "new")
    assert ctl_ok(broker, "authenticate_user", "carol", "new") == 'Authenticating user "carol" ...\nSuccess\n'
    refused = ctl(broker, "authenticate_user", "carol", "old")
    assert refused.returncode == EX_DATAERR
    assert (
        refused.stderr == "Error:\nError: failed to authenticate user \"carol\"\nuser 'carol' - invalid credentials\n"
    )
    ctl_ok(broker, "clear_password", "carol")
    assert ctl(broker, "authenticate_user", "carol", "new").returncode == EX_DATAERR
    assert "WARNING" in broker.output  # the broker logs why


def test_set_user_tags_and_list_users(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_user", "dave", "pw")
    out = ctl_ok(broker, "set_user_tags", "dave", "monitoring", "policymaker")
    assert out == 'Setting tags for user "dave" to [monitoring, policymaker] ...\n'
    listed = ctl_ok(broker, "list_users")
    assert listed.splitlines()[:2] == ["Listing users ...", "user\ttags"]
    assert ["dave", "[monitoring, policymaker]"] in rows(listed)
    assert ["guest", "[administrator]"] in rows(listed)
    ctl_ok(broker, "set_user_tags", "dave")
    assert ["dave", "[]"] in rows(ctl_ok(broker, "list_users"))
    assert ctl(broker, "authenticate_user", "dave", "pw").returncode == 0  # tags kept the password


def test_delete_user(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_user", "erin", "pw")
    assert ctl_ok(broker, "delete_user", "erin") == 'Deleting user "erin" ...\n'
    assert "erin" not in [row[0] for row in rows(ctl_ok(broker, "list_users"))]
    for command in (["delete_user", "erin"], ["change_password", "erin", "x"], ["set_user_tags", "erin", "a"]):
        result = ctl(broker, *command)
        assert result.returncode == EX_NOUSER, command
        assert result.stderr == 'Error:\nUser "erin" does not exist\n'


# ---- vhosts and permissions --------------------------------------------------------------


def test_add_list_and_delete_vhosts(broker: BrokerProcess) -> None:
    assert ctl_ok(broker, "add_vhost", "team/a") == 'Adding vhost "team/a" ...\n'
    ctl_ok(broker, "add_vhost", "team/a")  # again: nothing to do, as rabbitmqctl
    assert ["team/a"] in rows(ctl_ok(broker, "list_vhosts"))
    assert ctl_ok(broker, "delete_vhost", "team/a") == 'Deleting vhost "team/a" ...\n'
    assert ["team/a"] not in rows(ctl_ok(broker, "list_vhosts"))
    result = ctl(broker, "delete_vhost", "team/a")
    assert (result.returncode, result.stderr) == (EX_DATAERR, 'Error:\nVirtual host "team/a" does not exist\n')


def test_set_list_and_clear_permissions(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_vhost", "perm-v")
    ctl_ok(broker, "add_user", "frank", "pw")
    out = ctl_ok(broker, "set_permissions", "-p", "perm-v", "frank", "^frank\\.", "^frank\\.", ".*")
    assert out == 'Setting permissions for user "frank" in vhost "perm-v" ...\n'
    listed = ctl_ok(broker, "list_permissions", "-p", "perm-v")
    assert listed.splitlines()[:2] == ['Listing permissions for vhost "perm-v" ...', "user\tconfigure\twrite\tread"]
    assert rows(listed) == [["frank", "^frank\\.", "^frank\\.", ".*"]]
    with login(broker, "frank", "pw", "perm-v") as connection:
        channel = connection.channel()
        channel.queue_declare("frank.jobs")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("other.jobs")
        assert refused.value.reply_code == 403
    ctl_ok(broker, "clear_permissions", "-p", "perm-v", "frank")
    assert rows(ctl_ok(broker, "list_permissions", "-p", "perm-v")) == []
    with pytest.raises(VHOST_REFUSED):
        login(broker, "frank", "pw", "perm-v")
    ctl_ok(broker, "clear_permissions", "-p", "perm-v", "frank")  # none left: still done


def test_permission_errors(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_user", "grace", "pw")
    bad_pattern = ctl(broker, "set_permissions", "grace", "(", ".*", ".*")
    assert bad_pattern.returncode == EX_DATAERR
    assert bad_pattern.stderr.startswith("Error:\ninvalid regular expression '('")
    no_vhost = ctl(broker, "set_permissions", "-p", "nowhere", "grace", ".*", ".*", ".*")
    assert (no_vhost.returncode, no_vhost.stderr) == (EX_DATAERR, 'Error:\nVirtual host "nowhere" does not exist\n')
    no_user = ctl(broker, "set_permissions", "nobody", ".*", ".*", ".*")
    assert (no_user.returncode, no_user.stderr) == (EX_NOUSER, 'Error:\nUser "nobody" does not exist\n')
    assert ctl(broker, "list_permissions", "-p", "nowhere").returncode == EX_DATAERR


def test_topic_permissions(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_user", "heidi", "pw")
    ctl_ok(broker, "set_permissions", "heidi", ".*", ".*", ".*")
    out = ctl_ok(broker, "set_topic_permissions", "heidi", "amq.topic", "^orders\\.", ".*")
    assert out == 'Setting topic permissions on "amq.topic" for user "heidi" in vhost "/" ...\n'
    listed = ctl_ok(broker, "list_topic_permissions")
    assert listed.splitlines()[1] == "user\texchange\twrite\tread"
    assert ["heidi", "amq.topic", "^orders\\.", ".*"] in rows(listed)
    out = ctl_ok(broker, "clear_topic_permissions", "heidi", "amq.topic")
    assert out == 'Clearing topic permissions on "amq.topic" for user "heidi" in vhost "/" ...\n'
    assert "heidi" not in [row[0] for row in rows(ctl_ok(broker, "list_topic_permissions"))]


def test_vhost_limits_replace_list_and_clear(broker: BrokerProcess) -> None:
    ctl_ok(broker, "add_vhost", "limited")
    out = ctl_ok(broker, "set_vhost_limits", "-p", "limited", '{"max-connections": 1, "max-queues": 5}')
    assert out == 'Setting vhost limits to "{"max-connections": 1, "max-queues": 5}" for vhost "limited" ...\n'
    assert ctl_ok(broker, "list_vhost_limits", "-p", "limited").splitlines() == [
        'Listing limits for vhost "limited" ...',
        '{"max-connections":1,"max-queues":5}',
    ]
    ctl_ok(broker, "set_permissions", "-p", "limited", "guest", ".*", ".*", ".*")
    with login(broker, "guest", "guest", "limited"), pytest.raises(pika.exceptions.AMQPConnectionError):
        login(broker, "guest", "guest", "limited")
    ctl_ok(broker, "set_vhost_limits", "-p", "limited", '{"max-queues": 3}')  # replaces, as rabbitmqctl
    assert ctl_ok(broker, "-q", "list_vhost_limits", "-p", "limited") == '{"max-queues":3}\n'
    assert ["limited", '{"max-queues":3}'] in rows(ctl_ok(broker, "list_vhost_limits", "--global"))
    unknown = ctl(broker, "set_vhost_limits", "-p", "limited", '{"max-foo": 3}')
    assert unknown.returncode == EX_DATAERR
    assert "unknown vhost limit 'max-foo'" in unknown.stderr
    assert ctl(broker, "set_vhost_limits", "-p", "limited", "not json").returncode == EX_DATAERR
    ctl_ok(broker, "clear_vhost_limits", "-p", "limited")
    assert ctl_ok(broker, "-q", "list_vhost_limits", "-p", "limited") == "{}\n"


# ---- definitions -------------------------------------------------------------------------


def test_export_then_import_into_another_broker(broker: BrokerProcess, broker_factory: BrokerFactory) -> None:
    ctl_ok(broker, "add_vhost", "exported")
    ctl_ok(broker, "add_user", "ivan", "ivan-pw")
    ctl_ok(broker, "set_user_tags", "ivan", "management")
    ctl_ok(broker, "set_permissions", "-p", "exported", "ivan", "^ivan", ".*", ".*")
    ctl_ok(broker, "set_topic_permissions", "-p", "exported", "ivan", "amq.topic", "^a", "^b")
    ctl_ok(broker, "set_vhost_limits", "-p", "exported", '{"max-queues": 7}')
    with login(broker, "guest", "guest") as connection:
        channel = connection.channel()
        channel.exchange_declare("ctl.events", "topic", durable=True)
        channel.queue_declare("ctl.orders", durable=True, arguments={"x-max-length": 9})
        channel.queue_bind("ctl.orders", "ctl.events", "orders.#")
    exported = broker.data_dir.parent / "exported.json"
    assert ctl_ok(broker, "export_definitions", str(exported)).startswith("Exporting definitions in JSON")
    document = json.loads(exported.read_text())
    assert json.loads(ctl_ok(broker, "export_definitions", "-")) == document
    assert {
        "name": "ctl.orders",
        "vhost": "/",
        "durable": True,
        "auto_delete": False,
        "arguments": {"x-max-length": 9},
    } in document["queues"]

    other = broker_factory()
    result = ctl(other, "import_definitions", str(exported))
    assert result.returncode == 0, result.stderr
    assert ctl_ok(other, "authenticate_user", "ivan", "ivan-pw").endswith("Success\n")
    assert ["ivan", "[management]"] in rows(ctl_ok(other, "list_users"))
    assert rows(ctl_ok(other, "list_permissions", "-p", "exported")) == [["ivan", "^ivan", ".*", ".*"]]
    assert rows(ctl_ok(other, "list_topic_permissions", "-p", "exported")) == [["ivan", "amq.topic", "^a", "^b"]]
    assert ctl_ok(other, "-q", "list_vhost_limits", "-p", "exported") == '{"max-queues":7}\n'
    with login(other, "guest", "guest") as connection:
        channel = connection.channel()
        channel.basic_publish("ctl.events", "orders.1", b"routed")
        _, _, body = next(channel.consume("ctl.orders", auto_ack=True, inactivity_timeout=5))
        assert body == b"routed"
    # Imported again: additive, nothing fails.
    assert ctl(other, "import_definitions", "-", stdin=exported.read_text()).returncode == 0


# ---- the management API on the socket ----------------------------------------------------


def test_api_users(broker: BrokerProcess) -> None:
    assert api(broker, "PUT", "/api/users/judy", {"password": "pw", "tags": "administrator,monitoring"})[0] == 201
    status, user = api(broker, "GET", "/api/users/judy")
    assert status == 200
    assert user["tags"] == ["administrator", "monitoring"]
    assert user["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert set(user) == {"name", "password_hash", "hashing_algorithm", "tags", "limits"}
    assert api(broker, "PUT", "/api/users/judy", {"password": "pw2", "tags": []})[0] == 204
    status, users = api(broker, "GET", "/api/users")
    assert status == 200 and "judy" in [entry["name"] for entry in users]
    assert api(broker, "DELETE", "/api/users/judy") == (204, None)
    assert api(broker, "DELETE", "/api/users/judy") == (404, NOT_FOUND)
    assert api(broker, "GET", "/api/users/judy") == (404, NOT_FOUND)


@pytest.mark.parametrize(
    ("method", "path", "body", "reason"),
    [
        ("PUT", "/api/users/x", {"password": "pw"}, "tags_not_present"),
        (
            "PUT",
            "/api/users/x",
            {"password": "a", "password_hash": "b", "tags": ""},
            "both_password_and_password_hash_are_provided",
        ),
        ("PUT", "/api/users/x", {"password_hash": "not base64!", "tags": ""}, "password_hash is not base64"),
        (
            "PUT",
            "/api/users/x",
            {"password": "pw", "tags": 5},
            "tags must be a comma-separated string or a list of strings",
        ),
        ("PUT", "/api/permissions/%2F/guest", {"configure": ".*"}, "[{key_missing,write},{key_missing,read}]"),
        (
            "PUT",
            "/api/permissions/%2F/nobody",
            {"configure": ".*", "write": ".*", "read": ".*"},
            "vhost_or_user_not_found",
        ),
        (
            "PUT",
            "/api/permissions/nowhere/guest",
            {"configure": ".*", "write": ".*", "read": ".*"},
            "vhost_or_user_not_found",
        ),
        ("PUT", "/api/topic-permissions/%2F/guest", {"exchange": "amq.topic", "write": "["}, "[{key_missing,read}]"),
        ("PUT", "/api/vhost-limits/%2F/max-queues", {"value": "ten"}, "value must be an integer"),
        ("POST", "/api/definitions", {"users": {"name": "x"}}, "'users' must be a list of objects"),
    ],
)
def test_api_bad_input_is_400_with_rabbitmqs_reason(
    broker: BrokerProcess, method: str, path: str, body: object, reason: str
) -> None:
    status, reply = api(broker, method, path, body)
    assert status == 400
    assert reply["error"] == "bad_request"
    assert reply["reason"].startswith(reason), reply


def test_api_body_that_is_not_a_json_object(broker: BrokerProcess) -> None:
    assert api(broker, "PUT", "/api/vhosts/v", raw=b"{not json") == (
        400,
        {"error": "bad_request", "reason": "not_json"},
    )
    status, reply = api(broker, "PUT", "/api/vhosts/v", raw=b'"{}"')
    assert status == 400 and "doubly-JSON-encoded" in reply["reason"]


def test_api_not_found(broker: BrokerProcess) -> None:
    assert api(broker, "GET", "/api/vhosts/nowhere") == (404, NOT_FOUND)
    assert api(broker, "GET", "/api/permissions/%2F/nobody") == (404, NOT_FOUND)
    assert api(broker, "GET", "/api/no-such-endpoint") == (404, NOT_FOUND)
    assert api(broker, "PUT", "/api/vhost-limits/nowhere/max-queues", {"value": 1}) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )


def test_api_percent_encoded_vhost_names(broker: BrokerProcess) -> None:
    assert api(broker, "PUT", api_path("vhosts", "a/b c"))[0] == 201
    assert api(broker, "GET", "/api/vhosts/a%2Fb%20c")[1]["name"] == "a/b c"
    perms = {"configure": "", "write": ".*", "read": "^x"}
    assert api(broker, "PUT", "/api/permissions/a%2Fb%20c/guest", perms)[0] == 201
    assert api(broker, "PUT", "/api/permissions/a%2Fb%20c/guest", perms)[0] == 204
    assert api(broker, "GET", "/api/permissions/a%2Fb%20c/guest") == (200, {"user": "guest", "vhost": "a/b c", **perms})
    assert api(broker, "GET", "/api/permissions/%2F/guest")[1]["vhost"] == "/"
    assert api(broker, "DELETE", "/api/permissions/a%2Fb%20c/guest") == (204, None)
    assert api(broker, "DELETE", "/api/vhosts/a%2Fb%20c") == (204, None)


def test_api_topic_permissions_and_limits(broker: BrokerProcess) -> None:
    body = {"exchange": "amq.topic", "write": "^w", "read": "^r"}
    assert api(broker, "PUT", "/api/topic-permissions/%2F/guest", body)[0] == 201
    expected = {"user": "guest", "vhost": "/", **body}
    assert api(broker, "GET", "/api/topic-permissions/%2F/guest") == (200, [expected])
    assert expected in api(broker, "GET", "/api/topic-permissions")[1]
    assert api(broker, "DELETE", "/api/topic-permissions/%2F/guest/amq.topic") == (204, None)
    assert api(broker, "GET", "/api/topic-permissions/%2F/guest") == (404, NOT_FOUND)
    assert api(broker, "PUT", "/api/vhost-limits/%2F/max-connections", {"value": 50}) == (204, None)
    assert api(broker, "GET", "/api/vhost-limits/%2F") == (200, [{"vhost": "/", "value": {"max-connections": 50}}])
    assert api(broker, "DELETE", "/api/vhost-limits/%2F/max-connections") == (204, None)
    assert api(broker, "GET", "/api/vhost-limits/%2F") == (200, [])


# ---- the socket --------------------------------------------------------------------------


def test_socket_is_private_to_the_brokers_user(broker: BrokerProcess) -> None:
    path = control_socket(broker)
    mode = path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    if os.geteuid() != 0:
        pytest.skip("needs root to try the socket as another user")
    # Started as root, then `nobody` before it connects: nobody could not run this interpreter.
    probe = (
        "import os, socket, sys\nos.setgid(65534)\nos.setuid(65534)\nsocket.socket(socket.AF_UNIX).connect(sys.argv[1])"
    )
    other_user = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=30)
    assert other_user.returncode != 0
    assert "PermissionError" in other_user.stderr


def test_no_broker_on_the_socket_exits_69(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lavin", "ctl", "--data-dir", str(tmp_path), "list_users"],
        capture_output=True, text=True, timeout=30, env=hermetic_env(),
    )  # fmt: skip
    assert result.returncode == EX_UNAVAILABLE
    assert f"unable to connect to the broker at {tmp_path / 'control.sock'}" in result.stderr


def test_control_unix_path_from_the_config_file(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    socket_path = tmp_path / "ctl.sock"
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[main]\ncontrol_unix_path = {socket_path}\n")
    started = broker_factory(extra_args=("--config", str(ini)))
    assert stat.S_ISSOCK(socket_path.stat().st_mode)
    assert not control_socket(started).exists()
    listed = subprocess.run(
        [sys.executable, "-m", "lavin", "ctl", "--config", str(ini), "list_vhosts"],
        capture_output=True, text=True, timeout=30, env=hermetic_env(),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert ["/"] in rows(listed.stdout)
    by_env = subprocess.run(
        [sys.executable, "-m", "lavin", "ctl", "list_vhosts"],
        capture_output=True, text=True, timeout=30, env={**hermetic_env(), "LAVIN_CONFIG": str(ini)},
    )  # fmt: skip
    assert by_env.returncode == 0, by_env.stderr
    started.stop()
    assert not socket_path.exists()  # removed at shutdown


def test_a_socket_left_by_a_killed_broker_is_replaced(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data")
    process.start()
    try:
        process.kill()
        assert control_socket(process).exists()
        process.start()
        assert ctl_ok(process, "list_vhosts")
    finally:
        process.stop()


def test_a_socket_in_use_stops_start_up(tmp_path: Path) -> None:
    socket_path = tmp_path / "taken.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as taken:
        taken.bind(str(socket_path))
        taken.listen()
        ini = tmp_path / "lavin.ini"
        ini.write_text(f"[main]\ncontrol_unix_path = {socket_path}\n")
        command = [sys.executable, "-m", "lavin", "serve", "--data-dir", str(tmp_path / "data"),
                   "--amqp-port", "0", "--config", str(ini)]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, env=hermetic_env())
    assert result.returncode == 1
    assert f"control socket {socket_path} is in use by another process" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_data_dir_too_deep_for_a_socket_path_starts_without_one(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "data"
    process = BrokerProcess(deep)
    process.start()
    try:
        assert "No control socket (lavin ctl)" in process.output
        assert ctl(process, "list_users").returncode == EX_UNAVAILABLE
    finally:
        process.stop()
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[main]\ncontrol_unix_path = {deep / 'control.sock'}\n")
    command = [sys.executable, "-m", "lavin", "serve", "--data-dir", str(tmp_path / "data"),
               "--amqp-port", "0", "--config", str(ini)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, env=hermetic_env())
    assert result.returncode == 1
    assert "cannot create control socket" in result.stderr
