"""Lavin against RabbitMQ and any further brokers on this machine: the same lavin-perf scenarios on each.

    bench/compare [--duration 5] [--rounds 3] [--connections 1000] [--queues 2000] [--only WORD]
                  [--shovel-messages 200000] [--peer NAME=URI[,START_CMD]] [--peer-pid NAME=PID]
                  [--no-rabbitmq] [--cluster [--failover-kills 20]]
                  [--scale [--scale-messages N] [--scale-queues N] [--scale-bindings N] [--scale-connections N]]

Starts a Lavin and a private RabbitMQ node (`lavin.bench.brokers`; rabbitmq-server is
installed with apt-get when missing), both with AMQPS on a certificate made for the run,
and the peers (`lavin.bench.peers`: started from START_CMD, or already running at URI),
runs every scenario on each broker in turn, then again (A B C A B C ...) so machine noise
hits all, and prints a Markdown table of the medians: the figure compared, the ratio of
Lavin to each other broker, and each broker's CPU time per message (or queue, or
connection) read from /proc when its pid is known. Last come the shovel rows
(`lavin.bench.shovel`): a backlog moved by each broker's own shovel, queue to queue and to
a second broker of the same kind. With `--scale`, a table of LavinMQ's published scale claims
follows (`lavin.bench.scale_rows`), each group of rows on fresh brokers; with `--cluster`, one
(`lavin.bench.cluster_rows`) of persistent publishes with confirms on a 3-node Lavin cluster
against a 3-node RabbitMQ cluster's quorum queue, and the Lavin cluster's failover time.
A scenario a broker cannot run (AMQP over WebSocket on RabbitMQ 3.10, AMQPS on a peer
without `{amqps_port}`, a figure read from /proc without a pid) shows n/a.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lavin.bench.brokers import Broker, Transport, ensure_rabbitmq_installed, lavin, rabbitmq, write_certificates
from lavin.bench.load import WorkerFailed
from lavin.bench.measure import wait_until_idle
from lavin.bench.peers import PeerSpec, parse_peer, parse_peer_pid, peer
from lavin.bench.shovel import run_shovel

RUN_TIMEOUT_MARGIN = 180.0  # on top of a scenario's duration: set-up, draining, queue deletion


@dataclass(frozen=True)
class Scenario:
    label: str
    arguments: tuple[str, ...]  # for lavin-perf
    metric: str  # dotted key of the figure compared
    unit: str
    cpu_metric: str  # dotted key of the broker's CPU µs per operation
    timed: bool = True  # takes --duration
    transport: Transport = Transport.AMQP


@dataclass(frozen=True)
class ShovelScenario:
    """A backlog moved by the broker's own shovel (`lavin.bench.shovel`), not a lavin-perf run."""

    label: str
    count: int
    remote: bool  # to a second broker of the same kind, rather than to a queue beside the source
    size: int = 100
    unit: str = "msg/s"


@dataclass(frozen=True)
class Measured:
    metric: float | None
    cpu: float | None


class Labelled(Protocol):
    """What a table row shows of its scenario."""

    @property
    def label(self) -> str: ...

    @property
    def unit(self) -> str: ...


# A scenario and its runs on each broker, in the order of the table's columns.
Row = tuple[Labelled, list[list[Measured]]]
# Starts a second broker of the same kind as a column's, named with this suffix.
TwinStarter = Callable[[str], AbstractContextManager[Broker]]
SHOVEL_PLUGINS = ("rabbitmq_shovel",)


BODY_SIZES = (("1 KiB", 1 << 10, 1000), ("64 KiB", 1 << 16, 100), ("1 MiB", 1 << 20, 10), ("16 MiB", 1 << 24, 2))
BACKLOG_BYTES = 10**9  # lavin-perf backlog --backlog-bytes 10000000000 for the 10 GB of the full run


