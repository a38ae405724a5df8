"""A private single-member etcd on loopback, for the clustering tests and benchmarks.

It runs Debian's `etcd` binary (package `etcd-server`; `make etcd` installs it) with its data
and its log in a directory of the caller's. etcd cannot listen on port 0 and say which port
it got, so the ports are free ones picked beforehand, picked again when another process
took one in between.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ETCD_BINARY = "/usr/bin/etcd"
MISSING_REASON = f"etcd is not installed ({ETCD_BINARY}, Debian's etcd-server; `make etcd` installs it)"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
BIND_ATTEMPTS = 5


class EtcdServer:
    """One etcd member, its data in `data_dir/etcd` and its log in `data_dir/etcd.log`."""

    def __init__(self, data_dir: Path, *, binary: str = ETCD_BINARY) -> None:
        self.data_dir = data_dir
        self.binary = binary
        self.client_port = 0
        self.peer_port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available(binary: str = ETCD_BINARY) -> bool:
        return os.access(binary, os.X_OK)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "etcd.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start on new free ports; return once etcd has elected itself and answers."""
        for _ in range(BIND_ATTEMPTS):
            self.client_port, self.peer_port = _free_port(), _free_port()
            if self._launch():
                return
        raise RuntimeError(f"etcd found no free ports in {BIND_ATTEMPTS} attempts; see {self.log_path}")

    def restart(self) -> None:
        """Stop (if running) and start again on the same ports and data."""
        self.stop()
        if not self._launch():
            raise RuntimeError(f"etcd could not listen on its ports {self.client_port}, {self.peer_port} again")

    def stop(self) -> None:
        """SIGTERM, and wait for etcd to exit (SIGKILL after STOP_TIMEOUT)."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the clients can tell."""
        self._end(signal.SIGKILL)

    def _end(self, how: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(how)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _launch(self) -> bool:
        """Run etcd on the chosen ports: True once healthy, False if a port was taken."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        client_url = self.endpoint
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        command = [
            self.binary,
            "--name=lavin-test",
            f"--data-dir={self.data_dir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=lavin-test={peer_url}",
            # one member elects itself at once; a short timeout makes a restart quick
            "--heartbeat-interval=50",
            "--election-timeout=500",
            "--logger=zap",
            "--log-level=warn",
        ]
        # ETCD_* variables would override these flags
        env = {name: value for name, value in os.environ.items() if not name.startswith("ETCD_")}
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                log_text = self._log_since(log_start)
                if "address already in use" in log_text:
                    return False
                raise RuntimeError(f"etcd exited at start-up: {log_text[-2000:]}")
            if self._healthy():
                return True
            time.sleep(0.05)
        self.kill()
        log_text = self._log_since(log_start)
        raise RuntimeError(f"etcd did not become healthy within {START_TIMEOUT} s: {log_text[-2000:]}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1.0) as answer:
                return b'"true"' in answer.read(4096)
        except (OSError, urllib.error.URLError):
            return False

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
