"""lavin-perf against a real broker: messages move, and --verify finds none lost, duplicated
or out of order."""

from __future__ import annotations

import json
import subprocess
import sys

from broker_process import BrokerProcess


def test_throughput_verify_moves_every_message_once_and_in_order(broker: BrokerProcess) -> None:
    command = [
        sys.executable, "-m", "lavin.bench.perf", "throughput", "--verify", "--count", "3000",
        "--producers", "2", "--consumers", "2", "--confirm", "500", "--queue", "perf-tool-verify",
        "--uri", broker.url, "--broker-pid", str(broker.pid), "--json",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["published"] == result["consumed"] == 6000
    assert result["verify"] == {"lost": 0, "duplicated": 0, "out_of_order": 0}
    assert result["nacked"] == 0
    assert result["consume_rate"] > 0
    assert result["broker_cpu_us_per_message"] >= 0


def test_every_scenario_has_a_help_text() -> None:
    for scenario in ("throughput", "publish-only", "consume-only", "latency", "connections", "queue-churn"):
        result = subprocess.run(
            [sys.executable, "-m", "lavin.bench.perf", scenario, "--help"], capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 0, result.stderr
        assert "--uri" in result.stdout
