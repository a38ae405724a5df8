"""docs/migrating.md, step by step with its `lavin ctl` commands, against a private RabbitMQ node: an application keeps
publishing (with confirms, numbered messages) and consuming throughout while its
definitions move to Lavin, its queue is federated into Lavin, its consumer and then its
producer switch over, and the link is removed. Every number confirmed to the producer must
be consumed at least once."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import requests
from broker_process import BrokerProcess
from control_helpers import ctl_ok
from helpers import unique_name
from test_federation import wait_running

if TYPE_CHECKING:
    from rabbitmq_node import RabbitNode

pytest_plugins = ["rabbitmq_node"]  # its rabbitmq_node fixture; imported only here, so pytest rewrites its asserts
AUTH = ("guest", "guest")
PHASE = 2.0  # seconds each phase of the migration runs with traffic
SETTLE_TIMEOUT = 30.0


class Worker(threading.Thread):
    """A client thread that talks to whichever broker `url` names, reconnecting when it
    changes, and keeps the first error it meets for the test to raise."""

    def __init__(self, url: str, work: Callable[[Worker], None]) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self._work = work

    def run(self) -> None:
        try:
            self._work(self)
        except Exception as error:  # noqa: BLE001  (any failure is the test's, raised by check())
            self.error = error

    def check(self) -> None:
        assert self.error is None, f"{self.name} failed: {self.error!r}"

    def finish(self) -> None:
        self.stopping.set()
        self.join(timeout=SETTLE_TIMEOUT)
        assert not self.is_alive(), f"{self.name} did not stop"
        self.check()


def producer(exchange: str, confirmed: list[int]) -> Callable[[Worker], None]:
    """Publish 0, 1, 2, ... to `exchange`, each confirmed before the next is recorded."""

    def work(worker: Worker) -> None:
        number = 0
        while not worker.stopping.is_set():
            url = worker.url
            connection = pika.BlockingConnection(pika.URLParameters(url))
            channel = connection.channel()
            channel.confirm_delivery()
            while worker.url == url and not worker.stopping.is_set():
                properties = pika.BasicProperties(delivery_mode=2)
                channel.basic_publish(exchange, f"order.{number}", str(number).encode(), properties, mandatory=True)
                confirmed.append(number)
                number += 1
                time.sleep(0.002)
            connection.close()

    return work


def consumer(queue: str, consumed: list[int]) -> Callable[[Worker], None]:
    """Consume `queue` with manual acks; unacked messages go back to the queue on a switch."""

    def work(worker: Worker) -> None:
        while not worker.stopping.is_set():
            url = worker.url
            connection = pika.BlockingConnection(pika.URLParameters(url))
            channel = connection.channel()
            channel.basic_qos(prefetch_count=20)

            def take(channel: Any, method: Any, _properties: Any, body: bytes) -> None:
                consumed.append(int(body))
                channel.basic_ack(method.delivery_tag)

            channel.basic_consume(queue, take)
            while worker.url == url and not worker.stopping.is_set():
                connection.process_data_events(time_limit=0.05)
            connection.close()

    return work


def links(broker: BrokerProcess) -> list[Any]:
    rows: list[Any] = requests.get(f"{broker.http_url}/api/federation-links", auth=AUTH, timeout=10).json()
    return rows


def run_phase(*workers: Worker) -> None:
    time.sleep(PHASE)
    for worker in workers:
        worker.check()


def wait_for(what: str, done: Callable[[], bool], *workers: Worker) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while not done():
        for worker in workers:
            worker.check()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def rabbitmq_holds(node: RabbitNode, queue: str) -> int:
    """Ready and unacknowledged messages of `queue` on RabbitMQ."""
    for line in node.ctl("list_queues", "name", "messages", "--no-table-headers", "--quiet").splitlines():
        name, _, messages = line.rpartition("\t")
        if name == queue:
            return int(messages)
    raise AssertionError(f"RabbitMQ has no queue {queue}")


def test_an_application_moves_from_rabbitmq_to_lavin_without_losing_a_message(
    rabbitmq_node: RabbitNode, fresh_broker: BrokerProcess, tmp_path: Path
) -> None:
    lavin = fresh_broker
    exchange, queue = unique_name("shop"), unique_name("orders")
    with rabbitmq_node.connect() as connection:
        channel = connection.channel()
        channel.exchange_declare(exchange, "topic", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, exchange, "order.#")
    confirmed: list[int] = []
    consumed: list[int] = []
    publishing = Worker(rabbitmq_node.url, producer(exchange, confirmed))
    consuming = Worker(rabbitmq_node.url, consumer(queue, consumed))
    publishing.start()
    consuming.start()
    run_phase(publishing, consuming)

    # 1. RabbitMQ's definitions into Lavin: the exchange, queue and binding now exist there too.
    exported = tmp_path / "rabbitmq.json"
    exported.write_text(json.dumps(rabbitmq_node.definitions()))
    ctl_ok(lavin, "import_definitions", str(exported))
    # 2. Lavin federates the queue from RabbitMQ: it moves messages only to Lavin's consumers.
    ctl_ok(lavin, "set_parameter", "federation-upstream", "rabbitmq", json.dumps({"uri": rabbitmq_node.url}))
    policy = json.dumps({"federation-upstream": "rabbitmq"})
    ctl_ok(lavin, "set_policy", "--apply-to", "queues", "--priority", "10", "migrate", f"^{queue}$", policy)
    wait_running(lavin)
    run_phase(publishing, consuming)

    # 3. Consumers to Lavin; producers still publish to RabbitMQ, and the link carries it over.
    consuming.url = lavin.url
    run_phase(publishing, consuming)
    # 4. Producers to Lavin.
    publishing.url = lavin.url
    run_phase(publishing, consuming)
    wait_for("RabbitMQ's queue to empty", lambda: rabbitmq_holds(rabbitmq_node, queue) == 0, publishing, consuming)

    # 5. Nothing is left upstream: remove the link.
    ctl_ok(lavin, "clear_policy", "migrate")
    ctl_ok(lavin, "clear_parameter", "federation-upstream", "rabbitmq")
    wait_for("the link to go", lambda: links(lavin) == [])
    run_phase(publishing, consuming)

    publishing.finish()
    wanted = set(confirmed)
    wait_for("every confirmed message", lambda: wanted <= set(consumed), consuming)
    consuming.finish()
    copies = Counter(consumed)
    duplicates = sum(n - 1 for n in copies.values())
    print(f"migration: {len(confirmed)} confirmed, {len(consumed)} consumed, {duplicates} duplicates")
    assert not wanted - copies.keys(), f"lost: {sorted(wanted - copies.keys())[:20]}"
    assert copies.keys() <= wanted  # the producer stops between publishes: nothing unconfirmed
    assert rabbitmq_holds(rabbitmq_node, queue) == 0
    assert "Traceback" not in lavin.output
