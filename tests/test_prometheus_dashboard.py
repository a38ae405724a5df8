"""Every metric RabbitMQ's "RabbitMQ-Overview" Grafana dashboard asks for is served by a
broker under a little traffic, and the counters behind its panels (and the other counters of
RabbitMQ's metrics.md) count what a known sequence of client operations does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import requests
from broker_process import BrokerProcess
from helpers import unique_name, wait_until
from prometheus_client.samples import Sample
from test_prometheus import metrics_url, scrape, value

DASHBOARD_NAMES = Path(__file__).parent / "data" / "grafana_rabbitmq_overview_metrics.txt"
Channel = pika.adapters.blocking_connection.BlockingChannel


def dashboard_metric_names() -> set[str]:
    lines = DASHBOARD_NAMES.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


@pytest.fixture
def channel(broker: BrokerProcess) -> Iterator[Channel]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield connection.channel()
    if connection.is_open:
        connection.close()


def grew(before: list[Sample], after: list[Sample], name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_every_metric_of_the_overview_dashboard_is_served_under_traffic(broker: BrokerProcess, channel) -> None:
    names = dashboard_metric_names()
    assert len(names) == 40 and "rabbitmq_global_publishers" in names  # the list was read whole
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.confirm_delivery()
    for size in (10, 500, 20_000):
        channel.basic_publish("", queue, b"x" * size)
    channel.basic_publish("", unique_name("nowhere"), b"dropped")
    channel.basic_get(queue, auto_ack=True)
    served = {sample.name for sample in scrape(metrics_url(broker))}
    assert names <= served, sorted(names - served)


def test_the_message_size_histogram_has_rabbitmqs_buckets(broker: BrokerProcess, channel) -> None:
    queue = channel.queue_declare("", exclusive=True).method.queue
    before = scrape(metrics_url(broker))
    # Sizes on and just over bucket bounds, and one far over the last named one but 1e8.
    sizes = (0, 100, 101, 1_000, 1_001, 65_536, 1_000_000)
    for size in sizes:
        channel.basic_publish("", queue, b"x" * size)
    channel.queue_declare(queue, passive=True)  # a round trip: the publishes are in
    after = scrape(metrics_url(broker))
    bucket = "rabbitmq_message_size_bytes_bucket"
    expected = {"100.0": 2, "1000.0": 4, "10000.0": 5, "100000.0": 6, "1e+06": 7, "1e+07": 7, "5e+07": 7, "1e+08": 7}
    for le, count in expected.items():
        assert grew(before, after, bucket, le=le, protocol="amqp091") == count, le
    assert grew(before, after, bucket, le="+Inf") == len(sizes)
    assert grew(before, after, "rabbitmq_message_size_bytes_count") == len(sizes)
    assert grew(before, after, "rabbitmq_message_size_bytes_sum") == sum(sizes)


def test_an_unroutable_publish_is_dropped_or_returned_as_its_mandatory_flag_says(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    before = scrape(metrics_url(broker))
    channel.basic_publish("", unique_name("nowhere"), b"dropped")
    channel.basic_publish("", queue, b"routed")
    channel.queue_declare(queue, passive=True)
    per_object = scrape(metrics_url(broker, "per-object"))
    after = scrape(metrics_url(broker))
    assert grew(before, after, "rabbitmq_global_messages_unroutable_dropped_total", protocol="amqp091") == 1
    assert grew(before, after, "rabbitmq_global_messages_unroutable_returned_total") == 0
    assert grew(before, after, "rabbitmq_global_messages_routed_total") == 1
    assert grew(before, after, "rabbitmq_global_messages_received_total") == 2
    assert grew(before, after, "rabbitmq_global_messages_received_confirm_total") == 0
    dropped = [s for s in per_object if s.name == "rabbitmq_channel_messages_unroutable_dropped_total" and s.value]
    assert [s.value for s in dropped] == [1]
    connection.close()
    # A closed channel's counts stay in the totals.
    assert grew(before, scrape(metrics_url(broker)), "rabbitmq_global_messages_unroutable_dropped_total") == 1


def test_confirms_gets_and_publishers_are_counted(broker: BrokerProcess) -> None:
    before = scrape(metrics_url(broker))
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    publisher, idle = connection.channel(), connection.channel()
    queue = publisher.queue_declare("", exclusive=True).method.queue
    publisher.confirm_delivery()
    for _ in range(3):
        publisher.basic_publish("", queue, b"m")
    idle.basic_get(queue, auto_ack=True)
    for _ in range(2):
        assert idle.basic_get(queue, auto_ack=True) != (None, None, None)
    for _ in range(2):
        assert idle.basic_get(queue, auto_ack=True) == (None, None, None)
    after = scrape(metrics_url(broker))
    per_object = scrape(metrics_url(broker, "per-object"))
    assert grew(before, after, "rabbitmq_global_messages_received_confirm_total") == 3
    assert grew(before, after, "rabbitmq_global_messages_get_empty_total") == 2
    assert grew(before, after, "rabbitmq_global_publishers", protocol="amqp091") == 1
    assert grew(before, after, "rabbitmq_channels_opened_total") == 2
    empty = [s.value for s in per_object if s.name == "rabbitmq_channel_get_empty_total" and s.value]
    assert empty == [2]
    connection.close()
    wait_until(
        lambda: grew(before, scrape(metrics_url(broker)), "rabbitmq_channels_closed_total") == 2,
        "the channels to close",
    )
    assert grew(before, scrape(metrics_url(broker)), "rabbitmq_global_publishers") == 0


def test_queues_declared_created_and_deleted_are_counted(broker: BrokerProcess, channel) -> None:
    before = scrape(metrics_url(broker))
    queue = unique_name("churn")
    channel.queue_declare(queue)
    channel.queue_declare(queue)  # declared again: not created again
    channel.queue_declare(queue, passive=True)  # RabbitMQ counts no passive declare
    channel.queue_delete(queue)
    after = scrape(metrics_url(broker))
    assert grew(before, after, "rabbitmq_queues_declared_total") == 2
    assert grew(before, after, "rabbitmq_queues_created_total") == 1
    assert grew(before, after, "rabbitmq_queues_deleted_total") == 1


def test_dead_lettered_counters_by_reason_queue_type_and_strategy(broker: BrokerProcess, channel) -> None:
    dlx, dead = unique_name("dlx"), unique_name("dead")
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dead, exclusive=True)
    channel.queue_bind(dead, dlx)
    with_dlx = channel.queue_declare(
        "", exclusive=True, arguments={"x-dead-letter-exchange": dlx, "x-max-length": 1}
    ).method.queue
    without = channel.queue_declare("", exclusive=True, arguments={"x-message-ttl": 1}).method.queue
    before = scrape(metrics_url(broker))
    for _ in range(3):  # two over the limit: dropped from the head into the DLX
        channel.basic_publish("", with_dlx, b"m")
    method, _, _ = channel.basic_get(with_dlx)
    channel.basic_reject(method.delivery_tag, requeue=False)
    channel.basic_publish("", without, b"expires")
    time.sleep(0.05)
    assert channel.basic_get(without) == (None, None, None)  # expired, with no DLX to go to

    def dead_lettered(reason: str, strategy: str) -> float:
        name = f"rabbitmq_global_messages_dead_lettered_{reason}_total"
        labels = {"queue_type": "rabbit_classic_queue", "dead_letter_strategy": strategy}
        return grew(before, scrape(metrics_url(broker)), name, **labels)

    wait_until(lambda: dead_lettered("expired", "disabled") == 1, "the expired message to be counted")
    assert dead_lettered("maxlen", "at_most_once") == 2
    assert dead_lettered("rejected", "at_most_once") == 1
    assert dead_lettered("rejected", "disabled") == 0
    assert channel.queue_declare(dead, passive=True).method.message_count == 3
    after = scrape(metrics_url(broker))
    confirmed = "rabbitmq_global_messages_dead_lettered_confirmed_total"
    assert value(after, confirmed, queue_type="rabbit_quorum_queue", dead_letter_strategy="at_least_once") == 0
    delivery_limit = "rabbitmq_global_messages_dead_lettered_delivery_limit_total"
    assert value(after, delivery_limit, queue_type="rabbit_quorum_queue", dead_letter_strategy="disabled") == 0
    channel.exchange_delete(dlx)


def test_a_reject_without_a_dead_letter_exchange_counts_as_disabled(broker: BrokerProcess, channel) -> None:
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"m")
    before = scrape(metrics_url(broker))
    method, _, _ = channel.basic_get(queue)
    channel.basic_nack(method.delivery_tag, requeue=False)
    channel.queue_declare(queue, passive=True)
    after = scrape(metrics_url(broker))
    name = "rabbitmq_global_messages_dead_lettered_rejected_total"
    assert grew(before, after, name, queue_type="rabbit_classic_queue", dead_letter_strategy="disabled") == 1


def test_channel_and_connection_metrics_show_what_is_pending(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    tx = connection.channel()
    queue = tx.queue_declare("", exclusive=True).method.queue
    tx.basic_publish("", queue, b"m")
    tx.tx_select()
    method, _, _ = tx.basic_get(queue)
    tx.basic_ack(method.delivery_tag)
    for _ in range(2):
        tx.basic_publish("", queue, b"in a transaction")
    tx.queue_declare(queue, passive=True)
    per_object = scrape(metrics_url(broker, "per-object"))
    channel_label = next(
        s.labels["channel"] for s in per_object if s.name == "rabbitmq_channel_messages_uncommitted" and s.value == 2
    )
    assert value(per_object, "rabbitmq_channel_acks_uncommitted", channel=channel_label) == 1
    assert value(per_object, "rabbitmq_channel_messages_unconfirmed", channel=channel_label) == 0
    tx.tx_commit()
    per_object = scrape(metrics_url(broker, "per-object"))
    assert value(per_object, "rabbitmq_channel_messages_uncommitted", channel=channel_label) == 0
    assert value(per_object, "rabbitmq_channel_acks_uncommitted", channel=channel_label) == 0
    connection_label = channel_label.rsplit(" (", 1)[0]
    incoming = value(per_object, "rabbitmq_connection_incoming_packets_total", connection=connection_label)
    outgoing = value(per_object, "rabbitmq_connection_outgoing_packets_total", connection=connection_label)
    assert incoming >= 8 and outgoing >= 8  # one read and one write at least per round trip
    assert value(per_object, "rabbitmq_connection_pending_packets", connection=connection_label) == 0
    connection.close()


def test_the_lavin_prefix_names_the_new_families_too(broker: BrokerProcess) -> None:
    response = requests.get(metrics_url(broker), params={"prefix": "lavin"}, timeout=10)
    assert "lavin_message_size_bytes_bucket{" in response.text
    assert "lavin_global_messages_dead_lettered_expired_total{" in response.text
    assert "lavin_queues_declared_total " in response.text


def test_queue_metrics_give_unacked_bytes_utilisation_and_disk_traffic(broker: BrokerProcess, channel) -> None:
    queue = unique_name("bytes")
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    for size in (100, 250, 4000):
        channel.basic_publish("", queue, b"x" * size, pika.BasicProperties(delivery_mode=2))
    method, _, _ = channel.basic_get(queue)  # 100 bytes now unacked

    def queue_value(name: str) -> float:
        samples = scrape(metrics_url(broker, "detailed"), family="queue_metrics", queue=f"^{queue}$")
        return value(samples, f"rabbitmq_detailed_queue_{name}", vhost="/", queue=queue)

    assert queue_value("messages_ready_bytes") == 4250
    assert queue_value("messages_unacked_bytes") == 100
    assert queue_value("messages_bytes") == 4350
    assert queue_value("consumer_utilisation") == 0  # no consumers
    assert queue_value("disk_writes_total") >= 1  # confirmed persistent messages of a durable queue are written
    channel.basic_ack(method.delivery_tag)
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume(queue, lambda *args: None)  # takes one and is then full
    wait_until(lambda: queue_value("messages_unacked_bytes") == 250, "a delivery to the consumer")
    assert queue_value("consumer_utilisation") == 0  # its prefetch is full
    channel.basic_qos(prefetch_count=0)
    channel.basic_consume(queue, lambda *args: None)  # a second consumer, without a limit
    wait_until(lambda: queue_value("messages_unacked_bytes") == 4250, "a delivery to the second consumer")
    assert queue_value("consumer_utilisation") == 0.5  # one of the two can take more
    channel.queue_delete(queue)


def test_a_cold_queue_counts_its_disk_reads(broker_factory) -> None:
    """Messages read back from the segment files after a restart count as disk reads."""
    broker = broker_factory()
    queue = unique_name("cold")
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"kept", pika.BasicProperties(delivery_mode=2))
    broker.restart()
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        assert connection.channel().basic_get(queue, auto_ack=True)[2] == b"kept"
    samples = scrape(metrics_url(broker, "detailed"), family="queue_metrics", queue=f"^{queue}$")
    assert value(samples, "rabbitmq_detailed_queue_disk_reads_total", vhost="/", queue=queue) >= 1


def test_the_memory_breakdown_attributes_queued_records_and_adds_up(broker: BrokerProcess, channel) -> None:
    def breakdown() -> dict[str, float]:
        samples = scrape(metrics_url(broker, "memory-breakdown"))
        assert value(samples, "rabbitmq_identity_info", rabbitmq_endpoint="memory-breakdown") == 1
        prefix = "rabbitmq_memory_"
        return {s.name.removeprefix(prefix): s.value for s in samples if s.name.startswith(prefix)}

    before = breakdown()
    assert set(before) == {
        "classic_queue_erlang_process_bytes",
        "client_connection_reader_bytes",
        "client_connection_writer_bytes",
        "other_system_bytes",
    }
    queue = channel.queue_declare("", exclusive=True).method.queue  # a non-durable queue keeps its records in memory
    for _ in range(20):
        channel.basic_publish("", queue, b"x" * 10_000)
    channel.queue_declare(queue, passive=True)
    during = breakdown()
    assert during["classic_queue_erlang_process_bytes"] >= before["classic_queue_erlang_process_bytes"] + 200_000
    resident = value(scrape(metrics_url(broker)), "rabbitmq_process_resident_memory_bytes")
    assert sum(during.values()) == pytest.approx(resident, rel=0.2)  # read a moment apart
    channel.queue_purge(queue)
    after = breakdown()
    assert after["classic_queue_erlang_process_bytes"] < during["classic_queue_erlang_process_bytes"]
