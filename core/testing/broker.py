"""A broker in a background thread of the test process, on a free loopback port."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from lavin.broker.runtime.cluster_status import ClusterStatusSource
from lavin.config import Config
from lavin.plugin_registry import Registry
from lavin.server import data_dir_lock, event_loop_factory, load_plugins, start_broker

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


@dataclass(frozen=True)
class LavinBroker:
    """Where a running test broker listens and keeps its data."""

    port: int
    data_dir: Path
    host: str = "127.0.0.1"
    http_port: int | None = None  # the management API's

    @property
    def http_url(self) -> str:
        """The management API's base URL (no trailing slash)."""
        return f"http://{self.host}:{self.http_port}"

    @property
    def url(self) -> str:
        """The AMQP URL of the default user and vhost: guest/guest on `/`."""
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"


@contextmanager
def running_broker(
    data_dir: Path, plugins: Sequence[str] = (), *, cluster: ClusterStatusSource | None = None
) -> Iterator[LavinBroker]:
    """Run a broker on `data_dir` until the block ends, then shut it down gracefully.

    `plugins` are the names `lavin serve --plugin` takes. Running it again on the same
    `data_dir` restarts the broker with the durable data of the previous run. `cluster`:
    the cluster the broker shows as its leader (the management API, `lavin ctl
    cluster_status`, the metrics), as a clustering node would set it.
    """
    config = Config(data_dir=data_dir, amqp_port=0, http_port=0, metrics_http_port=0, plugins=tuple(plugins))
    with data_dir_lock(config.data_dir):
        thread = _BrokerThread(config, load_plugins(config), cluster)
        thread.start()
        try:
            port, http_port = thread.ports.result(START_TIMEOUT)
            yield LavinBroker(port, config.data_dir, http_port=http_port)
        finally:
            thread.stop()


class _BrokerThread(threading.Thread):
    """Runs the broker's event loop. The loop is made before the thread starts, so that
    `stop` can always reach it."""

    def __init__(self, config: Config, registry: Registry, cluster: ClusterStatusSource | None = None) -> None:
        # A daemon: a broker that hangs must not keep the test process from exiting.
        super().__init__(name=f"lavin-broker-{config.data_dir.name}", daemon=True)
        self._config = config
        self._registry = registry
        self._cluster = cluster
        # Given no factory, the runner would make its loop the current one of this thread.
        factory = event_loop_factory(config.loop) or asyncio.new_event_loop
        self._runner = asyncio.Runner(loop_factory=factory)
        self._loop = self._runner.get_loop()
        self._stop_requested = asyncio.Event()
        self.ports: Future[tuple[int, int | None]] = Future()  # AMQP, management
        self._failure: BaseException | None = None

    def run(self) -> None:
        try:
            with self._runner:
                self._runner.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - every failure goes to the test's thread
            if self.ports.done():
                self._failure = exc
            else:
                self.ports.set_exception(exc)

    async def _serve(self) -> None:
        gc_threshold = gc.get_threshold()
        running = await start_broker(self._config, self._registry)
        running.broker.cluster = self._cluster  # read per request: set before the test gets the ports
        # start_broker tunes the garbage collector for a broker process; this one is the tests'.
        gc.unfreeze()
        gc.set_threshold(*gc_threshold)
        self.ports.set_result((running.amqp_port, running.http_port))
        await self._stop_requested.wait()
        await running.stop()

    def stop(self) -> None:
        """Ask for a graceful shutdown, wait for it, and raise what went wrong, if anything."""
        with suppress(RuntimeError):  # the loop is closed: the broker has stopped already
            self._loop.call_soon_threadsafe(self._stop_requested.set)
        self.join(STOP_TIMEOUT)
        if self.is_alive():
            raise RuntimeError(f"the broker on {self._config.data_dir} did not stop within {STOP_TIMEOUT} s")
        if self._failure is not None:
            raise self._failure
