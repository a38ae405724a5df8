"""What operators see of a cluster: `/api/nodes` with every member, `/api/cluster`, `lavin
ctl cluster_status`, the cluster gauges, and a follower's management app. The leader is a
broker of lavin.testing whose cluster is a state the test sets (what the clustering node
would report); a single node shows itself as a cluster of one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
from broker_process import hermetic_env
from lavin.broker.runtime.cluster_status import FOLLOWER, LEADER, ClusterMember, ClusterState, EtcdHealth
from lavin.listeners.http import HttpLimits, HttpListener
from lavin.management.follower_app import build_follower_app
from lavin.testing import LavinBroker, running_broker
from prometheus_client.parser import text_string_to_metric_families

GUEST = ("guest", "guest")
TIMEOUT = 30.0


def three_nodes(this_node: str, leader: str = "lavin@a", *, elected: bool = True) -> ClusterState:
    """`leader` leads lavin@b (in sync) and lavin@c (out of sync, behind); `elected`: etcd
    names it as the leader."""
    members = (
        ClusterMember(leader, LEADER, True, "tcp://127.0.0.1:5679", "127.0.0.1:5672", "127.0.0.1:15672"),
        ClusterMember("lavin@b", FOLLOWER, True, "tcp://127.0.0.2:5679", "127.0.0.2:5672", "127.0.0.2:15672", 0, 0.0),
        ClusterMember("lavin@c", FOLLOWER, False, "tcp://127.0.0.3:5679", None, None, 40960, 12.5),
    )
    etcd = (EtcdHealth("http://127.0.0.1:2379", True, "3.5.16"), EtcdHealth("http://127.0.0.1:2381", False, "refused"))
    return ClusterState(this_node, leader if elected else None, members, (leader, "lavin@b"), etcd)


@pytest.fixture(scope="module")
def leader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LavinBroker]:
    """A broker that leads the three-node cluster as node `lavin@a`."""
    data_dir = tmp_path_factory.mktemp("leader") / "data"
    state: dict[str, ClusterState] = {}
    with running_broker(data_dir, cluster=lambda: state["now"]) as broker:
        node = get(broker, "/api/overview")["node"]  # named after the host
        state["now"] = three_nodes(node, leader=node)
        yield broker


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LavinBroker]:
    with running_broker(tmp_path_factory.mktemp("single") / "data") as broker:
        yield broker


def get(broker: LavinBroker, path: str, status: int = 200) -> Any:
    response = requests.get(broker.http_url + path, auth=GUEST, timeout=TIMEOUT)
    assert response.status_code == status, response.text
    return response.json()


def ctl(broker: LavinBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lavin", "ctl", "--data-dir", str(broker.data_dir), *args],
        capture_output=True, text=True, timeout=TIMEOUT, env=hermetic_env(),
    )  # fmt: skip


# ---- the leader's management API ----------------------------------------------------------


def test_nodes_lists_every_member_with_its_role(leader: LavinBroker) -> None:
    nodes = get(leader, "/api/nodes")
    this = get(leader, "/api/overview")["node"]
    assert [node["name"] for node in nodes] == [this, "lavin@b", "lavin@c"]
    here, synced, behind = nodes
    assert here["os_pid"] and here["mem_used"] > 0  # this node in full
    assert here | {"cluster_role": "leader", "in_sync": True} == here
    assert here["replication_lag_bytes"] is None and here["replication_lag_seconds"] is None
    assert synced == {
        "name": "lavin@b", "type": "disc", "running": True, "being_drained": False, "partitions": [],
        "cluster_links": [], "cluster_role": "follower", "in_sync": True, "replication_lag_bytes": 0,
        "replication_lag_seconds": 0.0,
    }  # fmt: skip
    assert behind["in_sync"] is False
    assert (behind["replication_lag_bytes"], behind["replication_lag_seconds"]) == (40960, 12.5)


def test_each_member_answers_by_name(leader: LavinBroker) -> None:
    assert get(leader, "/api/nodes/lavin@c")["replication_lag_bytes"] == 40960
    this = get(leader, "/api/overview")["node"]
    assert "fd_used" in get(leader, f"/api/nodes/{this}")
    assert get(leader, "/api/nodes/lavin@z", status=404) == {"error": "Object Not Found", "reason": "Not Found"}


def test_cluster_reports_the_state(leader: LavinBroker) -> None:
    this = get(leader, "/api/overview")["node"]
    cluster = get(leader, "/api/cluster")
    assert cluster["clustering"] is True
    assert (cluster["this_node"], cluster["leader"], cluster["in_sync_replicas"]) == (this, this, [this, "lavin@b"])
    assert cluster["nodes"][2] == {
        "name": "lavin@c", "role": "follower", "in_sync": False, "replication_uri": "tcp://127.0.0.3:5679",
        "amqp": None, "http": None, "lag_bytes": 40960, "lag_seconds": 12.5,
    }  # fmt: skip
    assert cluster["etcd"] == [
        {"endpoint": "http://127.0.0.1:2379", "healthy": True, "detail": "3.5.16"},
        {"endpoint": "http://127.0.0.1:2381", "healthy": False, "detail": "refused"},
    ]


def test_a_single_node_is_a_cluster_of_one(single: LavinBroker) -> None:
    this = get(single, "/api/overview")["node"]
    [node] = get(single, "/api/nodes")
    assert node["name"] == this and "fd_used" in node
    assert (node["cluster_role"], node["in_sync"]) == ("leader", True)
    assert node["replication_lag_bytes"] is None and node["replication_lag_seconds"] is None
    cluster = get(single, "/api/cluster")
    assert cluster == {
        "clustering": False, "this_node": this, "leader": this, "in_sync_replicas": [this], "etcd": [],
        "nodes": [{
            "name": this, "role": "leader", "in_sync": True, "replication_uri": None,
            "amqp": f"127.0.0.1:{single.port}", "http": f"127.0.0.1:{single.http_port}",
            "lag_bytes": None, "lag_seconds": None,
        }],
    }  # fmt: skip


# ---- lavin ctl cluster_status -------------------------------------------------------------


def test_cluster_status_prints_the_sections(leader: LavinBroker) -> None:
    this = get(leader, "/api/overview")["node"]
    result = ctl(leader, "cluster_status")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Cluster status of node {this} ...\nBasics\n\nCluster name: {this}\n")
    sections = _sections(result.stdout)
    assert sections["Running Nodes"] == [
        f"{this} (leader)",
        "lavin@b (follower, in sync)",
        "lavin@c (follower, not in sync)",
    ]
    assert sections["Leader"] == [this]
    assert sections["In-sync replicas"] == [this, "lavin@b"]
    assert sections["Replication lag"] == ["lavin@b: 0 bytes, 0.0 seconds", "lavin@c: 40960 bytes, 12.5 seconds"]
    assert sections["etcd"] == ["http://127.0.0.1:2379: healthy (3.5.16)", "http://127.0.0.1:2381: unhealthy (refused)"]


def test_cluster_status_json_is_the_api_document(leader: LavinBroker) -> None:
    result = ctl(leader, "cluster_status", "--formatter", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == get(leader, "/api/cluster")


def test_cluster_status_of_a_single_node(single: LavinBroker) -> None:
    result = ctl(single, "cluster_status")
    assert result.returncode == 0, result.stderr
    sections = _sections(result.stdout)
    assert sections["Replication lag"] == ["none: no followers"]
    assert sections["etcd"] == ["none: clustering is not enabled"]


def _sections(output: str) -> dict[str, list[str]]:
    """The section titles and their lines (each section: title, blank line, lines, blank line)."""
    blocks = output.split("\n\n")
    titles = [block.splitlines()[-1] for block in blocks[:-1]]
    return {title: block.splitlines() for title, block in zip(titles, blocks[1:], strict=True)}


# ---- Prometheus ---------------------------------------------------------------------------


def _samples(broker: LavinBroker, view: str = "") -> dict[str, list[tuple[dict[str, str], float]]]:
    response = requests.get(f"{broker.http_url}/metrics{view}", auth=GUEST, params={"prefix": "lavin"}, timeout=30)
    response.raise_for_status()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


@pytest.mark.parametrize("view", ["", "/per-object"])
def test_cluster_gauges(leader: LavinBroker, view: str) -> None:
    samples = _samples(leader, view)
    assert samples["lavin_cluster_leader"] == [({}, 1.0)]
    assert samples["lavin_cluster_in_sync_replicas"] == [({}, 2.0)]
    by_node = {"lavin@b": 0.0, "lavin@c": 40960.0}
    assert samples["lavin_cluster_replication_lag_bytes"] == [({"node": node}, lag) for node, lag in by_node.items()]
    by_node = {"lavin@b": 0.0, "lavin@c": 12.5}
    assert samples["lavin_cluster_replication_lag_seconds"] == [({"node": node}, lag) for node, lag in by_node.items()]


def test_a_single_node_has_no_cluster_gauges(single: LavinBroker) -> None:
    samples = _samples(single)
    assert "lavin_queues" in samples
    cluster_gauges = ("lavin_cluster_leader", "lavin_cluster_in_sync", "lavin_cluster_replication")
    assert not [name for name in samples if name.startswith(cluster_gauges)]


# ---- a follower's management app ----------------------------------------------------------


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": aiohttp.encode_basic_auth(user, password)}


async def _follower_answers(data_dir: Path, socket_path: Path, state: ClusterState) -> dict[str, Any]:
    """What the follower app answers over TCP and over its control socket."""
    limits = HttpLimits(max_connections=16, idle_timeout=10)
    http = HttpListener(build_follower_app(lambda: state, data_dir, trusted=False), "127.0.0.1", 0, "follower", limits)
    control = HttpListener(
        build_follower_app(lambda: state, data_dir, trusted=True), "127.0.0.1", None, "follower control", limits,
        unix_path=socket_path,
    )  # fmt: skip
    await http.start()
    await control.start()
    answers: dict[str, Any] = {}
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            base = f"http://127.0.0.1:{http.port}"
            guest = _basic("guest", "guest")
            for key, path, auth in (
                ("anonymous", "/api/nodes", {}),
                ("wrong password", "/api/nodes", _basic("guest", "nope")),
                ("nodes", "/api/nodes", guest),
                ("node", "/api/nodes/lavin@c", guest),
                ("no node", "/api/nodes/lavin@z", guest),
                ("cluster", "/api/cluster", guest),
                ("overview", "/api/overview", guest),
                ("queues", "/api/queues", guest),
                ("management user", "/api/nodes", _basic("watcher", "watcher")),
            ):
                async with session.get(base + path, headers=auth) as response:
                    answers[key] = (response.status, await response.json(), response.headers.get("WWW-Authenticate"))
            async with session.delete(base + "/api/queues/%2F/q", headers=guest) as response:
                answers["delete"] = (response.status, await response.json(), None)
        connector = aiohttp.UnixConnector(path=str(socket_path))
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.get("http://localhost/api/cluster") as response,
        ):
            answers["control"] = (response.status, await response.json(), None)
    finally:
        await control.stop()
        await http.stop()
    return answers


@pytest.fixture(scope="module")
def follower_answers(leader: LavinBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The leader's users file (its own writer made it) serves the follower's logins."""
    watcher = {"password": "watcher", "tags": "management"}
    response = requests.put(f"{leader.http_url}/api/users/watcher", json=watcher, auth=GUEST, timeout=TIMEOUT)
    assert response.status_code in (201, 204), response.text
    socket_path = tmp_path_factory.mktemp("follower") / "control.sock"
    return asyncio.run(_follower_answers(leader.data_dir, socket_path, three_nodes("lavin@b")))


