"""bench/compare with further brokers (`--peer NAME=URI[,START_CMD]`, `--peer-pid NAME=PID`):
the option's parsing, and a real run against a second Lavin started from START_CMD and a
third one that runs already, each in its own column."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from lavin.bench.peers import parse_peer, parse_peer_pid

RUN_TIMEOUT = 60
URI = "amqp://guest:guest@127.0.0.1:{amqp_port}/%2F"
# A second Lavin, started by the comparison, with AMQPS on the run's certificate.
SECOND_LAVIN = (
    f"{sys.executable} -m lavin serve --data-dir {{data_dir}} --bind 127.0.0.1 --amqp-port {{amqp_port}} "
    "--http-port {http_port} --metrics-http-port {metrics_port} --log-level warning "
    "--tls-cert {cert} --tls-key {key} --amqps-port {amqps_port} --https-port -1"
)


def test_peer_with_start_command_keeps_placeholders_for_later() -> None:
    spec = parse_peer(f"lavinmq={URI},/opt/lavinmq --data-dir '{{data_dir}}/x y' --amqp-port {{amqp_port}}")
    assert spec.name == "lavinmq"
    assert spec.uri == URI
    assert spec.start == ("/opt/lavinmq", "--data-dir", "{data_dir}/x y", "--amqp-port", "{amqp_port}")
    assert spec.placeholders == {"data_dir", "amqp_port"}


def test_peer_without_start_command_is_a_running_broker() -> None:
    spec = parse_peer("other=amqps://user:pw@broker.example:5671/vhost")
    assert (spec.name, spec.uri, spec.start) == ("other", "amqps://user:pw@broker.example:5671/vhost", None)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("amqp://127.0.0.1:5672/", "expected NAME=URI"),
        ("=amqp://127.0.0.1:5672/", "expected NAME=URI"),
        ("a/b=amqp://127.0.0.1:5672/", "expected NAME=URI"),
        ("x=", "expected NAME=URI"),
        ("x=http://127.0.0.1:15672/", "amqp:// or amqps://"),
        ("x=amqp://127.0.0.1:5672/,", "START_CMD after the comma is empty"),
        ("x=amqp://127.0.0.1:5672/,broker 'unclosed", "cannot split START_CMD"),
        ("x=amqp://127.0.0.1:{amqp_port}/,broker --dir {datadir}", "unknown placeholder {datadir}"),
        ("x=amqp://127.0.0.1:{amqp_port}/", "placeholders need a START_CMD"),
    ],
)
def test_bad_peers_are_refused_with_a_reason(text: str, complaint: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(complaint)):
        parse_peer(text)


def test_peer_pid() -> None:
    assert parse_peer_pid("lavinmq=1234") == ("lavinmq", 1234)
    for text in ("lavinmq", "lavinmq=", "lavinmq=12a", "lavinmq=0"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected NAME=PID"):
            parse_peer_pid(text)


def compare(*arguments: str) -> subprocess.CompletedProcess[str]:
    """The comparison from this interpreter's environment (bench/compare uses .venv-installed's)."""
    command = [sys.executable, "-m", "lavin.bench.comparison", "--no-rabbitmq", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)


def table(stdout: str) -> dict[str, list[str]]:
    """The Markdown table's rows by their first cell (the header under "scenario")."""
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in stdout.splitlines() if line.startswith("|")
    ]
    return {row[0]: row[1:] for row in rows if not row[0].startswith("---")}


def test_peer_pid_must_name_a_peer() -> None:
    done = compare("--peer", "other=amqp://127.0.0.1:1/", "--peer-pid", "another=1")
    assert done.returncode == 2
    assert "--peer-pid another: no --peer of that name" in done.stderr


def test_peer_may_not_take_a_column_name_already_in_use() -> None:
    done = compare("--peer", "Lavin=amqp://127.0.0.1:1/")
    assert done.returncode == 2
    assert "--peer Lavin: that name is taken" in done.stderr


def test_compare_runs_each_scenario_on_every_peer(fresh_broker: BrokerProcess) -> None:
    done = compare(
        "--only", "publish-only", "--only", "AMQPS autoack", "--only", "idle connections",
        "--connections", "20", "--duration", "1", "--rounds", "1",
        "--peer", f"second={URI},{SECOND_LAVIN}",
        "--peer", f"running={fresh_broker.url}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = table(done.stdout)
    assert rows["scenario"] == ["unit", "Lavin", "second", "running", "Lavin/second", "Lavin/running",
                                "broker CPU µs/op: Lavin", "second", "running"]  # fmt: skip

    unit, lavin, second, running, to_second, to_running, lavin_cpu, second_cpu, running_cpu = rows["publish-only"]
    assert unit == "msg/s"
    assert all(float(value.replace(",", "")) > 0 for value in (lavin, second, running, to_second, to_running))
    # CPU from the started process; none for a broker whose pid was not given.
    assert float(lavin_cpu) > 0 and float(second_cpu) > 0 and running_cpu == "n/a"

    # AMQPS: the started peer listens on {amqps_port} with the run's certificate; the running one has none.
    _, lavin, second, running, to_second, to_running, *_ = rows["AMQPS autoack throughput"]
    assert float(lavin.replace(",", "")) > 0 and float(second.replace(",", "")) > 0
    assert (running, to_running) == ("n/a", "n/a") and to_second != "n/a"

    # RSS per connection is read from /proc: n/a without the broker's pid.
    idle = rows["idle connections (20), RSS"]
    assert idle[3] == "n/a" and idle[2] != "n/a"

    # The started peer was stopped at the end; the running one was left alone.
    started = re.search(r"^second: pid (\d+): ", done.stderr, re.MULTILINE)
    assert started is not None, done.stderr
    assert not Path(f"/proc/{started.group(1)}").exists()
    assert fresh_broker.running
