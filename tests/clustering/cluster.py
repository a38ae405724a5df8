"""A cluster of `lavin serve --clustering` processes on loopback, around one etcd, and
publishers that count what was confirmed: what the clustering tests and their checks use."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pika
import requests
from broker_process import BrokerProcess
from pika.exceptions import AMQPError

QUEUE = "replicated"


def etcd_value(endpoint: str, key: str) -> str | None:
    """A key's value, read straight from etcd's JSON gateway."""
    answer = requests.post(
        f"{endpoint}/v3/kv/range", json={"key": base64.b64encode(key.encode()).decode()}, timeout=2
    ).json()
    kvs = answer.get("kvs") or []
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


class Cluster:
    def __init__(self, root: Path, etcd_endpoint: str, size: int = 3, prefix: str = "test-cluster") -> None:
        self.etcd_endpoint = etcd_endpoint
        self.prefix = prefix
        self.nodes = [self._node(root / f"node{number}", etcd_endpoint) for number in range(size)]
        self.publishers: list[Publisher] = []

    def _node(self, data_dir: Path, etcd_endpoint: str) -> BrokerProcess:
        return BrokerProcess(
            data_dir,
            extra_args=(
                "--clustering",
                "--clustering-port",
                "0",
                "--clustering-etcd-endpoints",
                etcd_endpoint,
                "--clustering-etcd-prefix",
                self.prefix,
                "--http-port",
                "0",
            ),
        )

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def publisher(self, number: int, nodes: Sequence[BrokerProcess] | None = None) -> Publisher:
        """A started publisher through `nodes` (every node by default), finished by `stop`
        if the test did not finish it."""
        publisher = Publisher(number, self.nodes if nodes is None else nodes)
        self.publishers.append(publisher)
        publisher.start()
        return publisher

    def stop(self) -> None:
        for publisher in self.publishers:
            publisher.finish()
        for node in self.nodes:
            if node.running:
                node.kill()

    @staticmethod
    def name_of(node: BrokerProcess) -> str:
        return (node.data_dir / ".clustering_node").read_text().strip()

    def leader_name(self) -> str | None:
        value = etcd_value(self.etcd_endpoint, f"{self.prefix}/leader")
        return None if value is None else str(json.loads(value)["name"])

    def in_sync(self) -> list[str]:
        value = etcd_value(self.etcd_endpoint, f"{self.prefix}/isr")
        return [] if value is None else list(json.loads(value))

    def leader(self, timeout: float = 20.0, other_than: str | None = None) -> BrokerProcess:
        """The node that leads and serves (its AMQP port answers as a broker's)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            name = self.leader_name()
            for node in self.nodes:
                if name and name != other_than and node.running and self.name_of(node) == name and serves(node):
                    return node
            time.sleep(0.1)
        raise AssertionError(f"no leader serving within {timeout} s\n{self.log_tails()}")

    def log_tails(self, lines: int = 20) -> str:
        """The end of every node's log: what a failed wait shows."""
        return "\n".join(
            f"--- {node.data_dir.name}\n" + "\n".join(node.output.splitlines()[-lines:]) for node in self.nodes
        )

    def followers(self, leader: BrokerProcess) -> list[BrokerProcess]:
        return [node for node in self.nodes if node is not leader]

    def wait_in_sync(self, count: int, timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            names = self.in_sync()
            if len(names) >= count:
                return names
            time.sleep(0.2)
        raise AssertionError(f"fewer than {count} in-sync replicas after {timeout} s: {self.in_sync()}")


def serves(node: BrokerProcess) -> bool:
    try:
        connection = pika.BlockingConnection(
            pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{node.port}/%2F?connection_attempts=1&socket_timeout=2")
        )
    except (AMQPError, OSError):
        return False
    connection.close()
    return True


@dataclass
class Publisher:
    """Publishes numbered persistent messages with confirms through the given nodes (any
    node: followers pass clients to the leader), reconnecting after a failure. A message
    whose confirm did not come is not sent again: it may be there once, or not at all."""

    number: int
    nodes: Sequence[BrokerProcess]
    confirmed: list[int] = field(default_factory=list)
    sent: int = 0
    confirm_times: list[float] = field(default_factory=list)
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=30)

    def _run(self) -> None:
        attempt = 0
        while not self.stop.is_set():
            node = self.nodes[(self.number + attempt) % len(self.nodes)]
            attempt += 1
            if not node.running:
                self.stop.wait(0.05)  # every node may be down for a while
                continue
            try:
                self._publish_through(node)
            except (AMQPError, OSError):
                self.errors += 1
                time.sleep(0.1)

    def _publish_through(self, node: BrokerProcess) -> None:
        connection = pika.BlockingConnection(
            pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{node.port}/%2F?connection_attempts=1&socket_timeout=3")
        )
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            properties = pika.BasicProperties(delivery_mode=2)
            while not self.stop.is_set():
                self.sent += 1
                body = f"{self.number}:{self.sent}".encode()
                channel.basic_publish("", QUEUE, body, properties, mandatory=True)
                self.confirmed.append(self.sent)
                self.confirm_times.append(time.monotonic())
        finally:
            if connection.is_open:
                with contextlib.suppress(AMQPError, OSError):
                    connection.close()


def declare_queue(node: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(node.url))
    connection.channel().queue_declare(QUEUE, durable=True)
    connection.close()


def drain(node: BrokerProcess) -> dict[int, list[int]]:
    """Every message of the queue, by publisher: the numbers in the order they came."""
    connection = pika.BlockingConnection(pika.URLParameters(node.url))
    channel = connection.channel()
    received: dict[int, list[int]] = {}
    while True:
        method, _, body = channel.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        publisher, number = body.decode().split(":")
        received.setdefault(int(publisher), []).append(int(number))
    connection.close()
    return received


def check_delivery(publishers: Sequence[Publisher], received: dict[int, list[int]]) -> None:
    """Every confirmed message is there exactly once, each publisher's in order, and no
    message at all is there twice."""
    for publisher in publishers:
        numbers = received.get(publisher.number, [])
        assert len(numbers) == len(set(numbers)), f"publisher {publisher.number}: duplicates"
        assert numbers == sorted(numbers), f"publisher {publisher.number}: out of order"
        missing = set(publisher.confirmed) - set(numbers)
        assert not missing, f"publisher {publisher.number}: {len(missing)} confirmed messages lost"
