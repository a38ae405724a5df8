"""Shovel and federation link metrics on /metrics, under traffic: RabbitMQ's counts of links
by status, and Lavin's per-link forwarded counters and state gauges. Two brokers: the
downstream runs a local shovel and federates an exchange from the upstream."""

from __future__ import annotations

import pika
import requests
from broker_process import BrokerFactory, BrokerProcess
from helpers import connect, unique_name, wait_until
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

AUTH = ("guest", "guest")
STATES = {"starting", "running", "paused", "error", "terminated"}


def scrape(broker: BrokerProcess, view: str = "", prefix: str = "rabbitmq") -> list[Sample]:
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics{'/' + view if view else ''}"
    response = requests.get(url, params={"prefix": prefix}, timeout=10)
    assert response.status_code == 200, response.text
    return [sample for family in text_string_to_metric_families(response.text) for sample in family.samples]


def samples_named(samples: list[Sample], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in samples if s.name == name}


def api_put(broker: BrokerProcess, path: str, body: object) -> None:
    response = requests.put(f"{broker.http_url}/api/{path}", json=body, auth=AUTH, timeout=10)
    assert response.status_code in (201, 204), response.text


def publish(broker: BrokerProcess, exchange: str, routing_key: str, count: int) -> None:
    connection = connect(broker.url)
    channel = connection.channel()
    channel.confirm_delivery()
    for number in range(count):
        channel.basic_publish(exchange, routing_key, b"%d" % number, pika.BasicProperties(delivery_mode=2))
    connection.close()


def declare(broker: BrokerProcess, *queues: str, exchange: str = "") -> None:
    connection = connect(broker.url)
    channel = connection.channel()
    if exchange:
        channel.exchange_declare(exchange, "direct", durable=True)
    for queue in queues:
        channel.queue_declare(queue, durable=True)
        if exchange:
            channel.queue_bind(queue, exchange, routing_key="k")
    connection.close()


def state_of(samples: list[Sample], name: str, **labels: str) -> str:
    """The one state whose gauge is 1, checking the others are there and 0."""
    rows = [s for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert {s.labels["state"] for s in rows} == STATES, rows
    (current,) = [s.labels["state"] for s in rows if s.value == 1]
    assert all(s.value == 0 for s in rows if s.labels["state"] != current)
    return current


def forwarded(samples: list[Sample], name: str, **labels: str) -> float:
    (value,) = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    return value


def test_links_are_counted_by_status_and_each_has_its_forwarded_count_and_state(broker_factory: BrokerFactory) -> None:
    upstream, downstream = broker_factory(), broker_factory()
    source, destination, federated_queue = unique_name("src"), unique_name("dest"), unique_name("fed")
    declare(downstream, source, destination)
    declare(downstream, federated_queue, exchange="fed-x")
    declare(upstream, exchange="fed-x")
    empty = scrape(downstream)
    assert samples_named(empty, "rabbitmq_shovel_dynamic") == {}
    assert samples_named(empty, "rabbitmq_federation_links") == {}

    shovel = {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://", "dest-queue": destination}
    api_put(downstream, "parameters/shovel/%2F/moving", {"value": shovel})
    api_put(downstream, "parameters/federation-upstream/%2F/origin", {"value": {"uri": upstream.url}})
    policy = {"pattern": "^fed-x$", "apply-to": "exchanges", "definition": {"federation-upstream-set": "all"}}
    api_put(downstream, "policies/%2F/federate", policy)

    def both_running() -> bool:
        samples = scrape(downstream)
        running = {(("status", "running"),): 1.0}
        return (
            samples_named(samples, "rabbitmq_shovel_dynamic") == running
            and samples_named(samples, "rabbitmq_federation_links") == running
        )

    wait_until(both_running, "the shovel and the federation link to run")
    publish(downstream, "", source, 40)
    publish(upstream, "fed-x", "k", 25)
    shovel_labels = {"vhost": "/", "shovel": "moving"}
    link_labels = {"vhost": "/", "type": "exchange", "exchange": "fed-x", "upstream": "origin"}

    def all_forwarded() -> bool:
        samples = scrape(downstream)
        return (
            forwarded(samples, "rabbitmq_shovel_messages_forwarded_total", **shovel_labels) == 40
            and forwarded(samples, "rabbitmq_federation_link_messages_forwarded_total", **link_labels) == 25
        )

    wait_until(all_forwarded, "the forwarded counters to count every message")
    for view in ("", "per-object"):
        samples = scrape(downstream, view)
        assert state_of(samples, "rabbitmq_shovel_state", **shovel_labels) == "running"
        assert state_of(samples, "rabbitmq_federation_link_state", **link_labels) == "running"
        (link_sample,) = [s for s in samples if s.name == "rabbitmq_federation_link_messages_forwarded_total"]
        assert link_sample.labels.get("queue", "") == ""

    assert requests.put(f"{downstream.http_url}/api/shovels/%2F/moving/pause", auth=AUTH, timeout=10).ok
    paused = scrape(downstream)
    assert state_of(paused, "rabbitmq_shovel_state", **shovel_labels) == "paused"
    assert samples_named(paused, "rabbitmq_shovel_dynamic") == {(("status", "paused"),): 1.0}
    assert forwarded(paused, "rabbitmq_shovel_messages_forwarded_total", **shovel_labels) == 40

    named_lavin = scrape(downstream, prefix="lavin")
    assert forwarded(named_lavin, "lavin_federation_link_messages_forwarded_total", **link_labels) == 25
    assert state_of(named_lavin, "lavin_shovel_state", **shovel_labels) == "paused"
