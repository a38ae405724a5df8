"""The clustered rows of `bench/compare --cluster`: persistent publishes with confirms on a
3-node Lavin cluster (reached through its leader, and through a follower that proxies to it)
against a quorum queue on a 3-node RabbitMQ cluster, and the Lavin cluster's failover time
over a number of leader kills (`lavin.bench.chaos --failover-kills`).

A cluster that cannot run here makes its columns n/a, with the reason in one line under the
table; the rest of the comparison goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from lavin.bench.brokers import Broker
from lavin.bench.comparison import Measured, Row, Scenario, print_table, run_scenario
from lavin.bench.lavin_cluster import lavin_cluster
from lavin.bench.rabbitmq_cluster import rabbitmq_cluster

SIZE = 3
COLUMNS = ("Lavin cluster, leader", "Lavin cluster, follower", "RabbitMQ cluster")
# Quorum on both: RabbitMQ replicates only such queues; Lavin replicates every durable one alike.
CLUSTER_SCENARIO = Scenario(
    f"persistent, confirms, {SIZE}-node cluster",
    ("throughput", "--prefetch", "1000", "--confirm", "1000", "--persistent", "--size", "16",
     "--queue-type", "quorum", "--verify"),
    "consume_rate", "msg/s", "broker_cpu_us_per_message",
)  # fmt: skip
FAILOVER_MARGIN = 120.0  # seconds per kill the failover run may take before it counts as hung


def lavin_brokers(stack: ExitStack, workdir: Path) -> list[Broker]:
    """The leader and a follower of a fresh Lavin cluster (no pid: the CPU is spread over nodes)."""
    cluster = stack.enter_context(lavin_cluster(workdir / "lavin-cluster", SIZE))
    leader = cluster.wait_for_leader()
    follower = next(node for node in cluster.nodes if node.index != leader)
    return [Broker(COLUMNS[0], cluster.nodes[leader].uri, None), Broker(COLUMNS[1], follower.uri, None)]


def rabbitmq_brokers(stack: ExitStack, workdir: Path) -> list[Broker]:
    cluster = stack.enter_context(rabbitmq_cluster(workdir / "rabbitmq-cluster", SIZE))
    return [Broker(COLUMNS[2], cluster.uris[0], None)]


Starter = Callable[[ExitStack, Path], list[Broker]]


def measure(
    starter: Starter, columns: int, name: str, workdir: Path, duration: float, rounds: int, notes: list[str]
) -> list[list[Measured]]:
    """Rounds of the scenario on each of the `columns` brokers `starter` gives; no runs (n/a)
    for each, and a note, if the cluster does not start."""
    with ExitStack() as stack:
        try:
            brokers = starter(stack, workdir)
        except (RuntimeError, OSError) as exc:  # ClusterUnavailable too
            notes.append(f"{name}: n/a: {' '.join(str(exc).split())[:300]}")
            return [[] for _ in range(columns)]
        runs: list[list[Measured]] = [[] for _ in brokers]
        for _ in range(rounds):
            for broker, broker_runs in zip(brokers, runs, strict=True):
                broker_runs.append(run_scenario(CLUSTER_SCENARIO, broker, duration))
        return runs


def failover_line(kills: int) -> str:
    """p50 / max failover time over `kills` leader kills, from the chaos loop in its own process."""
    command = [sys.executable, "-m", "lavin.bench.chaos", "--failover-kills", str(kills), "--nodes", str(SIZE),
               "--json"]  # fmt: skip
    label = f"Lavin cluster failover over {kills} leader kills (last confirm before to first after)"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=kills * FAILOVER_MARGIN, check=False)
    except subprocess.TimeoutExpired:
        return f"{label}: n/a: timed out"
    if done.returncode not in (0, 1):  # 1 is a report too: it lost a confirmed message
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{label}: n/a: {last[:300]}"
    report = json.loads(done.stdout)
    if report["failover_p50_s"] is None:
        return f"{label}: n/a: no failover measured"
    return (
        f"{label}: p50 {report['failover_p50_s']:.2f} s, max {report['failover_max_s']:.2f} s"
        f" ({report['confirmed']:,} confirmed, {report['lost']} lost, {report['duplicated']} duplicated)"
    )


def run_cluster_rows(workdir: Path, duration: float, rounds: int, failover_kills: int) -> None:
    """Print the clustered table, its notes and the failover line."""
    notes: list[str] = []
    runs = measure(lavin_brokers, 2, "Lavin cluster", workdir, duration, rounds, notes)
    runs += measure(rabbitmq_brokers, 1, "RabbitMQ cluster", workdir, duration, rounds, notes)
    rows: list[Row] = [(CLUSTER_SCENARIO, runs)]
    print()
    print_table(list(COLUMNS), rows)
    for note in notes:
        print(f"\n{note}")
    if failover_kills:
        print(f"\n{failover_line(failover_kills)}")
