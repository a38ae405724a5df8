"""Which plugins run: the built-in types always, anything else once enabled by name with
--plugin or `[main] plugins`; the errors for names that cannot be enabled; the start-up log;
`[plugin.NAME]` settings handed to lavin_configure."""

from __future__ import annotations

import logging
import re
import sys
import types
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path

import pika
import pytest
from broker_process import BrokerFactory
from helpers import closes_connection
from lavin.api import AuthBackend, hookimpl
from lavin.config import InstalledPlugin
from lavin.plugin_registry import PluginError, check_auth_backends, load_registry
from test_cli import run_lavin
from test_plugins import (
    lifecycle_broker,
    read_events,
    sample_exchange_installed,  # noqa: F401 - a fixture
)

PREFIX_TYPE = "x-prefix"
SAMPLE_DISTRIBUTION = "lavin-sample-exchange"
LIFECYCLE_PLUGIN = "tests.lifecycle_plugin"
Settings = list[tuple[str, dict[str, str]]]


def declare_prefix_exchange(url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        connection.channel().exchange_declare("by-prefix", exchange_type=PREFIX_TYPE)
    finally:
        if connection.is_open:
            connection.close()


@pytest.mark.usefixtures("sample_exchange_installed")
def test_installed_type_is_refused_until_enabled(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    with closes_connection(503, f"COMMAND_INVALID - invalid exchange type '{PREFIX_TYPE}'"):
        declare_prefix_exchange(broker.url)
    enabled = broker_factory(extra_args=["--plugin", PREFIX_TYPE])
    declare_prefix_exchange(enabled.url)


@pytest.mark.usefixtures("sample_exchange_installed")
def test_config_file_enables_plugins(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[main]\nplugins = {PREFIX_TYPE}\n")
    broker = broker_factory(extra_args=["--config", str(ini)])
    declare_prefix_exchange(broker.url)


@pytest.mark.usefixtures("sample_exchange_installed")
def test_unknown_name_lists_installed_plugins_by_group(tmp_path: Path) -> None:
    result = run_lavin("serve", "--data-dir", str(tmp_path / "data"), "--plugin", "x-prefx")
    assert result.returncode != 0
    assert "unknown plugin 'x-prefx'" in result.stderr
    assert "  lavin.exchanges: direct, fanout, headers, topic," in result.stderr
    assert f"{PREFIX_TYPE} ({SAMPLE_DISTRIBUTION})" in result.stderr
    assert "  lavin.auth: guest" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.usefixtures("sample_exchange_installed")
def test_module_without_hooks_is_refused(tmp_path: Path) -> None:
    # The exchange type's own module, given instead of its entry-point name.
    result = run_lavin("serve", "--data-dir", str(tmp_path / "data"), "--plugin", "lavin_sample_exchange")
    assert result.returncode != 0
    assert "plugin 'lavin_sample_exchange' implements no hook" in result.stderr
    assert "entry-point name (see `lavin plugins`)" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.usefixtures("sample_exchange_installed")
def test_startup_log_names_version_and_every_plugin(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker, _events = lifecycle_broker(broker_factory, tmp_path, "--plugin", PREFIX_TYPE)
    lavin_version = version("lavin")
    lines = [line.partition(" lavin.server: ")[2] for line in broker.output.splitlines()]
    for expected in [
        f"Lavin {lavin_version}",
        f"plugin lavin.exchanges direct from lavin {lavin_version} built-in",
        f"plugin lavin.queues classic from lavin {lavin_version} built-in",
        f"plugin lavin.auth guest from lavin {lavin_version} built-in",
        f"plugin lavin.exchanges {PREFIX_TYPE} from {SAMPLE_DISTRIBUTION} 1.0.0 enabled",
    ]:
        assert expected in lines, broker.output
    # A plugin module outside any distribution is named by its file.
    module_line = rf"plugin lavin\.plugins {LIFECYCLE_PLUGIN} from /\S+/tests/lifecycle_plugin\.py enabled"
    assert any(re.fullmatch(module_line, line) for line in lines), broker.output
    summary = f"Server startup complete; 20 built-in plugins loaded; enabled: {PREFIX_TYPE}, {LIFECYCLE_PLUGIN}"
    assert summary in lines, broker.output


def test_plugin_section_reaches_lavin_configure(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    ini = tmp_path / "lavin.ini"
    ini.write_text(f"[plugin.{LIFECYCLE_PLUGIN}]\nendpoint = http://audit.example\nRetries = 3\n")
    broker, events_file = lifecycle_broker(broker_factory, tmp_path, "--config", str(ini))
    assert broker.stop() == 0
    configured = [record for record in read_events(events_file) if record["event"] == "configure"]
    assert configured == [
        {
            "event": "configure",
            "name": LIFECYCLE_PLUGIN,
            # configparser lower-cases keys
            "settings": {"endpoint": "http://audit.example", "retries": "3"},
        }
    ]


# --- in-process: the registry's rules ----------------------------------------------------------


def configurable_plugin(monkeypatch: pytest.MonkeyPatch, module_name: str, seen: Settings, refuse: bool = False) -> str:
    """A lifecycle plugin module implementing only lavin_configure."""
    module = types.ModuleType(module_name)

    @hookimpl
    def lavin_configure(name: str, settings: Mapping[str, str]) -> None:
        if refuse:
            raise ValueError("port must be a number")
        seen.append((name, dict(settings)))

    module.lavin_configure = lavin_configure  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module_name, module)
    return module_name


def test_each_plugin_gets_only_its_own_section(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: Settings = []
    names = [configurable_plugin(monkeypatch, name, seen) for name in ("audit", "metrics", "bare")]
    load_registry(names, plugin_settings={"audit": {"secret": "a"}, "metrics": {"port": "9100"}})
    assert seen == [("audit", {"secret": "a"}), ("metrics", {"port": "9100"}), ("bare", {})]


def test_refused_settings_stop_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    name = configurable_plugin(monkeypatch, "picky", [], refuse=True)
    with pytest.raises(PluginError, match="plugin 'picky' refused its settings: port must be"):
        load_registry([name], plugin_settings={"picky": {"port": "many"}})


def test_section_of_no_enabled_plugin_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lavin.plugin_registry")  # whatever the root level
    load_registry(plugin_settings={"ghost": {"key": "value"}})
    assert "config section [plugin.ghost] is ignored" in caplog.text


def test_json_module_has_no_hook() -> None:
    with pytest.raises(PluginError, match="plugin 'json' implements no hook"):
        load_registry(["json"])


def test_auth_backend_must_be_enabled() -> None:
    ldap = InstalledPlugin("lavin.auth", "ldap", "lavin-ldap", "2.0")
    loaded: dict[str, type[AuthBackend]] = {}
    with pytest.raises(PluginError, match="installed by lavin-ldap but not enabled: add --plugin"):
        check_auth_backends(["ldap"], loaded, [ldap])
    with pytest.raises(PluginError, match=r"unknown auth backend 'ldpa'(.|\n)*ldap \(lavin-ldap\)"):
        check_auth_backends(["ldpa"], loaded, [ldap])
