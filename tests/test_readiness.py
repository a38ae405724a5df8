"""`lavin serve` says when it is ready: the ports it bound in `--ready-file`, and READY=1 /
STOPPING=1 to systemd's NOTIFY_SOCKET (a `Type=notify` unit, contrib/systemd/lavin.service)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import requests
from broker_process import hermetic_env

START_TIMEOUT = 30.0


def serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "lavin", "serve", "--data-dir", str(tmp_path / "data"), "--bind", "127.0.0.1",
               "--amqp-port", "0", "--http-port", "0", "--metrics-http-port", "0", *args]  # fmt: skip
    log = (tmp_path / "broker.log").open("ab")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env or hermetic_env())


def wait_for_file(path: Path, process: subprocess.Popen[bytes]) -> dict:
    deadline = time.monotonic() + START_TIMEOUT
    while not path.exists():
        assert process.poll() is None, f"lavin serve exited with {process.returncode}"
        assert time.monotonic() < deadline, f"no {path} after {START_TIMEOUT} s"
        time.sleep(0.05)
    return json.loads(path.read_text())


@pytest.fixture
def stopped_at_end() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_ready_file_names_the_ports_bound_for_port_0(tmp_path: Path, stopped_at_end: list) -> None:
    ready = tmp_path / "ready.json"
    process = serve(tmp_path, "--ready-file", str(ready))
    stopped_at_end.append(process)
    report = wait_for_file(ready, process)
    assert report["pid"] == process.pid
    ports = {listener["protocol"]: listener["port"] for listener in report["listeners"]}
    assert set(ports) == {"amqp", "http", "http/prometheus"}, report
    assert all(port > 0 for port in ports.values()), report
    assert {listener["interface"] for listener in report["listeners"]} == {"127.0.0.1"}

    connection = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{ports['amqp']}/%2F"))
    connection.close()
    overview = requests.get(f"http://127.0.0.1:{ports['http']}/api/overview", auth=("guest", "guest"), timeout=10)
    assert overview.status_code == 200
    assert requests.get(f"http://127.0.0.1:{ports['http/prometheus']}/metrics", timeout=10).status_code == 200

    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert not ready.exists(), "a ready file left behind announces a broker that is gone"


def test_systemd_is_told_ready_and_stopping(tmp_path: Path, stopped_at_end: list) -> None:
    address = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(address)
        listener.settimeout(START_TIMEOUT)
        process = serve(tmp_path, env={**hermetic_env(), "NOTIFY_SOCKET": address})
        stopped_at_end.append(process)
        assert listener.recv(256) == b"READY=1"
        process.send_signal(signal.SIGTERM)
        assert listener.recv(256) == b"STOPPING=1"
        assert process.wait(30) == 0
