"""The broker's operational log, in RabbitMQ's words: a line when a client connection is
accepted, when it is opened (user, vhost, the client's name for it) and when it is gone
(and why, unless the client closed it); the start-up lines; and per vhost, a summary of
what was recovered, with progress lines while a large data dir is read."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess
from control_helpers import ctl_ok
from helpers import unique_name, wait_until
from lavin.broker.runtime import recovery_log
from lavin.client.wire import connect
from lavin.testing import running_broker
from pamqp import commands

LOGGER = "lavin.amqp.connection"
HANDSHAKE_LOGGER = "lavin.amqp.handshake"  # from the protocol header to open-ok
DURATION = r"duration: '(\d+ms|\d+s|\d+M, \d+s)'"


# Where the shared broker's log stood when the running test began: a client port is reused
# over a session, so a line of an earlier test can name the same connection.
_log_start: dict[int, int] = {}


@pytest.fixture(autouse=True)
def lines_of_this_test_only(broker: BrokerProcess) -> None:
    _log_start[id(broker)] = len(broker.output)


def lines_with(broker: BrokerProcess, text: str) -> list[str]:
    output = broker.output[_log_start.get(id(broker), 0) :]
    return [line for line in output.splitlines() if text in line]


def name_of(broker: BrokerProcess, client_port: int) -> str:
    """RabbitMQ's name of the connection from `client_port`: "peer -> local"."""
    return f"127.0.0.1:{client_port} -> 127.0.0.1:{broker.port}"


def wait_for_line(broker: BrokerProcess, text: str) -> str:
    wait_until(lambda: bool(lines_with(broker, text)), f"a log line with {text!r}")
    [line] = lines_with(broker, text)
    return line


def test_a_connection_logs_accepted_opened_and_closed_with_the_clients_name(broker: BrokerProcess) -> None:
    client_name = unique_name("orders app")
    parameters = pika.URLParameters(broker.url)
    parameters.client_properties = {"connection_name": client_name}
    connection = pika.BlockingConnection(parameters)
    named = wait_for_line(broker, f"has a client-provided name: {client_name}")
    name = re.search(r"connection (\S+ -> \S+) has a client-provided name", named).group(1)  # type: ignore[union-attr]
    connection.close()

    accepted = wait_for_line(broker, f"accepting AMQP connection {name}")
    opened = wait_for_line(broker, f"connection {name} - {client_name}: user 'guest' authenticated")
    closed = wait_for_line(broker, f"closing AMQP connection ({name} - {client_name}, ")
    assert f" INFO {HANDSHAKE_LOGGER}: " in accepted and f" INFO {HANDSHAKE_LOGGER}: " in opened
    assert opened.endswith("user 'guest' authenticated and granted access to vhost '/'"), opened
    assert re.search(rf" INFO {LOGGER}: .*, vhost: '/', user: 'guest', {DURATION}\)$", closed), closed
    lines = broker.output.splitlines()
    assert lines.index(accepted) < lines.index(named) < lines.index(opened) < lines.index(closed)


def test_the_clients_name_for_a_connection_is_escaped_in_the_log(broker: BrokerProcess) -> None:
    parameters = pika.URLParameters(broker.url)
    parameters.client_properties = {"connection_name": "app\nFORGED line"}
    pika.BlockingConnection(parameters).close()
    wait_for_line(broker, "- app\\nFORGED line, vhost: '/'")
    assert not [line for line in broker.output.splitlines() if line.startswith("FORGED")]


def test_a_dropped_connection_logs_a_warning_that_says_so(broker: BrokerProcess) -> None:
    connection = connect(broker.url)
    port = connection.sock.getsockname()[1]
    wait_for_line(broker, f"connection {name_of(broker, port)}: user 'guest' authenticated")
    connection.sock.close()  # no connection.close

    line = wait_for_line(broker, f"closing AMQP connection ({name_of(broker, port)}, ")
    assert f" WARNING {LOGGER}: " in line
    assert re.search(rf"vhost: '/', user: 'guest', {DURATION}\): client unexpectedly closed TCP connection$", line)


