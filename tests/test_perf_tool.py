"""lavin-perf against a real broker: messages move, and --verify finds none lost, duplicated
or out of order, over plain TCP, TLS (AMQPS) and AMQP over WebSocket (ws:// and wss://)."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, stop_quietly
from lavin.amqp.codec import method_frame
from lavin.bench.scan import ConfirmTracker
from pamqp import commands
from tls_certs import TlsFiles, write_tls_files

HOST = "127.0.0.1"
RUN_TIMEOUT = 60


@dataclass(frozen=True)
class TlsBroker:
    process: BrokerProcess
    amqps_port: int
    https_port: int
    ca: Path

    @property
    def amqps(self) -> list[str]:
        """lavin-perf options for AMQPS, checking the broker's certificate against the test CA."""
        return ["--uri", f"amqps://guest:guest@{HOST}:{self.amqps_port}/%2F", "--tls-ca-cert", str(self.ca)]

    @property
    def ws(self) -> list[str]:
        return ["--uri", self.process.url, "--ws", f"ws://{HOST}:{self.process.http_port}/ws/amqp"]

    @property
    def wss(self) -> list[str]:
        return ["--ws", f"wss://{HOST}:{self.https_port}/ws/amqp", "--tls-ca-cert", str(self.ca)]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return write_tls_files(tmp_path_factory.mktemp("perf-tls-files"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[TlsBroker]:
    args = ["--tls-cert", str(tls_files.server.cert), "--tls-key", str(tls_files.server.key),
            "--amqps-port", "0", "--https-port", "0"]  # fmt: skip
    process = BrokerProcess(tmp_path_factory.mktemp("perf-tls") / "data", extra_args=args)
    process.start()  # returns once every listener is up, TLS ones included
    try:
        yield TlsBroker(process, process.listeners["amqp/ssl"], process.listeners["https"], tls_files.ca)
    finally:
        stop_quietly(process)
    assert "Traceback" not in process.output


def perf(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lavin.bench.perf", *arguments, "--json"]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def perf_ok(*arguments: str) -> dict[str, Any]:
    done = perf(*arguments)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def assert_all_moved_once_in_order(result: dict[str, Any], total: int) -> None:
    assert result["published"] == result["consumed"] == total
    assert result["verify"] == {"lost": 0, "duplicated": 0, "out_of_order": 0}
    assert result["consume_rate"] > 0
    assert result["broker_cpu_us_per_message"] >= 0


def test_throughput_verify_moves_every_message_once_and_in_order(broker: BrokerProcess) -> None:
    result = perf_ok(
        "throughput", "--verify", "--count", "3000", "--producers", "2", "--consumers", "2", "--confirm", "500",
        "--queue", "perf-tool-verify", "--uri", broker.url, "--broker-pid", str(broker.pid),
    )  # fmt: skip
    assert_all_moved_once_in_order(result, 6000)
    assert result["nacked"] == 0


@pytest.mark.parametrize(
    ("transport", "acks"),
    [
        ("amqps", ["--confirm", "500"]),  # the producers wait for confirms over TLS
        ("amqps", ["--prefetch", "100"]),  # the consumers ack over TLS
        ("ws", ["--confirm", "500"]),
        ("ws", ["--prefetch", "100"]),
        ("wss", ["--confirm", "500", "--prefetch", "100"]),
    ],
)
def test_throughput_verify_over_tls_and_websocket(tls_broker: TlsBroker, transport: str, acks: list[str]) -> None:
    result = perf_ok(
        "throughput", "--verify", "--count", "3000", "--producers", "2", "--consumers", "2", *acks,
        "--queue", f"perf-tool-{transport}", *getattr(tls_broker, transport),
        "--broker-pid", str(tls_broker.process.pid),
    )  # fmt: skip
    assert_all_moved_once_in_order(result, 6000)
    if transport != "ws":
        assert result["tls"]["version"] in ("TLSv1.2", "TLSv1.3")


@pytest.mark.parametrize("transport", ["amqps", "ws"])
@pytest.mark.parametrize(
    ("scenario", "figure"),
    [
        (["latency", "--duration", "0.5", "--autoack"], "latency_ms.p99"),
        (["publish-only", "--count", "2000"], "publish_rate"),
        (["consume-only", "--count", "2000"], "consume_rate"),
        (["connections", "--count", "20"], "broker_rss_kib_per_connection"),
        (["queue-churn", "--count", "20"], "declare_bind_rate"),
    ],
)
def test_every_scenario_runs_over_tls_and_websocket(
    tls_broker: TlsBroker, transport: str, scenario: list[str], figure: str
) -> None:
    result = perf_ok(*scenario, *getattr(tls_broker, transport), "--broker-pid", str(tls_broker.process.pid))
    value: Any = result
    for key in figure.split("."):
        value = value[key]
    assert isinstance(value, float)


def test_the_broker_certificate_is_checked_unless_told_not_to(tls_broker: TlsBroker) -> None:
    # The system's CAs do not know the test CA.
    uri = f"amqps://guest:guest@{HOST}:{tls_broker.amqps_port}/%2F"
    refused = perf("queue-churn", "--count", "1", "--uri", uri)
    assert refused.returncode == 2
    assert "certificate verify failed" in refused.stderr
    unchecked = perf("queue-churn", "--count", "1", "--uri", uri, "--tls-no-verify")
    assert unchecked.returncode == 0, unchecked.stderr


def test_a_websocket_upgrade_the_broker_refuses_fails_the_run(tls_broker: TlsBroker) -> None:
    done = perf("queue-churn", "--count", "1", "--ws", f"ws://{HOST}:{tls_broker.process.http_port}/ws/nothing")
    assert done.returncode == 2
    assert "WebSocket upgrade of /ws/nothing refused: HTTP/1.1 404" in done.stderr


NO_PROBLEMS = {"lost": 0, "duplicated": 0, "out_of_order": 0}


@pytest.mark.parametrize(
    ("size", "prefetch", "count"),
    [(1 << 10, 1000, 2000), (1 << 16, 100, 200), (1 << 20, 10, 20), (1 << 24, 2, 3)],
)
def test_message_sizes_verify_and_report_megabytes_per_second(
    broker: BrokerProcess, size: int, prefetch: int, count: int
) -> None:
    result = perf_ok(
        "throughput", "--verify", "--size", str(size), "--prefetch", str(prefetch), "--count", str(count),
        "--queue", f"perf-tool-size-{size}", "--uri", broker.url, "--broker-pid", str(broker.pid),
    )  # fmt: skip
    assert_all_moved_once_in_order(result, count)
    assert result["consume_mb_per_s"] == pytest.approx(result["consume_rate"] * size / 1e6)
    assert result["publish_mb_per_s"] == pytest.approx(result["publish_rate"] * size / 1e6)


def test_fanout_gives_every_queue_every_message_in_order(broker: BrokerProcess) -> None:
    result = perf_ok(
        "fanout", "--queues", "20", "--count", "500", "--verify", "--prefetch", "100",
        "--queue", "perf-tool-fanout", "--uri", broker.url, "--broker-pid", str(broker.pid),
    )  # fmt: skip
    assert (result["queues"], result["bindings"], result["consumer_connections"]) == (20, 20, 20)
    assert (result["published"], result["consumed"]) == (500, 500 * 20)
    assert result["verify"] == NO_PROBLEMS


def test_topic_wildcards_route_each_message_to_one_queue(broker: BrokerProcess) -> None:
    result = perf_ok(
        "topic", "--queues", "4", "--bindings", "400", "--count", "2000", "--verify", "--autoack",
        "--queue", "perf-tool-topic", "--uri", broker.url, "--broker-pid", str(broker.pid),
    )  # fmt: skip
    assert (result["queues"], result["bindings"]) == (4, 400)
    assert_all_moved_once_in_order(result, 2000)


def test_many_queues_spread_over_fewer_connections(broker: BrokerProcess) -> None:
    result = perf_ok(
        "many-queues", "--queues", "300", "--connections", "7", "--count", "1500", "--verify",
        "--queue", "perf-tool-many-queues", "--uri", broker.url, "--broker-pid", str(broker.pid),
    )  # fmt: skip
    assert (result["queues"], result["consumer_connections"]) == (300, 7)
    assert_all_moved_once_in_order(result, 1500)


def test_many_connections_publish_at_their_rate(broker: BrokerProcess) -> None:
    arguments = ["many-connections", "--connections", "60", "--rate-per-connection", "40", "--processes", "2",
                 "--queue", "perf-tool-clients", "--uri", broker.url, "--broker-pid", str(broker.pid)]  # fmt: skip
    verified = perf_ok(*arguments, "--count", "20", "--verify")
    assert verified["consumer_connections"] == 60
    assert_all_moved_once_in_order(verified, 60 * 20)
    timed = perf_ok(*arguments, "--duration", "1.5")
    # 60 connections at 40 msg/s for 1.5 s, in rounds of 50 ms.
    assert 60 * 40 * 1.2 <= timed["published"] <= 60 * 40 * 1.6
    assert timed["consumed"] >= 0.95 * timed["published"]  # the consumers stop at the deadline too
    assert 0 < timed["latency_ms"]["p50"] <= timed["latency_ms"]["p99"]


def test_backlog_drains_with_dd_beside_it(broker: BrokerProcess, tmp_path: Path) -> None:
    result = perf_ok(
        "backlog", "--backlog-bytes", str(3_000_000), "--size", "65536", "--consumers", "3", "--verify",
        "--dd-dir", str(tmp_path), "--queue", "perf-tool-backlog", "--uri", broker.url,
        "--broker-pid", str(broker.pid),
    )  # fmt: skip
    assert result["preloaded"] == result["consumed"] == 46  # ceil(3,000,000 / 65,536)
    assert result["backlog_bytes"] == 46 * 65536
    assert result["verify"] == NO_PROBLEMS
    assert result["consume_mb_per_s"] > 0
    assert result["dd"]["write_mb_per_s"] > 0
    assert result["dd"]["command"].startswith("dd if=/dev/zero")
    assert list(tmp_path.iterdir()) == []  # dd's file is gone


def test_many_connection_scenarios_need_plain_tcp() -> None:
    done = perf("fanout", "--tls")
    assert done.returncode == 2
    assert "fanout runs over plain TCP only" in done.stderr


def test_every_scenario_has_a_help_text() -> None:
    scenarios = ("throughput", "publish-only", "consume-only", "latency", "connections", "queue-churn",
                 "fanout", "topic", "many-queues", "many-connections", "backlog", "disk",
                 "queued-messages", "queue-count", "bindings")  # fmt: skip
    for scenario in scenarios:
        result = subprocess.run(
            [sys.executable, "-m", "lavin.bench.perf", scenario, "--help"], capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 0, result.stderr
        assert "--uri" in result.stdout
        assert "--tls" in result.stdout
        assert "--ws" in result.stdout


def test_confirms_one_by_one_are_counted_without_keeping_each_tag() -> None:
    """Brokers that confirm every publish on its own (LavinMQ) must not make lavin-perf hold a
    tag per message: a hundred million of them were gigabytes."""

    def acks(*tags: int, multiple: bool = False) -> bytearray:
        return bytearray(b"".join(method_frame(1, commands.Basic.Ack(tag, multiple)) for tag in tags))

    tracker = ConfirmTracker()
    tracemalloc.start()
    for first in range(1, 200_001, 1000):
        frames = acks(*range(first, first + 1000))
        assert tracker.scan(frames) == len(frames)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert tracker.settled == 200_000
    assert held < 100_000, f"{held} bytes held after 200,000 confirms in order"
    tracker.scan(acks(200_003, 200_002))  # out of order: counted, the floor waits for 200,001
    assert tracker.settled == 200_002
    tracker.scan(acks(200_001))
    tracker.scan(acks(200_005, multiple=True))
    assert tracker.settled == 200_005
    # A single ahead of a multiple confirm: once the multiple one reaches it, in-order singles
    # after it are not held either.
    tracker.scan(acks(200_007))
    tracker.scan(acks(200_006, multiple=True))
    tracemalloc.start()
    for first in range(200_008, 300_008, 1000):
        tracker.scan(acks(*range(first, first + 1000)))
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert tracker.settled == 300_007
    assert held < 100_000, f"{held} bytes held after 100,000 confirms in order behind a multiple one"
