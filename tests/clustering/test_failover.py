"""Failover of a three-node cluster on loopback, with a real etcd: the leader killed with -9
in the middle of confirmed publishing, a follower killed and brought back, etcd restarted
under traffic, and the leader cut off from etcd."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clustering.cluster import Cluster, Publisher, check_delivery, declare_queue, drain
from lavin.testing.etcd_server import EtcdServer
from tcp_proxy import CuttableProxy

pytestmark = pytest.mark.timeout(180)

FAILOVER_LIMIT = 10.0  # seconds from the kill until a new leader serves


@pytest.fixture
def cluster(tmp_path: Path, etcd: EtcdServer) -> Iterator[Cluster]:
    nodes = Cluster(tmp_path, etcd.endpoint)
    nodes.start()
    yield nodes
    nodes.stop()


def publishing(cluster: Cluster, count: int = 3) -> list[Publisher]:
    return [cluster.publisher(number) for number in range(count)]


def confirms_after(publishers: list[Publisher], moment: float) -> float | None:
    """When the first confirm after `moment` came, over all publishers."""
    times = [t for publisher in publishers for t in publisher.confirm_times if t > moment]
    return min(times) if times else None


def wait_for_confirms(publishers: list[Publisher], after: float, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        first = confirms_after(publishers, after)
        if first is not None:
            return first
        time.sleep(0.05)
    raise AssertionError(f"no confirm within {timeout} s")


def test_a_killed_leader_is_replaced_and_no_confirmed_message_is_lost(cluster: Cluster) -> None:
    leader = cluster.leader()
    declare_queue(leader)
    cluster.wait_in_sync(3)
    publishers = publishing(cluster)
    time.sleep(3)
    assert all(publisher.confirmed for publisher in publishers)
    killed_at = time.monotonic()
    leader.kill()
    new_leader = cluster.leader(other_than=Cluster.name_of(leader), timeout=FAILOVER_LIMIT + 5)
    assert time.monotonic() - killed_at < FAILOVER_LIMIT  # elected, and its AMQP port answers
    wait_for_confirms(publishers, killed_at, 15)  # the publishers found it
    time.sleep(1)
    for publisher in publishers:
        publisher.finish()
    check_delivery(publishers, drain(new_leader))


def test_a_follower_may_take_over_as_soon_as_etcd_names_it_in_sync(tmp_path: Path, etcd: EtcdServer) -> None:
    """etcd's ISR names a follower only once its data dir is whole: killed the moment it
    does, the leader is replaced by that follower."""
    cluster = Cluster(tmp_path, etcd.endpoint)
    try:
        leader, *followers = cluster.nodes
        leader.start()
        cluster.leader()
        for follower in followers:
            follower.start()
        deadline = time.monotonic() + 30
        while len(cluster.in_sync()) < 2:
            assert time.monotonic() < deadline, "no follower joined the in-sync replicas"
            time.sleep(0.01)
        killed_at = time.monotonic()
        leader.kill()
        cluster.leader(other_than=Cluster.name_of(leader), timeout=FAILOVER_LIMIT + 5)
        assert time.monotonic() - killed_at < FAILOVER_LIMIT
    finally:
        cluster.stop()


def test_a_follower_catches_up_and_rejoins_the_in_sync_replicas(cluster: Cluster) -> None:
    leader = cluster.leader()
    declare_queue(leader)
    cluster.wait_in_sync(3)
    follower = cluster.followers(leader)[0]
    follower_name = Cluster.name_of(follower)
    publishers = publishing(cluster, 2)
    time.sleep(1)
    follower.kill()
    deadline = time.monotonic() + 10
    while follower_name in cluster.in_sync() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert follower_name not in cluster.in_sync()
    time.sleep(2)  # it misses these
    follower.start()
    assert follower_name in cluster.wait_in_sync(3)
    for publisher in publishers:
        publisher.finish()
    # The follower has every confirmed message: it leads once the leader goes.
    leader.kill()
    new_leader = cluster.leader(other_than=Cluster.name_of(leader))
    check_delivery(publishers, drain(new_leader))


def test_etcd_restarting_under_traffic_crashes_no_node(cluster: Cluster, etcd: EtcdServer) -> None:
    leader = cluster.leader()
    declare_queue(leader)
    cluster.wait_in_sync(3)
    publishers = publishing(cluster, 2)
    time.sleep(1)
    etcd.restart()
    restarted_at = time.monotonic()
    wait_for_confirms(publishers, restarted_at, 15)
    time.sleep(2)
    for publisher in publishers:
        publisher.finish()
    assert all(node.running for node in cluster.nodes)
    # The lease outlived the short outage: the same node still leads.
    assert cluster.leader().data_dir == leader.data_dir
    check_delivery(publishers, drain(leader))


def test_a_leader_cut_off_from_etcd_stops_before_another_is_elected(tmp_path: Path, etcd: EtcdServer) -> None:
    with CuttableProxy("127.0.0.1", etcd.client_port) as proxy:
        cluster = Cluster(tmp_path, etcd.endpoint)
        # The first node reaches etcd through the proxy only; it starts alone, so it leads.
        cluster.nodes[0] = cluster._node(tmp_path / "node0", f"http://127.0.0.1:{proxy.port}")
        cluster.nodes[0].start()
        try:
            leader = cluster.leader()
            assert leader is cluster.nodes[0]
            declare_queue(leader)
            for node in cluster.nodes[1:]:
                node.start()
            cluster.wait_in_sync(3)
            old_name = Cluster.name_of(leader)
            publisher = cluster.publisher(0)  # starts on the leader, moves on when it fails
            time.sleep(1)
            proxy.cut()
            cut_at = time.monotonic()
            stopped_at = None
            elected_at = None
            deadline = cut_at + 20
            while time.monotonic() < deadline and (stopped_at is None or elected_at is None):
                now = time.monotonic()
                if stopped_at is None and publisher.errors:
                    stopped_at = now
                if elected_at is None and cluster.leader_name() not in (None, old_name):
                    elected_at = now
                time.sleep(0.05)
            assert stopped_at is not None, "the cut-off leader kept taking publishes"
            assert elected_at is not None, "no new leader"
            assert stopped_at < elected_at
            wait_for_confirms([publisher], elected_at, 15)  # the client found the new leader
            publisher.finish()
            assert leader.running  # it stepped down; it did not die
            new_leader = cluster.leader(other_than=old_name)
            check_delivery([publisher], drain(new_leader))
            proxy.restore()
        finally:
            cluster.stop()
