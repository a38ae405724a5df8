"""A three-node cluster as operators and clients see it: every node in /api/nodes and
`lavin ctl cluster_status` on the leader and on a follower, a follower's API pointing at the
leader, the Prometheus gauges, the leader hooks, and quorum queues and streams that keep
their messages through a failover."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import requests
from broker_process import BrokerProcess
from clustering.cluster import Cluster
from control_helpers import ctl_ok
from helpers import eventually
from lavin.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE
from lavin.testing.etcd_server import EtcdServer

pytestmark = pytest.mark.timeout(180)
GUEST = ("guest", "guest")


def started_cluster(root: Path, etcd: EtcdServer) -> Iterator[Cluster]:
    nodes = Cluster(root, etcd.endpoint)
    hooks = root / "hooks.log"
    for node in nodes.nodes:
        node.extra_args += (
            "--clustering-on-leader-elected",
            f"echo elected {node.data_dir.name} >> {hooks}",
            "--clustering-on-leader-lost",
            f"echo lost {node.data_dir.name} >> {hooks}",
        )
    nodes.nodes[0].start()  # alone: it leads
    nodes.leader()
    for node in nodes.nodes[1:]:
        node.start()
    nodes.wait_in_sync(3)
    yield nodes
    nodes.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, module_etcd: EtcdServer) -> Iterator[Cluster]:
    """One cluster for the tests that only look at it."""
    yield from started_cluster(tmp_path_factory.mktemp("cluster"), module_etcd)


@pytest.fixture
def own_cluster(tmp_path: Path, etcd: EtcdServer) -> Iterator[Cluster]:
    """A cluster of its own, for a test that kills its leader."""
    yield from started_cluster(tmp_path, etcd)


def nodes_of(node: BrokerProcess) -> list[dict[str, object]]:
    response = requests.get(f"{node.http_url}/api/nodes", auth=GUEST, timeout=5)
    assert response.status_code == 200, response.text
    listed: list[dict[str, object]] = response.json()
    return listed


def test_every_node_reports_the_whole_cluster(cluster: Cluster) -> None:
    leader = cluster.nodes[0]
    names = {Cluster.name_of(node) for node in cluster.nodes}
    leader_only = [Cluster.name_of(leader)]

    def reports_the_cluster(node: BrokerProcess) -> bool:
        listed = {str(entry["name"]): entry for entry in nodes_of(node)}
        leaders = [name for name, entry in listed.items() if entry["cluster_role"] == "leader"]
        return set(listed) == names and leaders == leader_only and all(entry["in_sync"] for entry in listed.values())

    for node in cluster.nodes:
        # Each node reads the others' records and the ISR from etcd every second.
        eventually(lambda node=node: reports_the_cluster(node))
    follower = cluster.nodes[1]
    status = json.loads(ctl_ok(follower, "cluster_status", "--formatter", "json"))
    assert status["leader"] == Cluster.name_of(leader)
    assert status["this_node"] == Cluster.name_of(follower)
    assert sorted(status["in_sync_replicas"]) == sorted(names)
    assert all(endpoint["healthy"] for endpoint in status["etcd"])
    text = ctl_ok(leader, "cluster_status")
    assert f"Cluster status of node {Cluster.name_of(leader)}" in text
    for name in names:
        assert name in text


def test_a_follower_points_api_clients_at_the_leader(cluster: Cluster) -> None:
    leader, follower = cluster.nodes[0], cluster.nodes[1]
    response = requests.get(f"{follower.http_url}/api/queues", auth=GUEST, timeout=5)
    assert response.status_code == 503
    assert response.json()["error"] == "not_leader"
    assert f"http://127.0.0.1:{leader.http_port}" in response.json()["reason"]
    assert requests.get(f"{follower.http_url}/api/nodes", timeout=5).status_code == 401


def test_the_leader_exports_replication_gauges(cluster: Cluster) -> None:
    leader = cluster.nodes[0]

    def gauges() -> dict[str, float]:
        text = requests.get(f"http://127.0.0.1:{leader.metrics_port}/metrics", timeout=5).text
        return {
            line.split(" ")[0]: float(line.split(" ")[1])
            for line in text.splitlines()
            if "_cluster_" in line and not line.startswith("#")
        }

    followers = {Cluster.name_of(node) for node in cluster.nodes[1:]}
    lag_gauges = {f'rabbitmq_cluster_replication_lag_bytes{{node="{name}"}}' for name in followers}

    def with_every_follower() -> dict[str, float] | None:
        values = gauges()
        return values if lag_gauges <= values.keys() else None

    found = eventually(with_every_follower)
    assert found["rabbitmq_cluster_in_sync_replicas"] == 3
    assert found["rabbitmq_cluster_leader"] == 1


def test_quorum_queues_and_streams_keep_their_messages_through_a_failover(own_cluster: Cluster, tmp_path: Path) -> None:
    cluster = own_cluster
    leader = cluster.nodes[0]
    connection = pika.BlockingConnection(pika.URLParameters(leader.url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("quorum-q", durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare("stream-q", durable=True, arguments={"x-queue-type": "stream"})
    for number in range(100):
        for queue in ("quorum-q", "stream-q"):
            channel.basic_publish("", queue, f"m{number}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()
    leader.kill()
    new_leader = cluster.leader(other_than=Cluster.name_of(leader))
    connection = pika.BlockingConnection(pika.URLParameters(new_leader.url))
    channel = connection.channel()
    bodies = []
    while (got := channel.basic_get("quorum-q", auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [f"m{number}".encode() for number in range(100)]
    channel.basic_qos(prefetch_count=100)
    streamed: list[bytes] = []
    channel.basic_consume(
        "stream-q", lambda ch, method, props, body: streamed.append(body), arguments={"x-stream-offset": "first"}
    )
    deadline = time.monotonic() + 10
    while len(streamed) < 100 and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    assert streamed == [f"m{number}".encode() for number in range(100)]
    connection.close()
    hooks = (tmp_path / "hooks.log").read_text().split("\n")
    assert f"elected {leader.data_dir.name}" in hooks
    assert f"elected {new_leader.data_dir.name}" in hooks


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


def test_the_replication_port_refuses_a_stranger_and_garbage(cluster: Cluster) -> None:
    leader = cluster.nodes[0]
    port = leader.listeners["clustering"]
    challenge_frame = 5 + 32
    for payload in (
        frame(ord("a"), b'{"node":"x","proof":"wrong"}'),  # a login with a wrong proof
        b"\xff\xff\xff\xff\xff",  # a frame longer than any login may be
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as stranger:
            assert len(stranger.recv(challenge_frame)) > 0
            stranger.sendall(payload)
            stranger.settimeout(5)
            while stranger.recv(4096):  # until the leader closes it
                pass
    assert "Traceback" not in leader.output
    assert Cluster.name_of(leader) == cluster.leader_name()
    assert len(cluster.in_sync()) == 3


def test_a_cluster_node_neither_keeps_nor_leaves_a_clean_shutdown_mark(tmp_path: Path, etcd: EtcdServer) -> None:
    """Replication changes a follower's files while no broker runs on them, so the mark that
    lets a single node skip crc checks at start must not stand on a cluster node."""
    cluster = Cluster(tmp_path, etcd.endpoint, size=2)
    leader, follower = cluster.nodes
    marks = [node.data_dir / CLEAN_SHUTDOWN_FILE for node in cluster.nodes]
    for node, mark in zip(cluster.nodes, marks, strict=True):
        node.data_dir.mkdir(parents=True)
        mark.touch()  # as a clean stop of a single node on this data dir left it
    try:
        leader.start()
        cluster.leader()
        follower.start()
        cluster.wait_in_sync(2)
        assert not any(mark.exists() for mark in marks)
        follower.stop()
        leader.stop()
        assert not any(mark.exists() for mark in marks)
    finally:
        cluster.stop()