def scenarios(connections: int, churn_queues: int) -> tuple[Scenario, list[Scenario]]:
    """The connection scenario (measured once, on fresh brokers) and the repeated ones."""
    message = ("--size", "16")
    per_message = "broker_cpu_us_per_message"
    idle = Scenario(
        f"idle connections ({connections:,}), RSS", ("connections", "--count", str(connections)),
        "broker_rss_kib_per_connection", "KiB/conn", "broker_cpu_us_per_connection", timed=False,
    )  # fmt: skip
    repeated = [
        Scenario("autoack throughput", ("throughput", "--autoack", *message), "consume_rate", "msg/s", per_message),
        Scenario("manual ack, prefetch 1000", ("throughput", "--prefetch", "1000", *message),
                 "consume_rate", "msg/s", per_message),
        Scenario("confirms (window 1000), autoack", ("throughput", "--autoack", "--confirm", "1000", *message),
                 "consume_rate", "msg/s", per_message),
        # Manual acks: an autoack consumer that keeps up lets a broker skip the disk altogether.
        Scenario("persistent, durable queue, confirms, manual ack",
                 ("throughput", "--prefetch", "1000", "--confirm", "1000", "--persistent", *message),
                 "consume_rate", "msg/s", per_message),
        Scenario("publish-only", ("publish-only", *message), "publish_rate", "msg/s", per_message),
        Scenario("latency p99 at 1,000 msg/s", ("latency", "--rate", "1000", "--autoack", *message),
                 "latency_ms.p99", "ms", per_message),
        Scenario("queue declare+bind", ("queue-churn", "--count", str(churn_queues)),
                 "declare_bind_rate", "queues/s", "broker_cpu_us_per_queue", timed=False),
        Scenario("AMQPS autoack throughput", ("throughput", "--autoack", *message), "consume_rate", "msg/s",
                 per_message, transport=Transport.AMQPS),
        Scenario("AMQPS confirms (window 1000), autoack", ("throughput", "--autoack", "--confirm", "1000", *message),
                 "consume_rate", "msg/s", per_message, transport=Transport.AMQPS),
        Scenario("AMQP over WebSocket autoack throughput", ("throughput", "--autoack", *message), "consume_rate",
                 "msg/s", per_message, transport=Transport.WEBSOCKET),
        *(Scenario(f"{name} bodies, manual ack, prefetch {prefetch}",
                   ("throughput", "--size", str(size), "--prefetch", str(prefetch)),
                   "consume_mb_per_s", "MB/s", per_message)
          for name, size, prefetch in BODY_SIZES),
        # Confirms keep the publisher within a window of the broker: unchecked, it runs so far ahead
        # of 100 queues' deliveries that its last round trip waits behind them for tens of seconds.
        Scenario("fan-out to 100 queues, a consumer each, confirms", ("fanout", "--queues", "100", "--confirm", "1000",
                 *message), "consume_rate", "deliveries/s", per_message),
        # Producers each cycle over the 4 keys; the consumers are 4 connections, a queue each.
        Scenario("4 queues, 4 producers, 4 consumers, manual ack",
                 ("many-queues", "--queues", "4", "--connections", "4", "--producers", "4", "--prefetch", "1000",
                  *message), "consume_rate", "msg/s", per_message),
        Scenario("topic, 10,000 wildcard bindings, 10 queues", ("topic", "--queues", "10", "--bindings", "10000",
                 *message), "consume_rate", "msg/s", per_message),
        Scenario("1,000 connections at 100 msg/s each, 1,000 consumers",
                 ("many-connections", "--connections", "1000", "--rate-per-connection", "100", "--prefetch", "100",
                  *message), "consume_rate", "msg/s", per_message),
        Scenario("10,000 queues, a consumer each", ("many-queues", "--queues", "10000", "--prefetch", "100", *message),
                 "consume_rate", "msg/s", per_message),
        # Both brokers keep their data under the temporary directory: dd writes to the same disk.
        Scenario(f"backlog of {BACKLOG_BYTES / 1e9:g} GB (64 KiB, persistent), 10 consumers",
                 ("backlog", "--backlog-bytes", str(BACKLOG_BYTES)), "consume_mb_per_s", "MB/s", per_message,
                 timed=False),
        Scenario(f"dd to the same disk ({BACKLOG_BYTES / 1e9:g} GB, O_DIRECT)",
                 ("disk", "--dd-dir", tempfile.gettempdir(), "--bytes", str(BACKLOG_BYTES)),
                 "dd.write_mb_per_s", "MB/s", per_message, timed=False),
    ]  # fmt: skip
    return idle, repeated


def shovel_scenarios(count: int) -> list[ShovelScenario]:
    shape = f"{count:,} x 100 B, transient, on-confirm"
    return [ShovelScenario(f"shovel, queue to queue on one broker ({shape})", count, remote=False),
            ShovelScenario(f"shovel, broker to broker ({shape})", count, remote=True)]  # fmt: skip


def dig(result: dict[str, Any], dotted: str) -> float | None:
    value: Any = result
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value) if value is not None else None


