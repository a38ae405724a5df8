"""A real broker in a child process, for integration tests.

The child runs `sys.executable -m lavin`, so the tests exercise whichever `lavin` that
interpreter imports: the source tree in an editable install, site-packages otherwise.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

START_TIMEOUT = 15.0
_instances = itertools.count(1)  # names each broker's log and ready file apart

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def hermetic_env() -> dict[str, str]:
    """The test environment without LAVIN_* variables, which would reconfigure the broker."""
    return {key: value for key, value in os.environ.items() if not key.startswith("LAVIN_")}


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class BrokerProcess:
    """One `lavin serve` child process on loopback.

    The broker binds port 0 itself and names the ports it got in its ready file
    (`--ready-file`), so no other process can take a port between picking and binding it.
    They are known once `start` returns; a restart asks for the same ports again, so that
    clients find the broker where it was. `port` fixes the AMQP port instead.
    `env` replaces the environment; by default it is the test's own minus LAVIN_* variables.
    """

    host = "127.0.0.1"  # where the broker listens: the `--bind` passed

    def __init__(
        self,
        data_dir: Path,
        *,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.extra_args = tuple(extra_args)
        self.env = dict(env) if env is not None else None
        self.port = port if port is not None else 0  # 0 until started: the broker picks
        self.http_port = 0
        self.metrics_port = 0
        self.listeners: dict[str, int] = {}  # RabbitMQ's protocol name ("amqp/ssl", "https", ...) -> port
        # Next to the data dir, so a restart keeps appending to one log.
        name = f"{self.data_dir.name}-broker-{next(_instances)}"
        self.log_path = self.data_dir.parent / f"{name}.log"
        self.ready_path = self.data_dir.parent / f"{name}.ready.json"
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "lavin", "serve",
            "--data-dir", str(self.data_dir),
            "--bind", self.host,
            "--amqp-port", str(self.port),
            "--http-port", str(self.http_port),
            "--metrics-http-port", str(self.metrics_port),
            "--log-level", "info",
            "--ready-file", str(self.ready_path),
            *self.extra_args,
        ]  # fmt: skip

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def output(self) -> str:
        """Everything the broker logged so far, across restarts."""
        if self._log_file is not None:
            self._log_file.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self) -> None:
        """Start the broker and return once it listens, with the ports it bound known."""
        if self.running:
            raise RuntimeError(f"broker on port {self.port} is already running")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.ready_path.unlink(missing_ok=True)
        env = hermetic_env() if self.env is None else dict(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self._process = subprocess.Popen(self.command, stdout=self._log_file, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while not self.ready_path.exists():
            code = self._process.poll()
            if code is not None:
                self._reap()
                raise RuntimeError(f"broker exited with {code} before it was ready:\n{self.output}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker not ready after {START_TIMEOUT}s:\n{self.output}")
            time.sleep(0.05)
        self._read_ready_file()

    def _read_ready_file(self) -> None:
        """Take the ports from the ready file; it is written whole, so it parses once it exists."""
        report = json.loads(self.ready_path.read_text())
        self.listeners = {listener["protocol"]: listener["port"] for listener in report["listeners"]}
        self.port = self.listeners.get("amqp", self.port)
        self.http_port = self.listeners.get("http", self.http_port)
        self.metrics_port = self.listeners.get("http/prometheus", self.metrics_port)

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM and wait; return the exit code. Kills the process if it hangs."""
        if self.running:
            assert self._process is not None
            self._process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 10) -> int:
        """Wait for an exit already under way (a signal sent by the test); return the code.

        Kills the process if it is still running after `timeout`.
        """
        process = self._process
        if process is None:
            raise RuntimeError("broker was never started")
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"broker still running after {timeout}s:\n{self.output}") from None
        self._reap()
        return process.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._reap()

    def restart(self) -> None:
        self.stop()
        self.start()

    def _reap(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __repr__(self) -> str:
        return f"BrokerProcess(port={self.port}, data_dir={str(self.data_dir)!r}, pid={self.pid})"


# The type of the `broker_factory` fixture: (extra_args=(), env=None, data_dir=None) -> started.
BrokerFactory = Callable[..., BrokerProcess]


def broker_rss(broker: BrokerProcess) -> int:
    """The broker's resident memory now, in bytes (from /proc/PID/statm)."""
    assert broker.pid is not None
    with open(f"/proc/{broker.pid}/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_SIZE


def stop_quietly(process: BrokerProcess) -> None:
    """Stop a test's broker; one that does not stop cleanly is killed, with a warning."""
    try:
        process.stop()
    except RuntimeError as exc:
        warnings.warn(f"{process!r} did not stop cleanly: {exc}", stacklevel=1)
        process.kill()
