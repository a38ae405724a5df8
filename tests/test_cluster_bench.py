"""The clustered benchmarks' tools: the chaos loop's message check against a real broker, the
chaos loop itself through its command line on a real etcd and Lavin cluster, and the 3-node
RabbitMQ cluster that `bench/compare --cluster` runs its quorum queue on."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess
from lavin.bench.brokers import RABBITMQ_SERVER, port_accepts
from lavin.bench.chaos_traffic import ConfirmClock, Publisher, body, check_queue, queue_name
from lavin.bench.rabbitmq_cluster import rabbitmq_cluster
from lavin.testing.etcd_server import MISSING_REASON, EtcdServer

CHAOS_SECONDS = 20

# The benchmark tools are pure Python, the same in both installs: run once, in `make test`.
pytestmark = pytest.mark.skipif(bool(os.environ.get("LAVIN_TEST_EXPECT_INSTALLED")), reason="run once, in `make test`")


def run_publisher(url: str, seconds: float) -> Publisher:
    stop = threading.Event()
    publisher = Publisher(0, lambda: [url], ConfirmClock(), stop)
    publisher.start()
    time.sleep(seconds)
    stop.set()
    publisher.join()
    return publisher


def test_the_check_finds_a_confirmed_message_missing_and_one_delivered_twice(fresh_broker: BrokerProcess) -> None:
    publisher = run_publisher(fresh_broker.url, 0.5)
    confirmed = sum(publisher.confirmed)
    assert confirmed > 0
    clean = check_queue(fresh_broker.url, publisher)
    assert (clean.delivered, clean.lost, clean.duplicated, clean.out_of_order) == (confirmed, 0, 0, 0)

    connection = pika.BlockingConnection(pika.URLParameters(fresh_broker.url))
    connection.channel().basic_publish("", queue_name(0), body(0, 0))  # sequence 0 a second time, last
    connection.close()
    publisher.confirmed.append(1)  # a confirm for a message the queue never got
    check = check_queue(fresh_broker.url, publisher)
    assert (check.lost, check.duplicated, check.out_of_order) == (1, 1, 0)


def report_of(output: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in output.strip().splitlines())


@pytest.mark.timeout(CHAOS_SECONDS + 200)
@pytest.mark.skipif(not EtcdServer.available(), reason=MISSING_REASON)
def test_the_chaos_loop_kills_twice_and_loses_no_confirmed_message() -> None:
    command = [sys.executable, "-m", "lavin.bench.chaos", "--duration", str(CHAOS_SECONDS), "--kills", "2",
               "--nodes", "3", "--publishers", "3", "--seed", "7"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHAOS_SECONDS + 180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = report_of(done.stdout)
    assert report["lost confirmed"] == "0"
    assert int(report["confirmed sent"]) > 0
    assert report["kills"].startswith("2 ")
    assert int(report["duplicated"]) >= 0 and int(report["out of order"]) >= 0


@pytest.mark.timeout(240)
@pytest.mark.skipif(not RABBITMQ_SERVER.exists(), reason=f"{RABBITMQ_SERVER} is missing (Debian's rabbitmq-server)")
def test_the_rabbitmq_cluster_replicates_a_quorum_queue_and_stops_every_node(tmp_path: Path) -> None:
    with rabbitmq_cluster(tmp_path) as cluster:
        assert len(cluster.nodes) == 3
        first = pika.BlockingConnection(pika.URLParameters(cluster.uris[0]))
        channel = first.channel()
        channel.confirm_delivery()
        channel.queue_declare("clustered", durable=True, arguments={"x-queue-type": "quorum"})
        channel.basic_publish("", "clustered", b"on node 1", pika.BasicProperties(delivery_mode=2))
        first.close()
        last = pika.BlockingConnection(pika.URLParameters(cluster.uris[2]))  # another node: the cluster's queue
        method, _, message = last.channel().basic_get("clustered", auto_ack=True)
        last.close()
        assert method is not None and message == b"on node 1"
        pids = [node.pid for node in cluster.nodes]
        ports = [pika.URLParameters(uri).port for uri in cluster.uris]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not any(port_accepts(port) for port in ports)
