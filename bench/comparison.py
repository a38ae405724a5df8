"""Lavin against RabbitMQ on this machine: the same lavin-perf scenarios on both brokers.

    bench/compare [--duration 5] [--rounds 3] [--connections 1000] [--queues 2000] [--only WORD]

Starts a Lavin and a private RabbitMQ node (`lavin.bench.brokers`; rabbitmq-server is
installed with apt-get when missing), both with AMQPS on a certificate made for the run,
runs every scenario on Lavin, then on RabbitMQ, then again (A B A B ...) so machine noise
hits both, and prints a Markdown table of the medians: the figure compared, the
Lavin/RabbitMQ ratio, and each broker's CPU time per message (or queue, or connection)
read from /proc. A scenario over a transport a broker lacks (AMQP over WebSocket on
RabbitMQ 3.10) shows n/a.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lavin.bench.brokers import Broker, Transport, ensure_rabbitmq_installed, lavin, rabbitmq, write_certificates
from lavin.bench.measure import process_cpu_seconds

RUN_TIMEOUT_MARGIN = 180.0  # on top of a scenario's duration: set-up, draining, queue deletion
IDLE_CPU_SHARE = 0.05  # a broker using less of a core than this has finished the previous run's work
IDLE_SAMPLE = 0.5  # seconds
IDLE_WAIT = 30.0


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
class Measured:
    metric: float | None
    cpu: float | None


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
    ]  # fmt: skip
    return idle, repeated


def wait_until_idle(broker: Broker) -> None:
    """Let the broker finish what the previous run left (deleting a full queue, garbage
    collection) so that it is not billed to the next run."""
    deadline = time.monotonic() + IDLE_WAIT
    while time.monotonic() < deadline:
        before = process_cpu_seconds(broker.pid)
        time.sleep(IDLE_SAMPLE)
        if process_cpu_seconds(broker.pid) - before < IDLE_CPU_SHARE * IDLE_SAMPLE:
            return


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


def run_scenario(scenario: Scenario, broker: Broker, duration: float) -> Measured:
    print(f"{broker.name:8}  {scenario.label}: ", end="", file=sys.stderr, flush=True)
    reach = broker.perf_arguments(scenario.transport)
    if reach is None:
        print(f"n/a: no {scenario.transport.value} listener", file=sys.stderr)
        return Measured(None, None)
    command = [sys.executable, "-m", "lavin.bench.perf", *scenario.arguments,
               *reach, "--broker-pid", str(broker.pid), "--json"]  # fmt: skip
    if scenario.timed:
        command += ["--duration", str(duration)]
    wait_until_idle(broker)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=duration + RUN_TIMEOUT_MARGIN, check=False
        )
    except subprocess.TimeoutExpired:
        print("timed out", file=sys.stderr)
        return Measured(None, None)
    if done.returncode != 0:
        print(f"failed ({done.returncode}): {done.stderr.strip()}", file=sys.stderr)
        return Measured(None, None)
    result = json.loads(done.stdout)
    measured = Measured(dig(result, scenario.metric), dig(result, scenario.cpu_metric))
    tls = result.get("tls")
    session = f" ({tls['version']} {tls['cipher']})" if tls else ""
    print(f"{show(measured.metric)} {scenario.unit}, broker CPU {show(measured.cpu)} µs/op{session}", file=sys.stderr)
    return measured


def median(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def print_table(rows: list[tuple[Scenario, list[Measured], list[Measured]]]) -> None:
    print("| scenario | unit | Lavin | RabbitMQ | Lavin/RabbitMQ | broker CPU µs/op: Lavin | RabbitMQ |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for scenario, lavin_runs, rabbitmq_runs in rows:
        ours = median([run.metric for run in lavin_runs])
        theirs = median([run.metric for run in rabbitmq_runs])
        ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "n/a"
        ours_cpu = median([run.cpu for run in lavin_runs])
        theirs_cpu = median([run.cpu for run in rabbitmq_runs])
        print(f"| {scenario.label} | {scenario.unit} | {show(ours)} | {show(theirs)} | {ratio} "
              f"| {show(ours_cpu)} | {show(theirs_cpu)} |")  # fmt: skip


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
        help="run only the scenarios whose label contains WORD (repeatable)",
    )
    args = parser.parse_args()
    ensure_rabbitmq_installed()
    idle, repeated = scenarios(args.connections, args.queues)
    if args.only:
        repeated = [scenario for scenario in repeated if any(word in scenario.label for word in args.only)]
    with tempfile.TemporaryDirectory(prefix="lavin-compare-") as workdir, ExitStack() as brokers:
        certificates = write_certificates(Path(workdir) / "tls")
        ours = brokers.enter_context(lavin(Path(workdir), certificates=certificates))
        theirs = brokers.enter_context(rabbitmq(Path(workdir), certificates=certificates))
        # First, while both brokers are fresh: memory freed by message runs would hide connection growth.
        rows = []
        if not args.only or any(word in idle.label for word in args.only):
            rows.append((idle, [run_scenario(idle, ours, args.duration)], [run_scenario(idle, theirs, args.duration)]))
        for scenario in repeated:
            lavin_runs: list[Measured] = []
            rabbitmq_runs: list[Measured] = []
            for _ in range(args.rounds):
                lavin_runs.append(run_scenario(scenario, ours, args.duration))
                rabbitmq_runs.append(run_scenario(scenario, theirs, args.duration))
            rows.append((scenario, lavin_runs, rabbitmq_runs))
    print_table(rows)


if __name__ == "__main__":
    main()
