"""The chaos loop: kill -9 Lavin cluster nodes under confirmed traffic and count what was lost.

    python -m lavin.bench.chaos --duration 300 --nodes 3 [--kills N] [--publishers 4]
    python -m lavin.bench.chaos --failover-kills 20

Starts etcd and an N-node cluster (`lavin.bench.lavin_cluster`) and publishers with confirms
(`lavin.bench.chaos_traffic`). The first form kills a node every duration / (kills + 1)
seconds (the leader, or now and then a random follower), restarting it a few seconds later;
the second only kills the leader, as often as asked, once the cluster confirms again after
the previous kill, and is what `bench/compare --cluster` reports failover times from. At the
end every queue is read whole and the report gives: confirmed sent, lost confirmed (must be
0), duplicated, out of order, kills, reconnects, and failover times (last confirm before a
leader kill to the first confirm after it) p50 / max. Exit status 1 when a confirmed message
was lost, 2 when the cluster could not be run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lavin.bench.chaos_traffic import FAILURES, ConfirmClock, Publisher, QueueCheck, check_queue
from lavin.bench.lavin_cluster import LavinCluster, lavin_cluster

RESTART_DELAY = 3.0  # seconds a killed node stays down
FOLLOWER_SHARE = 0.25  # of the kills in the timed loop that hit a random follower instead of the leader
SETTLE_TIMEOUT = 60.0  # for confirms to flow again before the next failover kill
DRAIN_ATTEMPTS = 5


@dataclass
class Report:
    confirmed: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    kills: int = 0
    leader_kills: int = 0
    reconnects: int = 0
    failover_p50_s: float | None = None
    failover_max_s: float | None = None
    failovers_unmeasured: int = 0  # leader kills with no confirm after them
    failovers: list[float] = field(default_factory=list)

    def lines(self) -> list[str]:
        def seconds(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.2f} s"

        return [
            f"confirmed sent: {self.confirmed}",
            f"lost confirmed: {self.lost}",
            f"duplicated: {self.duplicated}",
            f"out of order: {self.out_of_order}",
            f"kills: {self.kills} ({self.leader_kills} of the leader)",
            f"reconnects: {self.reconnects}",
            f"failover p50: {seconds(self.failover_p50_s)}",
            f"failover max: {seconds(self.failover_max_s)}",
        ]


class Chaos:
    def __init__(self, cluster: LavinCluster, publishers: int, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.clock = ConfirmClock()
        self.stop = threading.Event()
        self.publishers = [Publisher(i, cluster.running_uris, self.clock, self.stop) for i in range(publishers)]
        self.report = Report()
        self.leader_kill_times: list[float] = []

    def kill(self, leader_only: bool) -> None:
        """Kill the leader (or a random follower), keep it down a while, start it again."""
        leader = self.cluster.wait_for_leader()
        victim = leader
        if not leader_only and self.rng.random() < FOLLOWER_SHARE:
            victim = self.rng.choice([node.index for node in self.cluster.nodes if node.index != leader])
        if victim == leader:
            self.leader_kill_times.append(time.monotonic())
            self.report.leader_kills += 1
        self.cluster.kill(victim)
        self.report.kills += 1
        print(f"killed node {victim}{' (leader)' if victim == leader else ''}", file=sys.stderr, flush=True)
        time.sleep(RESTART_DELAY)
        self.cluster.start(victim)

    def confirming_since(self, moment: float) -> bool:
        return self.clock.first_after(moment) is not None

    def timed(self, duration: float, kills: int) -> None:
        interval = duration / (kills + 1)
        started = time.monotonic()
        for number in range(1, kills + 1):
            time.sleep(max(0.0, started + number * interval - time.monotonic()))
            self.kill(leader_only=False)
        time.sleep(max(0.0, started + duration - time.monotonic()))

    def failover_only(self, kills: int) -> None:
        for _ in range(kills):
            settle_from = time.monotonic()
            deadline = settle_from + SETTLE_TIMEOUT
            while not self.confirming_since(settle_from) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.kill(leader_only=True)
        deadline = time.monotonic() + SETTLE_TIMEOUT  # the last kill's failover, too
        while not self.confirming_since(self.leader_kill_times[-1]) and time.monotonic() < deadline:
            time.sleep(0.1)

    def run(self, body: Any) -> Report:
        for publisher in self.publishers:
            publisher.start()
        try:
            body()
        finally:
            self.stop.set()
            for publisher in self.publishers:
                publisher.join()
        self.measure_failovers()
        for publisher in self.publishers:
            self.add(self.drain(publisher))
            self.report.confirmed += sum(publisher.confirmed)
            self.report.reconnects += publisher.reconnects
        return self.report

    def measure_failovers(self) -> None:
        for moment in self.leader_kill_times:
            before, after = self.clock.last_before(moment), self.clock.first_after(moment)
            if before is None or after is None:
                self.report.failovers_unmeasured += 1
            else:
                self.report.failovers.append(after - before)
        if self.report.failovers:
            self.report.failover_p50_s = statistics.median(self.report.failovers)
            self.report.failover_max_s = max(self.report.failovers)

    def drain(self, publisher: Publisher) -> QueueCheck:
        last: Exception | None = None
        for _ in range(DRAIN_ATTEMPTS):
            self.cluster.wait_for_leader()
            try:
                return check_queue(self.rng.choice(self.cluster.running_uris()), publisher)
            except FAILURES as exc:  # the leader moved while reading: read again
                last = exc
                time.sleep(1.0)
        raise RuntimeError(f"could not read queue of publisher {publisher.number}: {last}")

    def add(self, check: QueueCheck) -> None:
        self.report.lost += check.lost
        self.report.duplicated += check.duplicated
        self.report.out_of_order += check.out_of_order


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lavin.bench.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic and kills (default 60)")
    parser.add_argument("--nodes", type=int, default=3, help="cluster size (default 3)")
    parser.add_argument("--kills", type=int, help="kills over --duration (default: one per 15 s)")
    parser.add_argument("--failover-kills", type=int, metavar="N",
                        help="instead: kill only the leader N times, as soon as it confirms again")  # fmt: skip
    parser.add_argument("--publishers", type=int, default=4, help="publishers, a queue each (default 4)")
    parser.add_argument("--seed", type=int, help="for the choice of victims and nodes")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    if args.nodes < 2 or args.publishers < 1:
        parser.error("--nodes must be at least 2 and --publishers at least 1")
    kills = args.kills if args.kills is not None else int(args.duration // 15)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="lavin-chaos-") as workdir:
        try:
            with lavin_cluster(Path(workdir), args.nodes) as cluster:
                chaos = Chaos(cluster, args.publishers, rng)
                if args.failover_kills:
                    report = chaos.run(lambda: chaos.failover_only(args.failover_kills))
                else:
                    report = chaos.run(lambda: chaos.timed(args.duration, kills))
        except RuntimeError as exc:
            print(f"chaos: the cluster could not be run: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(asdict(report)) if args.json else "\n".join(report.lines()))
    return 1 if report.lost else 0


if __name__ == "__main__":
    sys.exit(main())