def test_a_connection_the_broker_closes_logs_the_reason(broker: BrokerProcess) -> None:
    with connect(broker.url) as connection:
        port = connection.sock.getsockname()[1]
        connection.send(commands.Connection.Open(virtual_host="/"))  # once open, a second open is an error
        close = connection.expect_connection_close()
        assert close.reply_code == 503
        connection.send(commands.Connection.CloseOk())
        line = wait_for_line(broker, f"closing AMQP connection ({name_of(broker, port)}, ")
    assert f" WARNING {LOGGER}: " in line
    assert line.endswith(f"): {close.reply_text}"), line
    assert "vhost: '/', user: 'guest'" in line


def test_missed_heartbeats_are_the_reason_a_connection_is_gone(broker: BrokerProcess) -> None:
    with connect(broker.url, heartbeat=1) as connection:  # and then silence: no heartbeats from us
        port = connection.sock.getsockname()[1]
        line = wait_for_line(broker, f"closing AMQP connection ({name_of(broker, port)}, ")
    assert line.endswith("): missed heartbeats from client, timeout: 1s"), line


def test_a_port_probe_that_sends_nothing_is_not_logged(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port)) as probe:
        probe_port = probe.getsockname()[1]
    # A connection after it: once its lines are in, the probe's would be too.
    with connect(broker.url) as connection:
        port = connection.sock.getsockname()[1]
    wait_for_line(broker, f"closing AMQP connection ({name_of(broker, port)}, ")
    assert lines_with(broker, f"127.0.0.1:{probe_port} ->") == []


def test_start_up_names_the_version_the_listeners_and_the_plugins(broker: BrokerProcess) -> None:
    from importlib.metadata import version

    log = broker.output
    for expected in (
        f"INFO lavin.server: Lavin {version('lavin')}\n",
        "INFO lavin.server: plugin lavin.queues classic from lavin",
        f"Listening on amqp://127.0.0.1:{broker.port}\n",
        f"Listening on http://127.0.0.1:{broker.http_port} (management API and web UI)\n",
        f"Listening on http://127.0.0.1:{broker.metrics_port} (Prometheus metrics)\n",
        "INFO lavin.server: Server startup complete; 20 built-in plugins loaded, no optional plugin enabled"
        " (see `lavin plugins`)\n",
    ):
        assert expected in log, expected


def test_each_vhost_logs_what_it_recovered(fresh_broker: BrokerProcess) -> None:
    ctl_ok(fresh_broker, "add_vhost", "second")
    ctl_ok(fresh_broker, "set_permissions", "-p", "second", "guest", ".*", ".*", ".*")
    for vhost, queues in (("%2F", {"one": 3, "two": 2}), ("second", {"three": 1})):
        url = fresh_broker.url.rsplit("/", 1)[0] + f"/{vhost}"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.confirm_delivery()
        for queue, count in queues.items():
            channel.queue_declare(queue, durable=True)
            for _ in range(count):
                channel.basic_publish("", queue, b"kept", pika.BasicProperties(delivery_mode=2))
        connection.close()
    fresh_broker.kill()
    log_before = len(fresh_broker.output)
    fresh_broker.start()

    log = fresh_broker.output[log_before:]
    assert re.search(
        r"INFO lavin.broker.runtime.recovery_log: vhost '/': recovered 2 queues with 5 messages in \d+\.\d{3} s", log
    )
    assert re.search(r"vhost 'second': recovered 1 queues with 1 messages in \d+\.\d{3} s", log), log


def test_recovery_reports_progress_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with running_broker(tmp_path / "data") as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.confirm_delivery()
        for index in range(3):
            channel.queue_declare(f"q{index}", durable=True)
            channel.basic_publish("", f"q{index}", b"kept", pika.BasicProperties(delivery_mode=2))
        connection.close()
    # Every queue past the interval gets a line; a real data dir takes seconds per line.
    monkeypatch.setattr(recovery_log, "PROGRESS_INTERVAL", 0.0)
    with caplog.at_level(logging.INFO, logger=recovery_log.__name__), running_broker(tmp_path / "data"):
        pass
    lines = [record.getMessage() for record in caplog.records if record.name == recovery_log.__name__]
    progress = [line for line in lines if "recovering queues" in line]
    assert [re.sub(r"after \S+ s", "after _ s", line) for line in progress] == [
        f"vhost '/': recovering queues, {done} of 3 done ({done} messages) after _ s" for done in (1, 2, 3)
    ]
    assert re.fullmatch(r"vhost '/': recovered 3 queues with 3 messages in \d+\.\d{3} s", lines[-1]), lines
