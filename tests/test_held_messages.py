"""A queue's bytes, persistent messages and messages in memory, as the management API's
queue fields and the Prometheus queue metrics give them (docs/compatibility.md says what
"persistent" and "in RAM" mean for Lavin's stores) and `lavin ctl list_queues` shows: exact
numbers after known publishes, deliveries, requeues, acks and a restart."""

from __future__ import annotations

import json
import subprocess
import sys

import pika
import requests
from broker_process import BrokerProcess, hermetic_env
from helpers import unique_name, wait_until
from test_prometheus import metrics_url, scrape, value

PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)
# (body size, persistent): sizes that tell every sum apart.
PUBLISHES = ((100, True), (200, True), (10, False), (300, True), (20, False))
FIELDS = (
    "message_bytes",
    "message_bytes_ready",
    "message_bytes_unacknowledged",
    "message_bytes_persistent",
    "message_bytes_ram",
    "messages_persistent",
    "messages_ram",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
)
# Prometheus metric -> the API field it must agree with.
METRICS = {
    "messages_bytes": "message_bytes",
    "messages_ready_bytes": "message_bytes_ready",
    "messages_unacked_bytes": "message_bytes_unacknowledged",
    "messages_persistent": "messages_persistent",
    "messages_persistent_bytes": "message_bytes_persistent",
    "messages_ram": "messages_ram",
    "messages_ready_ram": "messages_ready_ram",
}


def held(broker: BrokerProcess, queue: str) -> dict[str, int]:
    """The API's fields for `queue`, after checking that Prometheus says the same."""
    response = requests.get(f"{broker.http_url}/api/queues/%2F/{queue}", auth=("guest", "guest"), timeout=10)
    assert response.status_code == 200, response.text
    fields = {name: response.json()[name] for name in FIELDS}
    samples = scrape(metrics_url(broker, "detailed"), family="queue_metrics", queue=f"^{queue}$")
    for metric, field in METRICS.items():
        assert value(samples, f"rabbitmq_detailed_queue_{metric}", vhost="/", queue=queue) == fields[field], metric
    return fields


def expected(ready: int, unacked: int, persistent: tuple[int, int], ram: int, ram_bytes: int) -> dict[str, int]:
    """The fields from the ready and unacked bytes, the persistent (messages, bytes) and the
    ready messages held in memory (messages, bytes)."""
    return {
        "message_bytes": ready + unacked,
        "message_bytes_ready": ready,
        "message_bytes_unacknowledged": unacked,
        "message_bytes_persistent": persistent[1],
        "message_bytes_ram": ram_bytes,
        "messages_persistent": persistent[0],
        "messages_ram": ram,
        "messages_ready_ram": ram,
        "messages_unacknowledged_ram": 0,
    }


def publish(channel, queue: str) -> None:
    channel.confirm_delivery()
    for size, persistent in PUBLISHES:
        channel.basic_publish("", queue, b"x" * size, PERSISTENT if persistent else TRANSIENT)


def test_a_durable_queue_counts_persistent_and_in_memory_messages(broker_factory) -> None:
    broker = broker_factory()
    queue = unique_name("held")
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        publish(channel, queue)
        # All five ready and held decoded; the three persistent ones (600 bytes) count.
        assert held(broker, queue) == expected(630, 0, (3, 600), 5, 630)
        method, _, body = channel.basic_get(queue)  # the persistent 100 bytes, now unacked
        assert len(body) == 100
        assert held(broker, queue) == expected(530, 100, (3, 600), 4, 530)
        channel.basic_nack(method.delivery_tag, requeue=True)  # ready again, read back from its record
        wait_until(lambda: held(broker, queue)["message_bytes_unacknowledged"] == 0, "the requeue")
        assert held(broker, queue) == expected(630, 0, (3, 600), 4, 530)
        gets = [channel.basic_get(queue) for _ in range(3)]  # 100 (requeued), 200, then the transient 10
        assert [len(body) for _, _, body in gets] == [100, 200, 10]
        assert held(broker, queue) == expected(320, 310, (3, 600), 2, 320)
        channel.basic_ack(gets[1][0].delivery_tag)  # the persistent 200 bytes are gone
        channel.basic_ack(gets[2][0].delivery_tag)
        wait_until(lambda: held(broker, queue)["messages_persistent"] == 2, "the acks")
        assert held(broker, queue) == expected(320, 100, (2, 400), 2, 320)
    # The unacked 100 bytes come back with the other persistent message; the transient
    # 20 bytes do not survive the restart, and nothing is held decoded after it.
    broker.restart()
    assert held(broker, queue) == expected(400, 0, (2, 400), 0, 0)
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=2)  # full once both are delivered
        channel.basic_consume(queue, lambda *args: None)
        wait_until(lambda: held(broker, queue)["message_bytes_unacknowledged"] == 400, "the deliveries")
        assert held(broker, queue) == expected(0, 400, (2, 400), 0, 0)
        channel.queue_purge(queue)
        channel.basic_publish("", queue, b"x" * 50, PERSISTENT)  # to the full consumer: stays ready
        channel.queue_declare(queue, passive=True)  # a round trip: the publish is in
        assert held(broker, queue) == expected(50, 400, (3, 450), 1, 50)
        channel.queue_purge(queue)
        assert held(broker, queue) == expected(0, 400, (2, 400), 0, 0)
        channel.queue_delete(queue)


def test_a_consumer_fed_straight_from_the_publish_leaves_nothing_ready(broker: BrokerProcess) -> None:
    queue = unique_name("straight")
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.basic_consume(queue, lambda *args: None)  # no prefetch limit: every message goes to it
        publish(channel, queue)
        wait_until(lambda: held(broker, queue)["message_bytes_unacknowledged"] == 630, "the deliveries")
        assert held(broker, queue) == expected(0, 630, (3, 600), 0, 0)
        channel.queue_delete(queue)


def test_a_non_durable_queue_keeps_no_persistent_messages(broker: BrokerProcess) -> None:
    queue = unique_name("transient")
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=False)
        publish(channel, queue)
        channel.basic_get(queue)
        assert held(broker, queue) == expected(530, 100, (0, 0), 4, 530)
        columns = ("name", "messages_persistent", "messages_ram", "message_bytes", "message_bytes_unacknowledged")
        ctl = [sys.executable, "-m", "lavin", "ctl", "--data-dir", str(broker.data_dir)]
        listed = subprocess.run(
            [*ctl, "list_queues", "--json", *columns],
            capture_output=True, text=True, timeout=30, env=hermetic_env(), check=True,
        )  # fmt: skip
        assert dict(zip(columns, (queue, 0, 4, 630, 100), strict=True)) in json.loads(listed.stdout)
        channel.queue_delete(queue)


def test_a_streams_unacked_bytes_are_read_from_its_log(broker: BrokerProcess) -> None:
    queue = unique_name("stream")
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        publish(channel, queue)
        channel.basic_qos(prefetch_count=2)
        channel.basic_consume(queue, lambda *args: None, arguments={"x-stream-offset": "first"})
        wait_until(lambda: held(broker, queue)["message_bytes_unacknowledged"] == 300, "two deliveries")
        fields = held(broker, queue)
        assert (fields["messages_persistent"], fields["messages_ram"], fields["message_bytes_ram"]) == (0, 0, 0)
        # Hand the deliveries to the callback: pika would nack undispatched ones on close,
        # and a stream refuses a nack.
        connection.process_data_events(time_limit=0.2)
        channel.queue_delete(queue)