def test_a_follower_asks_for_a_login(follower_answers: dict[str, Any]) -> None:
    for key in ("anonymous", "wrong password"):
        status, body, challenge = follower_answers[key]
        assert (status, body["error"], challenge) == (401, "not_authorized", 'Basic realm="RabbitMQ Management"')
    status, body, _ = follower_answers["management user"]
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Not monitor user"})


def test_a_follower_reports_the_cluster(follower_answers: dict[str, Any]) -> None:
    status, nodes, _ = follower_answers["nodes"]
    assert status == 200
    assert [(node["name"], node["cluster_role"], node["in_sync"]) for node in nodes] == [
        ("lavin@a", "leader", True),
        ("lavin@b", "follower", True),
        ("lavin@c", "follower", False),
    ]
    assert follower_answers["node"][1]["replication_lag_seconds"] == 12.5
    assert follower_answers["no node"][0] == 404
    status, cluster, _ = follower_answers["cluster"]
    assert (status, cluster["this_node"], cluster["leader"], cluster["clustering"]) == (200, "lavin@b", "lavin@a", True)
    assert follower_answers["control"] == (200, cluster, None)
    status, overview, _ = follower_answers["overview"]
    assert overview == {
        "node": "lavin@b", "cluster_name": "lavin@a", "cluster_role": "follower", "leader": "lavin@a",
        "product_name": "Lavin",
    }  # fmt: skip


def test_a_follower_sends_everything_else_to_the_leader(follower_answers: dict[str, Any]) -> None:
    reason = "This node (lavin@b) is a follower; the leader is lavin@a, its management API is at http://127.0.0.1:15672"
    for key in ("queues", "delete"):
        assert follower_answers[key][:2] == (503, {"error": "not_leader", "reason": reason})


def test_a_follower_without_a_leader_says_so(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, Any]:
        app = build_follower_app(lambda: three_nodes("lavin@b", elected=False), tmp_path, trusted=True)
        listener = HttpListener(app, "127.0.0.1", None, "follower control", HttpLimits(4, 10), unix_path=tmp_path / "s")
        await listener.start()
        try:
            connector = aiohttp.UnixConnector(path=str(tmp_path / "s"))
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.get("http://localhost/api/queues") as response,
            ):
                return response.status, await response.json()
        finally:
            await listener.stop()

    assert asyncio.run(scenario()) == (
        503, {"error": "not_leader", "reason": "This node (lavin@b) is a follower; no leader is elected yet"}
    )  # fmt: skip
