"""lavin-perf's scale scenarios (queued-messages, queue-count, bindings, and connections'
RSS growth) against a real broker, a peer started again on its data, and `bench/compare
--scale` end to end on small counts against Lavin alone."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from broker_process import BrokerProcess
from lavin.bench.brokers import write_certificates
from lavin.bench.peers import parse_peer, peer
from lavin.bench.perf import problems
from lavin.bench.scale import queue_depth
from lavin.client.wire import CHANNEL, Address, AmqpError, connect
from pamqp import commands
from test_compare_peers import SECOND_LAVIN, URI, table

AUTH = ("guest", "guest")
RUN_TIMEOUT = 60
COMPARE_TIMEOUT = 110  # under pytest's 120 s per test


def perf(*arguments: str, soft_file_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """lavin-perf with --json; with `soft_file_limit`, started with that few descriptors allowed."""

    def lower_file_limit() -> None:
        if soft_file_limit is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft_file_limit, hard))

    command = [sys.executable, "-m", "lavin.bench.perf", *arguments, "--json"]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, preexec_fn=lower_file_limit)


def perf_ok(*arguments: str, soft_file_limit: int | None = None) -> dict[str, Any]:
    done = perf(*arguments, soft_file_limit=soft_file_limit)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def on(broker: BrokerProcess) -> list[str]:
    return ["--uri", broker.url, "--broker-pid", str(broker.pid)]


def assert_rss_figures(result: dict[str, Any], per: str, count: int) -> None:
    idle, after = result["broker_rss_kib_idle"], result["broker_rss_kib_after"]
    assert idle > 10_000 and after > 10_000  # a Python broker is more than 10 MB
    assert result["broker_rss_growth_mb"] == pytest.approx((after - idle) * 1024 / 1e6)
    assert result[f"broker_rss_kib_per_{per}"] == pytest.approx((after - idle) / count)


def names_on(broker: BrokerProcess, kind: str) -> set[str]:
    """The names of the default vhost's queues or exchanges, from the management API."""
    listed = requests.get(f"{broker.http_url}/api/{kind}/%2F", auth=AUTH, timeout=10).json()
    return {item["name"] for item in listed}


def test_queued_messages_fill_a_durable_queue_then_delete_it(broker: BrokerProcess) -> None:
    result = perf_ok("queued-messages", "--count", "20000", "--producers", "2", "--queue", "perf-scale-queued",
                     *on(broker))  # fmt: skip
    assert result["published"] == result["queued"] == 20000
    assert result["nacked"] == 0  # confirms are on by default
    assert result["publish_rate"] > 0
    assert result["broker_cpu_us_per_message"] > 0
    assert_rss_figures(result, "message", 20000)
    with pytest.raises(AmqpError, match="NOT_FOUND"):
        queue_depth(Address.from_uri(broker.url), "perf-scale-queued")


def test_queued_messages_kept_are_there_after_a_restart(fresh_broker: BrokerProcess) -> None:
    result = perf_ok("queued-messages", "--count", "3000", "--queue", "perf-scale-kept", "--keep",
                     "--uri", fresh_broker.url)  # fmt: skip
    assert result["queued"] == 3000
    assert "broker_rss_kib_idle" not in result  # RSS and CPU only with --broker-pid
    fresh_broker.restart()
    assert queue_depth(Address.from_uri(fresh_broker.url), "perf-scale-kept") == 3000


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["queued-messages", "--count", "10", "--producers", "3"], "that the --producers divide evenly"),
        (["queue-count", "--count", "0"], "queue-count needs a --count of at least 1"),
        (["bindings", "--count", "0"], "bindings needs a --count of at least 1"),
    ],
)
def test_scale_counts_are_checked(arguments: list[str], complaint: str) -> None:
    done = perf(*arguments)
    assert done.returncode == 2
    assert complaint in done.stderr


def test_queue_count_declares_and_deletes_every_queue(broker: BrokerProcess) -> None:
    result = perf_ok("queue-count", "--count", "500", "--durable", *on(broker))
    assert (result["queues"], result["durable"]) == (500, True)
    assert result["declare_rate"] > 0 and result["delete_rate"] > 0
    assert result["broker_cpu_us_per_queue"] >= 0  # read in clock ticks: may be 0 for a run this short
    assert_rss_figures(result, "queue", 500)
    assert not {name for name in names_on(broker, "queues") if name.startswith("lavin-perf-queues-")}


