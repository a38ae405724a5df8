"""A real Prometheus (Debian's `prometheus` package) scrapes a broker under traffic, and
every metric RabbitMQ's Overview dashboard queries, and one of its joined queries, has data.
Skipped where the `prometheus` command is not installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import requests
from broker_process import BrokerProcess
from helpers import unique_name, wait_until
from test_prometheus_dashboard import dashboard_metric_names

PROMETHEUS = shutil.which("prometheus")
LISTENING = re.compile(r'msg="Listening on" address=127\.0\.0\.1:(\d+)')  # the port it bound
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus package is not installed")
# One of the dashboard's queries, its label filters left out: the publishers panel.
PUBLISHERS_PANEL = (
    "sum(rabbitmq_global_publishers * on(instance, job) group_left(rabbitmq_cluster) rabbitmq_identity_info)"
)


@pytest.fixture
def prometheus(broker: BrokerProcess, tmp_path: Path) -> Iterator[str]:
    """A Prometheus scraping the broker's metrics port every second; its API's address."""
    assert PROMETHEUS is not None
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: lavin\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{broker.metrics_port}']\n",
        encoding="utf-8",
    )
    command = [
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        "--web.listen-address=127.0.0.1:0",  # it binds a port and logs which
    ]
    log_path = tmp_path / "prometheus.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: LISTENING.search(log_path.read_text(errors="replace")), "Prometheus to listen", timeout=30)
        match = LISTENING.search(log_path.read_text(errors="replace"))
        assert match is not None
        yield f"http://127.0.0.1:{match[1]}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def query(prometheus: str, expression: str) -> list[dict[str, Any]]:
    response = requests.get(f"{prometheus}/api/v1/query", params={"query": expression}, timeout=10)
    assert response.status_code == 200, response.text
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def test_prometheus_finds_every_dashboard_metric_in_its_scrapes(broker: BrokerProcess, prometheus: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"x" * 300)
    channel.basic_publish("", unique_name("nowhere"), b"dropped")

    def missing() -> list[str]:
        return sorted(name for name in dashboard_metric_names() if not query(prometheus, name))

    wait_until(lambda: not missing(), "Prometheus to have every dashboard metric", timeout=30)
    wait_until(lambda: bool(query(prometheus, PUBLISHERS_PANEL)), "the publishers panel's query to answer")
    publishers = query(prometheus, PUBLISHERS_PANEL)
    assert float(publishers[0]["value"][1]) >= 1
    connection.close()
