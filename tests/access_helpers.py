"""A broker in the test process whose access control (`broker.access`) a test drives, as
the control socket and the HTTP API do, on the broker's own event loop.

The broker is found through a lifecycle plugin: this module, enabled by its module name,
keeps the broker its `lavin_startup` hook receives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from lavin.api import hookimpl
from lavin.broker.broker import Broker
from lavin.client.wire import PROTOCOL_HEADER, Connection
from lavin.testing import running_broker

CALL_TIMEOUT = 10.0
Result = TypeVar("Result")
_started: list[Broker] = []


@hookimpl
def lavin_startup(broker: Broker) -> None:
    _started.append(broker)


class InProcessBroker:
    def __init__(self, broker: Broker, port: int, data_dir: Path) -> None:
        self.broker = broker
        self.port = port
        self.data_dir = data_dir

    def call(self, function: Callable[..., Result], *args: Any) -> Result:
        """`function(*args)` on the broker's loop; what it returns, or raises."""

        async def run() -> Result:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.broker.loop).result(CALL_TIMEOUT)

    def wait(self, awaitable: Callable[[], Awaitable[Result]]) -> Result:
        """Await `awaitable()` on the broker's loop."""

        async def run() -> Result:
            return await awaitable()

        return asyncio.run_coroutine_threadsafe(run(), self.broker.loop).result(CALL_TIMEOUT)

    def url(self, user: str = "guest", password: str = "guest", vhost: str = "/") -> str:
        return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{self.port}/{quote(vhost, safe='')}"


@contextmanager
def in_process_broker(data_dir: Path) -> Iterator[InProcessBroker]:
    """Run a broker on `data_dir` in this process until the block ends."""
    with running_broker(data_dir, plugins=[__name__]) as lavin:
        yield InProcessBroker(_started[-1], lavin.port, lavin.data_dir)


def open_refusal(url: str) -> tuple[int, str]:
    """The code and text of the connection.close that answers connection.open of the URL's
    vhost (the login itself must succeed)."""
    with Connection(url) as connection:
        connection.send_raw(PROTOCOL_HEADER)
        connection.start_ok()
        connection.tune_ok(vhost=connection.address.vhost)
        close = connection.expect_connection_close()
    return close.reply_code, close.reply_text


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
