"""A Lavin cluster on loopback for the clustered benchmarks and the chaos loop: a private
etcd (`lavin.testing.etcd_server`) and N `lavin serve --clustering` nodes, each with its own
data dir, AMQP and HTTP ports it picks itself (named in its ready file) and a clustering port
picked here, so that its advertised URI is known before it starts and can be found in the
etcd leader key. Nodes can be killed (SIGKILL) and started again on the same data dir.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lavin.bench.brokers import environment_without_lavin, free_port, loopback_uri, stop_process
from lavin.testing.etcd_server import MISSING_REASON, EtcdServer

START_TIMEOUT = 60.0
ELECTION_TIMEOUT = 60.0
ETCD_TIMEOUT = 2.0  # one request to etcd's JSON gateway
POLL = 0.1


@dataclass
class LavinNode:
    index: int
    directory: Path
    clustering_port: int
    process: subprocess.Popen[bytes] | None = None
    amqp_port: int = 0  # from the ready file, once started
    http_port: int = 0
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def advertised_uri(self) -> str:
        return f"tcp://127.0.0.1:{self.clustering_port}"

    @property
    def ready_path(self) -> Path:
        return self.directory / "ready.json"

    @property
    def log_path(self) -> Path:
        return self.directory / "lavin.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def uri(self) -> str:
        return loopback_uri(self.amqp_port)


class LavinCluster:
    """The nodes of one cluster; `start`, `kill` and `leader` act on them by index."""

    def __init__(self, workdir: Path, size: int, etcd_endpoint: str) -> None:
        self.etcd_endpoint = etcd_endpoint
        self.prefix = f"lavin-bench-{os.getpid()}-{time.monotonic_ns()}"  # a fresh cluster every time
        self.nodes = [LavinNode(index, workdir / f"lavin-node-{index}", free_port()) for index in range(size)]

    def command(self, node: LavinNode) -> list[str]:
        return [str(Path(sys.executable).parent / "lavin"), "serve", "--data-dir", str(node.directory / "data"),
                "--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-http-port", "-1",
                "--log-level", "warning", "--ready-file", str(node.ready_path),
                "--clustering", "--clustering-bind", "127.0.0.1", "--clustering-port", str(node.clustering_port),
                "--clustering-advertised-uri", node.advertised_uri,
                "--clustering-etcd-endpoints", self.etcd_endpoint, "--clustering-etcd-prefix", self.prefix]  # fmt: skip

    def start(self, index: int) -> None:
        """Start node `index` and wait for its ready file (a follower writes one too: it proxies)."""
        node = self.nodes[index]
        node.directory.mkdir(parents=True, exist_ok=True)
        node.ready_path.unlink(missing_ok=True)  # a killed node leaves its old one behind
        with open(node.log_path, "ab") as output:
            node.process = subprocess.Popen(
                self.command(node), stdout=output, stderr=subprocess.STDOUT, env=environment_without_lavin()
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not node.ready_path.exists():
            if node.process.poll() is not None or time.monotonic() > deadline:
                tail = node.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"Lavin node {index} did not become ready:\n{tail}")
            time.sleep(POLL)
        report = json.loads(node.ready_path.read_text())
        node.ports = {listener["protocol"]: listener["port"] for listener in report["listeners"]}
        node.amqp_port, node.http_port = node.ports.get("amqp", 0), node.ports.get("http", 0)

    def kill(self, index: int) -> None:
        node = self.nodes[index]
        if node.process is not None and node.running:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait()

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                stop_process(node.process, f"Lavin node {node.index}")

    def leader(self) -> int | None:
        """The node whose advertised URI the etcd leader key holds; None while there is none."""
        key = base64.b64encode(f"{self.prefix}/leader".encode()).decode()
        request = urllib.request.Request(
            f"{self.etcd_endpoint}/v3/kv/range", json.dumps({"key": key}).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=ETCD_TIMEOUT) as response:
                found = json.loads(response.read())
        except (OSError, ValueError):  # etcd down or busy: no leader known right now
            return None
        values = [base64.b64decode(kv.get("value", "")).decode(errors="replace") for kv in found.get("kvs", [])]
        for node in self.nodes:
            address = node.advertised_uri.removeprefix("tcp://")  # the leader key holds host:port
            if any(address in value for value in values) and node.running:
                return node.index
        return None

    def wait_for_leader(self, timeout: float = ELECTION_TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while (index := self.leader()) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Lavin node was elected leader within {timeout:.0f} s")
            time.sleep(POLL)
        return index

    def running_uris(self) -> list[str]:
        return [node.uri for node in self.nodes if node.running]


@contextmanager
def lavin_cluster(workdir: Path, size: int = 3) -> Iterator[LavinCluster]:
    """etcd and `size` nodes with a leader elected; all stopped at the end, on error too."""
    if not EtcdServer.available():
        raise RuntimeError(MISSING_REASON)
    etcd = EtcdServer(workdir / "etcd")
    etcd.start()
    try:
        cluster = LavinCluster(workdir, size, etcd.endpoint)
        try:
            for index in range(size):
                cluster.start(index)
            cluster.wait_for_leader()
            yield cluster
        finally:
            cluster.stop_all()
    finally:
        etcd.stop()
