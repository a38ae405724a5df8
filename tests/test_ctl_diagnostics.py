"""`lavin ctl`'s health checks, diagnostics, runtime parameters and lifecycle verbs, run as
a child process against a broker child process: rabbitmq-diagnostics' names, output, JSON
(`--formatter json`) and exit codes (0 ok, 69 unavailable, 64 usage)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess, hermetic_env
from control_helpers import ctl, ctl_ok, rows

EX_DATAERR, EX_USAGE, EX_UNAVAILABLE = 65, 64, 69
CHECKS = ("ping", "check_running", "check_local_alarms", "check_alarms", "check_virtual_hosts",
          "check_port_connectivity", "await_startup")  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("diagnostics") / "data")
    process.start()
    yield process
    process.stop()


def ctl_at(data_dir: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lavin", "ctl", "--data-dir", str(data_dir), *args],
        capture_output=True, text=True, timeout=timeout, env=hermetic_env(),
    )  # fmt: skip


@pytest.mark.parametrize("check", CHECKS)
def test_each_check_passes_on_a_running_broker(broker: BrokerProcess, check: str) -> None:
    assert ctl(broker, check).returncode == 0
    result = ctl(broker, check, "--formatter", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "ok"


def test_check_lines_say_what_passed(broker: BrokerProcess) -> None:
    assert ctl_ok(broker, "ping").endswith("Ping succeeded\n")
    assert "reported no local alarms" in ctl_ok(broker, "check_local_alarms")
    assert "reported all vhosts as running" in ctl_ok(broker, "check_virtual_hosts")
    assert "Successfully connected to ports of all listeners" in ctl_ok(broker, "check_port_connectivity")


@pytest.mark.parametrize("check", CHECKS)
def test_each_check_exits_69_without_a_broker(tmp_path: Path, check: str) -> None:
    args = (check, "--timeout", "1") if check == "await_startup" else (check,)
    result = ctl_at(tmp_path, *args)
    assert result.returncode == EX_UNAVAILABLE
    assert "unable to connect to the broker" in result.stderr


@pytest.mark.parametrize(
    "args", [("no_such_command",), ("ping", "--formatter", "xml"), ("ping", "--no-such-option"), ("set_parameter",)]
)
def test_a_usage_error_exits_64(broker: BrokerProcess, args: tuple[str, ...]) -> None:
    result = ctl(broker, *args)
    assert result.returncode == EX_USAGE, result.stderr
    assert "Usage:" in result.stderr


def test_alarm_checks_fail_with_69_under_a_disk_alarm(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    ini = tmp_path / "lavin.ini"
    ini.write_text("[main]\ndisk_free_limit.absolute = 1000000TB\n")
    alarmed = broker_factory(extra_args=("--config", str(ini)))
    for check in ("check_local_alarms", "check_alarms"):
        result = ctl(alarmed, check, "--formatter", "json")
        assert result.returncode == EX_UNAVAILABLE
        verdict = json.loads(result.stdout)
        assert verdict["result"] == "error"
        assert [alarm["resource"] for alarm in verdict["alarms"]] == ["disk"]
        assert "reported alarms: disk" in result.stderr
    assert ctl(alarmed, "ping").returncode == 0  # alarms are not a liveness failure


def test_await_startup_waits_for_a_broker_that_starts_later(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    waiting = subprocess.Popen(
        [sys.executable, "-m", "lavin", "ctl", "--data-dir", str(data_dir), "await_startup", "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=hermetic_env(),
    )  # fmt: skip
    time.sleep(1)
    assert waiting.poll() is None  # still waiting: no broker yet
    late = BrokerProcess(data_dir)
    late.start()
    try:
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert "has started" in out
    finally:
        late.stop()


def test_listeners_as_text_and_json(broker: BrokerProcess) -> None:
    text = ctl_ok(broker, "listeners")
    assert f"port: {broker.port}, protocol: amqp, purpose: AMQP 0-9-1" in text
    listed = json.loads(ctl_ok(broker, "listeners", "--formatter", "json"))
    assert {"interface": "127.0.0.1", "port": broker.port, "protocol": "amqp"}.items() <= listed[0].items()


def test_memory_breakdown_attributes_queued_bytes(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    channel = connection.channel()
    channel.queue_declare("memory-breakdown")
    for _ in range(10):
        channel.basic_publish("", "memory-breakdown", b"x" * 10_000)
    connection.close()
    deadline = time.monotonic() + 20
    while True:
        breakdown = json.loads(ctl_ok(broker, "memory_breakdown", "--formatter", "json"))
        if breakdown["queue_procs"]["bytes"] >= 100_000 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert breakdown["queue_procs"]["bytes"] >= 100_000
    assert breakdown["total"]["rss"] > breakdown["queue_procs"]["bytes"]
    assert "queue_procs: " in ctl_ok(broker, "memory_breakdown", "--unit", "mb")


def test_environment_shows_settings_with_the_password_masked(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    ini = tmp_path / "lavin.ini"
    ini.write_text("[main]\ndefault_password = hunter2-secret\n")
    configured = broker_factory(extra_args=("--config", str(ini)))
    settings = json.loads(ctl_ok(configured, "environment", "--formatter", "json"))
    assert settings["default_password"] == "********"
    assert settings["data_dir"] == str(configured.data_dir)
    assert settings["amqp_port"] == 0 or settings["amqp_port"] == configured.port
    text = ctl_ok(configured, "environment")
    assert "hunter2" not in text
    assert "default_password: ********" in text


def test_log_tail_shows_the_last_lines(broker: BrokerProcess) -> None:
    lines = json.loads(ctl_ok(broker, "log_tail", "-N", "1000", "--formatter", "json"))
    assert any("Server startup complete" in line for line in lines)
    assert len(ctl_ok(broker, "log_tail", "-N", "2").splitlines()) == 2


def test_runtime_and_global_parameters(broker: BrokerProcess) -> None:
    out = ctl_ok(broker, "set_parameter", "federation-upstream", "up1", '{"uri": "amqp://remote"}')
    assert out == ('Setting runtime parameter "up1" for component "federation-upstream" to '
                   '"{"uri": "amqp://remote"}" in vhost "/" ...\n')  # fmt: skip
    assert ["federation-upstream", "up1", '{"uri":"amqp://remote"}'] in rows(ctl_ok(broker, "list_parameters"))
    listed = json.loads(ctl_ok(broker, "list_parameters", "--formatter", "json"))
    assert {"component": "federation-upstream", "name": "up1", "value": {"uri": "amqp://remote"}} in listed
    ctl_ok(broker, "clear_parameter", "federation-upstream", "up1")
    assert rows(ctl_ok(broker, "list_parameters")) == []
    missing = ctl(broker, "clear_parameter", "federation-upstream", "up1")
    assert (missing.returncode, missing.stderr) == (EX_DATAERR, "Error:\nParameter does not exist\n")
    bad = ctl(broker, "set_parameter", "federation-upstream", "up2", "{not json")
    assert bad.returncode == EX_DATAERR and "must be JSON" in bad.stderr

    ctl_ok(broker, "set_global_parameter", "cluster_tags", '{"region": "eu"}')
    assert ["cluster_tags", '{"region":"eu"}'] in rows(ctl_ok(broker, "list_global_parameters"))
    ctl_ok(broker, "clear_global_parameter", "cluster_tags")
    assert "cluster_tags" not in ctl_ok(broker, "list_global_parameters")


def test_close_all_connections_tells_every_client_why(broker: BrokerProcess) -> None:
    clients = [pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) for _ in range(3)]
    out = ctl_ok(broker, "close_all_connections", "maintenance")
    assert out.splitlines() == ['Closing all connections in vhost "/" ...', "Closed 3 connections"]
    for client in clients:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            client.process_data_events(time_limit=5)
            client.process_data_events(time_limit=5)
        assert (closed.value.reply_code, closed.value.reply_text) == (320, "CONNECTION_FORCED - maintenance")
    assert ctl(broker, "close_all_connections", "-p", "no-such-vhost", "x").returncode == EX_DATAERR


def test_stop_shuts_the_broker_down_gracefully(tmp_path: Path) -> None:
    stopping = BrokerProcess(tmp_path / "data")
    stopping.start()
    pid = stopping.pid
    assert pid is not None
    result = ctl(stopping, "stop")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Stopping and halting node ")
    assert stopping.wait(timeout=10) == 0  # already gone: ctl waited for the process to end
    assert "Shutting down" in stopping.output
    assert ctl(stopping, "ping").returncode == EX_UNAVAILABLE
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_bash_completion_lists_the_checks() -> None:
    env = {**hermetic_env(), "_LAVIN_COMPLETE": "bash_complete", "COMP_WORDS": "lavin ctl check_lo", "COMP_CWORD": "2"}
    result = subprocess.run(
        [sys.executable, "-m", "lavin"], capture_output=True, text=True, timeout=30, env=env
    )  # fmt: skip
    assert result.returncode == 0
    assert "check_local_alarms" in result.stdout
    zsh = subprocess.run(
        [sys.executable, "-m", "lavin"], capture_output=True, text=True, timeout=30,
        env={**hermetic_env(), "_LAVIN_COMPLETE": "zsh_source"},
    )  # fmt: skip
    assert "compdef" in zsh.stdout
