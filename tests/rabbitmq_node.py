"""A private RabbitMQ node with its shovel and federation plugins, for tests that check
Lavin against RabbitMQ's own clients and definitions.

`rabbitmq_node` is module-scoped: the node takes some seconds to start, so a module pays
that once. It is bench/brokers.py's node (own mnesia, log, cookie, config; loopback ports),
so it never touches a system RabbitMQ. Without Debian's rabbitmq-server, or when the node
does not start, the tests that use it skip and say why.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest
from lavin.bench.brokers import CTL_TIMEOUT, RABBITMQ_SERVER, RABBITMQCTL, Broker, rabbitmq

PLUGINS = ("rabbitmq_shovel", "rabbitmq_federation")


@dataclass(frozen=True)
class RabbitNode:
    broker: Broker

    @property
    def url(self) -> str:
        """amqp://guest:guest@127.0.0.1:PORT/%2F"""
        return self.broker.uri

    def ctl(self, *args: str) -> str:
        """rabbitmqctl against this node; its output, or a failed assertion with its errors."""
        done = subprocess.run(
            [str(RABBITMQCTL), *args],
            env=dict(self.broker.control_env or {}),
            capture_output=True,
            text=True,
            timeout=CTL_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, f"rabbitmqctl {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def definitions(self) -> dict[str, Any]:
        """What `rabbitmqctl export_definitions` writes: RabbitMQ's own export."""
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "definitions.json"
            self.ctl("export_definitions", str(path))
            exported: dict[str, Any] = json.loads(path.read_text())
            return exported

    def shovel_states(self) -> dict[str, str]:
        """Each dynamic shovel's state on this node, by name."""
        output = self.ctl("shovel_status", "--formatter", "json")
        return {row["name"]: str(row["state"]) for row in json.loads(output or "[]")}

    def wait_shovel_running(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while (state := self.shovel_states().get(name)) != "running":
            assert time.monotonic() < deadline, f"RabbitMQ's shovel {name} is {state}, not running"
            time.sleep(0.3)

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.url))


@pytest.fixture(scope="module")
def rabbitmq_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitNode]:
    if not RABBITMQ_SERVER.exists():
        pytest.skip(f"{RABBITMQ_SERVER} is missing: install Debian's rabbitmq-server (make test does)")
    with contextlib.ExitStack() as stack:
        try:
            broker = stack.enter_context(rabbitmq(tmp_path_factory.mktemp("rabbitmq"), plugins=PLUGINS))
        except (RuntimeError, OSError) as error:  # the node's log tail is in the text
            pytest.skip(f"RabbitMQ did not start: {error}")
        yield RabbitNode(broker)
