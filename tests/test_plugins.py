"""Plugins from outside the lavin distribution: a third-party exchange type found through
entry points and enabled with --plugin, and lifecycle plugins given with --plugin."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess, hermetic_env
from lavin.api import ExchangeType, QueueType, hookimpl
from lavin.plugin_registry import (
    PluginError,
    checked_class,
    load_hook_plugins,
    load_registry,
)
from stevedore.extension import Extension

TESTS_DIR = Path(__file__).resolve().parent
SAMPLE_PACKAGE = TESTS_DIR / "plugin_pkgs" / "lavin-sample-exchange"
LIFECYCLE_PLUGIN = "tests.lifecycle_plugin"


def extension(name: str, plugin: type[Any]) -> Extension[Any]:
    entry_point = EntryPoint(name=name, value="somewhere:Thing", group="lavin.exchanges")
    return Extension(name, entry_point, plugin, None)


class Misnamed(ExchangeType):
    name = "x-other"


def test_registry_holds_built_ins_read_only() -> None:
    registry = load_registry()
    assert {"direct", "fanout", "topic", "headers"} <= set(registry.exchange_types)
    assert "classic" in registry.queue_types
    assert "guest" in registry.auth_backends
    with pytest.raises(TypeError):
        registry.exchange_types["direct"] = Misnamed  # type: ignore[index]


def test_class_name_must_equal_entry_point_name() -> None:
    with pytest.raises(PluginError, match="registered as 'x-mine' but its name attribute is"):
        checked_class(extension("x-mine", Misnamed), ExchangeType)  # type: ignore[type-abstract]
    checked = checked_class(extension("x-other", Misnamed), ExchangeType)  # type: ignore[type-abstract]
    assert checked is Misnamed


def test_entry_point_must_be_a_subclass_of_the_api_base() -> None:
    with pytest.raises(PluginError, match=r"not a subclass of lavin\.api\.QueueType"):
        checked_class(extension("x-other", Misnamed), QueueType)  # type: ignore[type-abstract]


def test_unknown_lifecycle_plugin_is_refused() -> None:
    with pytest.raises(PluginError, match="unknown plugin 'no_such_lavin_plugin'"):
        load_hook_plugins(["no_such_lavin_plugin"])


def test_misspelt_hook_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("misspelt_hook_plugin")

    @hookimpl
    def lavin_strartup(broker: object) -> None: ...

    module.lavin_strartup = lavin_strartup  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with pytest.raises(PluginError, match="lavin_strartup"):
        load_hook_plugins([module.__name__])


def test_lifecycle_plugin_by_module_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events_file = tmp_path / "events.jsonl"
    monkeypatch.setenv("LAVIN_TEST_EVENTS_FILE", str(events_file))
    # conftest's folder, tests/, is on sys.path, so the plugin imports by its bare name here.
    hooks = load_hook_plugins(["lifecycle_plugin"]).hook
    vhost = types.SimpleNamespace(name="/")
    hooks.lavin_startup(broker=types.SimpleNamespace(vhosts={"/": vhost}))
    hooks.lavin_definitions_changed(vhost=vhost, kind="queue", name="q", action="deleted")
    assert read_events(events_file) == [
        {"event": "startup", "vhosts": ["/"]},
        {"event": "definitions_changed", "vhost": "/", "kind": "queue", "name": "q",
         "action": "deleted"},
    ]  # fmt: skip


def pip(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="session")
def sample_exchange_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Install lavin-sample-exchange into this interpreter's environment for the session."""
    # Built from a copy so the build leaves no build/ or egg-info in the source tree.
    source = tmp_path_factory.mktemp("sample-exchange") / SAMPLE_PACKAGE.name
    shutil.copytree(SAMPLE_PACKAGE, source)
    pip("install", "--quiet", "--no-deps", "--no-build-isolation", str(source))
    yield
    pip("uninstall", "--yes", "lavin-sample-exchange")


@pytest.mark.usefixtures("sample_exchange_installed")
def test_plugins_lists_third_party_exchange() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lavin", "plugins"], capture_output=True, text=True, timeout=30,
        env=hermetic_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["lavin.exchanges", "x-prefix", "lavin-sample-exchange", "1.0.0", "--plugin"] in rows


@pytest.mark.usefixtures("sample_exchange_installed")
def test_prefix_exchange_routes_by_binding_key_prefix(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(extra_args=["--plugin", "x-prefix"])
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        channel.exchange_declare("by-prefix", exchange_type="x-prefix")
        for queue, binding_key in [("q-all", ""), ("q-eu", "eu."), ("q-eu-fr", "eu.fr")]:
            channel.queue_declare(queue, exclusive=True)
            channel.queue_bind(queue, "by-prefix", routing_key=binding_key)
        for routing_key in ["eu.fr.paris", "eu.de", "us.ny"]:
            channel.basic_publish("by-prefix", routing_key, routing_key.encode())

        def drained(queue: str) -> list[bytes]:
            bodies = []
            while (message := channel.basic_get(queue, auto_ack=True))[0] is not None:
                bodies.append(message[2])
            return bodies

        # basic_get after a publish on the same channel sees the published messages.
        assert drained("q-all") == [b"eu.fr.paris", b"eu.de", b"us.ny"]
        assert drained("q-eu") == [b"eu.fr.paris", b"eu.de"]
        assert drained("q-eu-fr") == [b"eu.fr.paris"]
    finally:
        connection.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for_event(path: Path, event: str, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not any(record["event"] == event for record in read_events(path)):
        assert time.monotonic() < deadline, f"no {event} event in {read_events(path)}"
        time.sleep(0.05)


def lifecycle_broker(broker_factory: BrokerFactory, tmp_path: Path, *extra_args: str) -> tuple[BrokerProcess, Path]:
    """A broker with tests.lifecycle_plugin enabled; the plugin's events go to the path."""
    # A copy, so the broker's path gets the plugin but not the repo root's source folders.
    plugin_path = tmp_path / "plugin-path"
    (plugin_path / "tests").mkdir(parents=True)
    shutil.copy(TESTS_DIR / "lifecycle_plugin.py", plugin_path / "tests")
    events_file = tmp_path / "events.jsonl"
    env = {
        **hermetic_env(),
        "LAVIN_TEST_EVENTS_FILE": str(events_file),
        "PYTHONPATH": str(plugin_path),
    }
    broker = broker_factory(extra_args=["--plugin", LIFECYCLE_PLUGIN, *extra_args], env=env)
    wait_for_event(events_file, "startup")
    return broker, events_file


def test_lifecycle_plugin_sees_events_in_order(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker, events_file = lifecycle_broker(broker_factory, tmp_path)
    properties = {"product": "lifecycle-test"}
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", broker.port, client_properties=properties)
    )
    connection.channel().queue_declare("lifecycle-q")
    connection.close()
    wait_for_event(events_file, "connection_closed")
    assert broker.stop() == 0

    events = read_events(events_file)
    assert [record["event"] for record in events] == [
        "configure",
        "startup",
        "connection_opened",
        "definitions_changed",
        "connection_closed",
        "shutdown",
    ], events
    assert events[1]["vhosts"] == ["/"]
    opened = events[2]
    assert opened["peer"].startswith("127.0.0.1:")
    assert {key: opened[key] for key in ("user", "vhost", "product")} == {
        "user": "guest", "vhost": "/", "product": "lifecycle-test",
    }  # fmt: skip
    definition = {key: events[3][key] for key in ("vhost", "kind", "name", "action")}
    assert definition == {
        "vhost": "/", "kind": "queue", "name": "lifecycle-q", "action": "declared",
    }  # fmt: skip
