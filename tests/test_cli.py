"""The `lavin` command: version, plugin listing, configuration sources, start and stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess, hermetic_env
from click.testing import CliRunner
from lavin import cli
from lavin.config import Config, StartupError, read_config_file, resolve_config
from pika.exceptions import ConnectionClosedByBroker

BUILT_IN_PLUGINS = {
    ("lavin.exchanges", "direct"),
    ("lavin.exchanges", "fanout"),
    ("lavin.exchanges", "topic"),
    ("lavin.exchanges", "headers"),
    ("lavin.queues", "classic"),
    ("lavin.auth", "guest"),
}


def run_lavin(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lavin", *args],
        capture_output=True, text=True, timeout=timeout,
        env=hermetic_env() if env is None else env,
    )  # fmt: skip


class PortFromElsewhere(BrokerProcess):
    """Leaves --amqp-port off the command line, so env or a config file must set it."""

    @property
    def command(self) -> list[str]:
        command = super().command
        flag = command.index("--amqp-port")
        del command[flag : flag + 2]
        return command


def test_version() -> None:
    result = run_lavin("--version")
    assert result.returncode == 0
    assert version("lavin") in result.stdout


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "lavin"
    result = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "lavin" in result.stdout


def test_plugins_lists_built_ins() -> None:
    result = run_lavin("plugins")
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["GROUP", "NAME", "DISTRIBUTION", "VERSION", "ENABLED"]
    rows = {(*line.split()[:3], line.split()[4]) for line in lines}
    for group, name in BUILT_IN_PLUGINS:
        assert (group, name, "lavin", "always") in rows


def test_plugins_listing_imports_no_plugin() -> None:
    script = (
        "import json, sys\n"
        "from lavin.cli import main\n"
        "main(['plugins'], standalone_mode=False)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30,
        env=hermetic_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout.splitlines()[-1])
    plugin_modules = ("lavin.plugins", "lavin.api", "lavin_sample_exchange")
    assert [m for m in modules if m.startswith(plugin_modules)] == []


def captured_config(monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str]) -> Config:
    """Run `lavin serve ARGS` in-process with the server replaced; return its Config."""
    seen: list[Config] = []
    monkeypatch.setattr("lavin.server.serve", lambda config, ready_file=None: seen.append(config))
    for key in [key for key in os.environ if key.startswith("LAVIN_")]:
        monkeypatch.delenv(key)
    result = CliRunner().invoke(cli.main, ["serve", *args], env=env)
    assert result.exit_code == 0, result.output
    return seen[0]


def write_ini(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_precedence_cli_over_env_over_file_over_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ini = write_ini(
        tmp_path / "lavin.ini",
        "[main]\nlog_level = warn\nauth_backends = guest, ldap\n[amqp]\nbind = 10.0.0.1\nport = 1111\nheartbeat = 5\n",
    )
    config = captured_config(
        monkeypatch,
        ["--config", str(ini), "--bind", "0.0.0.0", "--plugin", "a", "--plugin", "b"],
        {"LAVIN_BIND": "10.9.9.9", "LAVIN_AMQP_PORT": "2222"},
    )
    assert config.bind == "0.0.0.0"  # flag beats env and file
    assert config.amqp_port == 2222  # env beats file
    assert config.heartbeat == 5  # file beats default
    assert config.log_level == "warning"  # LavinMQ's level name accepted
    assert config.auth_backends == ("guest", "ldap")
    assert config.plugins == ("a", "b")
    assert config.frame_max == Config().frame_max


def test_config_file_names_plugins_and_their_settings(tmp_path: Path) -> None:
    ini = write_ini(
        tmp_path / "lavin.ini",
        "[main]\nplugins = x-prefix, mycompany.audit\n"
        "[plugin.mycompany.audit]\nendpoint = http://audit:8080  # comment\n[plugin.bare]\n",
    )
    config = resolve_config({}, ini)
    assert config.plugins == ("x-prefix", "mycompany.audit")
    assert config.plugin_settings == {
        "mycompany.audit": {"endpoint": "http://audit:8080"},
        "bare": {},
    }


def test_config_file_errors_are_clear(tmp_path: Path) -> None:
    ini = write_ini(tmp_path / "bad.ini", "[amqp]\nport = many\n")
    with pytest.raises(StartupError, match=r"\[amqp\] port"):
        read_config_file(ini)
    with pytest.raises(StartupError, match="loop"):
        resolve_config({"loop": "trio"})


def test_unknown_plugin_fails_at_startup(tmp_path: Path) -> None:
    result = run_lavin("serve", "--data-dir", str(tmp_path / "data"), "--plugin", "no_such.plugin")
    assert result.returncode != 0
    assert "unknown plugin 'no_such.plugin'" in result.stderr
    assert "  lavin.queues: classic, priority, quorum, stream" in result.stderr
    assert "Traceback" not in result.stderr


def test_module_without_hooks_fails_at_startup(tmp_path: Path) -> None:
    result = run_lavin("serve", "--data-dir", str(tmp_path / "data"), "--plugin", "json")
    assert result.returncode != 0
    assert "plugin 'json' implements no hook" in result.stderr
    assert "Traceback" not in result.stderr


def test_port_from_env_var(tmp_path: Path) -> None:
    env = {**hermetic_env(), "LAVIN_AMQP_PORT": "0"}  # any free port, not the default 5672
    process = PortFromElsewhere(tmp_path / "data", env=env)
    process.start()
    try:
        assert process.port not in (0, 5672)
        assert f"Listening on amqp://127.0.0.1:{process.port}" in process.output
    finally:
        assert process.stop() == 0


def test_config_file_sets_port_and_heartbeat(tmp_path: Path) -> None:
    ini = write_ini(tmp_path / "lavin.ini", "[amqp]\nport = 0\nheartbeat = 17\n")  # any free port, not 5672
    process = PortFromElsewhere(tmp_path / "data", extra_args=["--config", str(ini)])
    process.start()
    try:
        assert process.port not in (0, 5672)
        connection = pika.BlockingConnection(pika.URLParameters(process.url))
        assert connection._impl.params.heartbeat == 17  # the server's suggestion was taken
        connection.close()
    finally:
        assert process.stop() == 0


def test_sigterm_closes_clients_with_320_and_exits_0(fresh_broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(fresh_broker.url))
    connection.channel()
    assert fresh_broker.pid is not None
    os.kill(fresh_broker.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    with pytest.raises(ConnectionClosedByBroker) as closed:
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
    assert closed.value.reply_code == 320
    assert fresh_broker.wait() == 0


def test_second_broker_on_same_data_dir_fails(fresh_broker: BrokerProcess) -> None:
    result = run_lavin("serve", "--data-dir", str(fresh_broker.data_dir), "--amqp-port", "0")
    assert result.returncode != 0
    assert "in use by another broker" in result.stderr
    assert fresh_broker.running