@pytest.mark.parametrize("durable", [True, False])
def test_bindings_are_made_one_round_trip_each_then_removed(broker: BrokerProcess, durable: bool) -> None:
    result = perf_ok("bindings", "--count", "200", *(["--durable"] if durable else []), *on(broker))
    assert (result["bindings"], result["durable"]) == (200, durable)
    assert result["bind_rate"] > 0
    assert result["broker_cpu_us_per_binding"] >= 0
    for kind in ("queues", "exchanges"):
        assert not {name for name in names_on(broker, kind) if name.startswith("lavin-perf-bindings-")}


def test_connections_take_the_descriptors_they_need_and_report_rss_growth(broker: BrokerProcess) -> None:
    # 64 descriptors would not hold 200 connections: lavin-perf raises its own limit.
    result = perf_ok("connections", "--count", "200", *on(broker), soft_file_limit=64)
    assert result["connections"] == 200
    before, after = result["broker_rss_kib_before"], result["broker_rss_kib_after"]
    assert result["broker_rss_growth_mb"] == pytest.approx((after - before) * 1024 / 1e6)


def test_a_started_peer_starts_again_on_its_data(tmp_path: Path) -> None:
    spec = parse_peer(f"second={URI},{SECOND_LAVIN}")
    certificates = write_certificates(tmp_path / "tls")
    with peer(spec, tmp_path, certificates, instance="-again") as first:
        assert first.name == "second-again"
        with connect(Address.from_uri(first.uri)) as connection:
            connection.call(commands.Queue.Declare(queue="kept", durable=True), commands.Queue.DeclareOk, CHANNEL)
            connection.publish("kept", [b"still here"], commands.Basic.Properties(delivery_mode=2))
            assert queue_depth(Address.from_uri(first.uri), "kept") == 1
    assert (tmp_path / "peer-second-again" / "data").is_dir()
    with peer(spec, tmp_path, certificates, instance="-again") as second:
        assert second.uri != first.uri  # new ports, the same data
        assert queue_depth(Address.from_uri(second.uri), "kept") == 1


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_compare_scale_rows_on_fresh_brokers() -> None:
    words = ["queued 16 B", "durable): ", "bindings/s", "connections: RSS"]  # every scale row, no main-table row
    command = [sys.executable, "-m", "lavin.bench.comparison", "--no-rabbitmq", "--scale",
               *(argument for word in words for argument in ("--only", word)),
               "--scale-messages", "20000", "--scale-queues", "500", "--scale-bindings", "200",
               "--scale-connections", "200"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=COMPARE_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    rows = table(done.stdout)
    assert rows["scale"] == ["unit", "Lavin", "broker CPU µs/op: Lavin"]
    queued = "20,000 queued 16 B messages"
    units = {
        f"{queued}: RSS growth over idle": "MB",
        f"{queued}: restart until all are back": "s",
        f"{queued}: publish rate": "msg/s",
        "500 queues (durable): RSS growth": "MB",
        "500 queues (durable): declare rate": "queues/s",
        "bindings/s, durable queue (200 bindings)": "bindings/s",
        "bindings/s, non-durable queue (200 bindings)": "bindings/s",
        "200 connections: RSS growth": "MB",
    }
    scale_rows = {label: cells for label, cells in rows.items() if label not in ("scenario", "scale")}
    assert {label: cells[0] for label, cells in scale_rows.items()} == units
    for label, (unit, figure, cpu) in scale_rows.items():
        number(figure)  # a figure, not n/a
        if unit not in ("MB", "s"):  # rates, with the broker's CPU per operation (0 in fewer than 10 ms)
            assert number(figure) > 0 and number(cpu) >= 0, label
    assert 0 < number(scale_rows[f"{queued}: restart until all are back"][1]) < 60
    # Each group on a fresh broker of its own, started again for the restart.
    started = re.findall(r"^Lavin-(\w[\w-]*) +scale, ", done.stderr, re.MULTILINE)
    assert started == ["messages", "queues", "bindings-durable", "bindings", "connections"]


def test_a_queue_that_holds_other_than_what_was_published_is_a_problem() -> None:
    assert problems({"published": 20000, "queued": 20000}) == 0
    assert problems({"published": 20000, "queued": 19998}) == 2
    assert problems({"published": 20000}) == 0  # no queue was counted