def show(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def run_perf(
    label: str,
    arguments: Sequence[str],
    broker: Broker,
    timeout: float,
    transport: Transport = Transport.AMQP,
    launcher: Sequence[str] = (),
) -> dict[str, Any] | None:
    """lavin-perf `arguments` against `broker` (with --broker-pid once it idles, if its pid is
    known): the results; None when it could not run, failed or lost messages, said on stderr
    after "NAME  label: ", a line that a success leaves for the caller to end. `launcher` goes
    before the command (`taskset -c 1` runs the load generator on one CPU)."""
    print(f"{broker.name:8}  {label}: ", end="", file=sys.stderr, flush=True)
    reach = broker.perf_arguments(transport)
    if reach is None:
        print(f"n/a: no {transport.value} listener", file=sys.stderr)
        return None
    command = [*launcher, sys.executable, "-m", "lavin.bench.perf", *arguments, *reach, "--json"]
    if broker.pid is not None:
        command += ["--broker-pid", str(broker.pid)]
        wait_until_idle(broker.pid)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print("timed out", file=sys.stderr)
        return None
    if done.returncode != 0:
        print(f"failed ({done.returncode}): {done.stderr.strip()}", file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(done.stdout)
    lost = result.get("verify", {}).get("lost", 0)
    if lost:  # a figure from a broker that lost messages compares nothing
        print(f"failed: {lost} messages lost ({result['verify']})", file=sys.stderr)
        return None
    return result


def run_scenario(scenario: Scenario, broker: Broker, duration: float, launcher: Sequence[str] = ()) -> Measured:
    if broker.pid is None and scenario.metric.startswith("broker_"):
        print(f"{broker.name:8}  {scenario.label}: n/a: read from the broker's /proc entry, and its pid is not known",
              file=sys.stderr)  # fmt: skip
        return Measured(None, None)
    arguments = [*scenario.arguments, "--duration", str(duration)] if scenario.timed else scenario.arguments
    result = run_perf(scenario.label, arguments, broker, duration + RUN_TIMEOUT_MARGIN, scenario.transport, launcher)
    if result is None:
        return Measured(None, None)
    measured = Measured(dig(result, scenario.metric), dig(result, scenario.cpu_metric))
    tls = result.get("tls")
    session = f" ({tls['version']} {tls['cipher']})" if tls else ""
    print(f"{show(measured.metric)} {scenario.unit}, broker CPU {show(measured.cpu)} µs/op{session}", file=sys.stderr)
    return measured


def run_shovel_scenario(scenario: ShovelScenario, broker: Broker, twin: Broker | None) -> Measured:
    print(f"{broker.name:8}  {scenario.label}: ", end="", file=sys.stderr, flush=True)
    if broker.shovels is None:
        print("n/a: the comparison cannot set this broker's shovels", file=sys.stderr)
        return Measured(None, None)
    if scenario.remote and twin is None:
        print("n/a: no second broker of this kind", file=sys.stderr)
        return Measured(None, None)
    for pid in (broker.pid, twin.pid if twin is not None else None):
        if pid is not None:
            wait_until_idle(pid)
    try:
        moved = run_shovel(broker, twin, scenario.count, scenario.size)
    except (OSError, RuntimeError, WorkerFailed, subprocess.SubprocessError) as exc:  # n/a; the table goes on
        print(f"failed: {exc}", file=sys.stderr)
        return Measured(None, None)
    print(f"{show(moved.rate)} {scenario.unit}, broker CPU {show(moved.cpu_us_per_message)} µs/op", file=sys.stderr)
    return Measured(moved.rate, moved.cpu_us_per_message)


def start_twin(stack: ExitStack, start: TwinStarter) -> Broker | None:
    """A second broker until `stack` closes; None (and the row shows n/a) if it does not start."""
    try:
        return stack.enter_context(start("-2"))
    except RuntimeError as exc:
        print(f"a second broker did not start: {exc}", file=sys.stderr)
        return None


def run_shovel_rows(
    scenario: ShovelScenario, brokers: list[Broker], twin_starters: list[TwinStarter | None], rounds: int
) -> Row:
    """Rounds as for the other rows; broker to broker starts a twin of each broker for the row."""
    runs: list[list[Measured]] = [[] for _ in brokers]
    with ExitStack() as twins_running:
        twins = [start_twin(twins_running, start) if start is not None and scenario.remote else None
                 for start in twin_starters]  # fmt: skip
        for _ in range(rounds):
            for broker, twin, broker_runs in zip(brokers, twins, runs, strict=True):
                broker_runs.append(run_shovel_scenario(scenario, broker, twin))
    return scenario, runs


def median(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def print_table(names: list[str], rows: list[Row], title: str = "scenario") -> None:
    """Medians per broker, the first broker's ratio to each other one, then CPU per operation;
    `title` heads the column of labels."""
    first, others = names[0], names[1:]
    header = [title, "unit", *names, *(f"{first}/{other}" for other in others),
              f"broker CPU µs/op: {first}", *others]  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    for scenario, runs in rows:
        metrics = [median([run.metric for run in broker_runs]) for broker_runs in runs]
        cpus = [median([run.cpu for run in broker_runs]) for broker_runs in runs]
        ours = metrics[0]
        ratios = [f"{ours / theirs:.2f}" if ours is not None and theirs else "n/a" for theirs in metrics[1:]]
        cells = [scenario.label, scenario.unit, *map(show, metrics), *ratios, *map(show, cpus)]
        print("| " + " | ".join(cells) + " |")


def peer_pids(parser: argparse.ArgumentParser, peers: list[PeerSpec], given: list[tuple[str, int]]) -> dict[str, int]:
    names = [spec.name for spec in peers]
    taken = {"Lavin", "RabbitMQ"}
    for name in names:
        if name in taken:
            parser.error(f"--peer {name}: that name is taken")
        taken.add(name)
    pids = dict(given)
    for name in pids:
        if name not in names:
            parser.error(f"--peer-pid {name}: no --peer of that name")
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per timed run (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per broker and scenario (default 3)")
    parser.add_argument("--connections", type=int, default=1000, help="idle connections to open (default 1000)")
    parser.add_argument("--queues", type=int, default=2000, help="queues to declare, bind, delete (default 2000)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="WORD",
        help="run only the scenarios whose label contains WORD (repeatable; --scale rows too)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        type=parse_peer,
        metavar="NAME=URI[,START_CMD]",
        help="also compare against this broker, started from START_CMD (placeholders: {data_dir}, {cert}, {key}, "
        "{ca}, {NAME_port}) or already running at URI (repeatable)",
    )
    parser.add_argument(
        "--peer-pid",
        action="append",
        default=[],
        type=parse_peer_pid,
        metavar="NAME=PID",
        help="the process whose CPU time counts for peer NAME (default: START_CMD's; none for a running peer)",
    )
    parser.add_argument(
        "--shovel-messages",
        type=int,
        default=200_000,
        metavar="N",
        help="messages each shovel row moves (default 200000)",
    )
    parser.add_argument("--no-rabbitmq", action="store_true", help="compare against the peers only")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="also the 3-node cluster rows: Lavin on etcd against RabbitMQ with a quorum queue",
    )
    parser.add_argument(
        "--failover-kills",
        type=int,
        default=20,
        metavar="N",
        help="leader kills the --cluster failover time is measured over (default 20; 0 = none)",
    )
    # Imported here: the scale rows build on this module's runs and table.
    from lavin.bench.scale_rows import add_scale_options, run_scale_rows

    add_scale_options(parser)
    args = parser.parse_args()
    if args.shovel_messages < 1:
        parser.error("--shovel-messages must be at least 1")
    pids = peer_pids(parser, args.peer, args.peer_pid)
    if not args.no_rabbitmq:
        ensure_rabbitmq_installed()
    idle, repeated = scenarios(args.connections, args.queues)
    shovel_rows = shovel_scenarios(args.shovel_messages)
    if args.only:
        repeated = [scenario for scenario in repeated if any(word in scenario.label for word in args.only)]
        shovel_rows = [scenario for scenario in shovel_rows if any(word in scenario.label for word in args.only)]
    # The shovel plugin only when a shovel row runs: the other rows keep RabbitMQ as it was.
    plugins = SHOVEL_PLUGINS if shovel_rows else ()
    with tempfile.TemporaryDirectory(prefix="lavin-compare-") as workdir, ExitStack() as stack:
        certificates = write_certificates(Path(workdir) / "tls")
        brokers = [stack.enter_context(lavin(Path(workdir), certificates=certificates))]
        twin_starters: list[TwinStarter | None] = [lambda instance: lavin(Path(workdir), instance=instance)]
        if not args.no_rabbitmq:
            brokers.append(stack.enter_context(rabbitmq(Path(workdir), certificates=certificates, plugins=plugins)))
            twin_starters.append(lambda instance: rabbitmq(Path(workdir), plugins=plugins, instance=instance))
        for spec in args.peer:
            brokers.append(stack.enter_context(peer(spec, Path(workdir), certificates, pids.get(spec.name))))
            twin_starters.append(None)
        # First, while the brokers are fresh: memory freed by message runs would hide connection growth.
        rows: list[Row] = []
        if not args.only or any(word in idle.label for word in args.only):
            rows.append((idle, [[run_scenario(idle, broker, args.duration)] for broker in brokers]))
        for scenario in repeated:
            runs: list[list[Measured]] = [[] for _ in brokers]
            for _ in range(args.rounds):
                for broker, broker_runs in zip(brokers, runs, strict=True):
                    broker_runs.append(run_scenario(scenario, broker, args.duration))
            rows.append((scenario, runs))
        for shovel_row in shovel_rows:
            rows.append(run_shovel_rows(shovel_row, brokers, twin_starters, args.rounds))
    print_table([broker.name for broker in brokers], rows)
    if args.scale:  # after the main brokers stopped: fresh ones for each group of rows
        run_scale_rows(args, pids)
    if args.cluster:
        # Imported here: the cluster rows build on this module's scenarios and table.
        from lavin.bench.cluster_rows import run_cluster_rows

        with tempfile.TemporaryDirectory(prefix="lavin-compare-cluster-") as workdir:
            run_cluster_rows(Path(workdir), args.duration, args.rounds, args.failover_kills)


if __name__ == "__main__":
    main()
