"""`lavin ctl` as a child process, and the management API over a broker's control socket."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pika
from broker_process import BrokerProcess, hermetic_env
from yarl import URL

TIMEOUT = 30.0


def ctl(broker: BrokerProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m lavin ctl --data-dir DIR ARGS`, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "lavin", "ctl", "--data-dir", str(broker.data_dir), *args],
        input=stdin, capture_output=True, text=True, timeout=TIMEOUT, env=hermetic_env(),
    )  # fmt: skip


def ctl_ok(broker: BrokerProcess, *args: str) -> str:
    """The output of a command that must succeed."""
    result = ctl(broker, *args)
    assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout}{result.stderr}"
    return result.stdout


def rows(output: str) -> list[list[str]]:
    """A `list_*` table after its "Listing ..." line and header."""
    lines = output.splitlines()
    assert lines[0].startswith("Listing "), output
    return [line.split("\t") for line in lines[2:]]


def control_socket(broker: BrokerProcess) -> Path:
    return broker.data_dir / "control.sock"


def api(broker: BrokerProcess, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    """One request to the management API on the broker's control socket: (status, JSON or None).
    `path` is sent as given (encoded=True), so a test controls its percent-encoding."""

    async def request() -> tuple[int, Any]:
        connector = aiohttp.UnixConnector(path=str(control_socket(broker)))
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as session:
            url = URL("http://localhost" + path, encoded=True)
            async with session.request(method, url, json=body, data=raw) as response:
                content = await response.read()
                return response.status, json.loads(content) if content else None

    return asyncio.run(request())


def api_path(*parts: str) -> str:
    return "/api/" + "/".join(quote(part, safe="") for part in parts)


def login(broker: BrokerProcess, user: str, password: str, vhost: str = "/") -> pika.BlockingConnection:
    credentials = pika.PlainCredentials(user, password)
    return pika.BlockingConnection(
        pika.ConnectionParameters(broker.host, broker.port, vhost, credentials, connection_attempts=1)
    )
