"""The Prometheus endpoints, as RabbitMQ's prometheus plugin serves them: `/metrics`
without authentication on its own port and behind the management API's login, the
aggregated, per-object and detailed views, RabbitMQ's metric names (so that its Grafana
dashboards work), the `lavin` prefix, and 400 for bad parameters. The text is read with
prometheus_client's own parser, and the numbers follow what real clients do."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest
import requests
from broker_process import BrokerProcess, port_accepts
from control_helpers import ctl_ok
from helpers import unique_name, wait_until
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

GUEST = ("guest", "guest")
TIMEOUT = 10
# What RabbitMQ's Grafana dashboards (RabbitMQ-Overview) and the plugin's docs name.
DASHBOARD_METRICS = {
    "rabbitmq_queue_messages_ready",
    "rabbitmq_queue_messages_unacked",
    "rabbitmq_queue_messages",
    "rabbitmq_queue_consumers",
    "rabbitmq_connections",
    "rabbitmq_channels",
    "rabbitmq_queues",
    "rabbitmq_consumers",
    "rabbitmq_connections_opened_total",
    "rabbitmq_connections_closed_total",
    "rabbitmq_global_messages_received_total",
    "rabbitmq_global_messages_delivered_total",
    "rabbitmq_global_messages_delivered_consume_manual_ack_total",
    "rabbitmq_global_messages_delivered_consume_auto_ack_total",
    "rabbitmq_global_messages_delivered_get_manual_ack_total",
    "rabbitmq_global_messages_delivered_get_auto_ack_total",
    "rabbitmq_global_messages_redelivered_total",
    "rabbitmq_global_messages_acknowledged_total",
    "rabbitmq_global_messages_confirmed_total",
    "rabbitmq_global_messages_unroutable_returned_total",
    "rabbitmq_global_consumers",
    "rabbitmq_process_resident_memory_bytes",
    "rabbitmq_resident_memory_limit_bytes",
    "rabbitmq_disk_space_available_bytes",
    "rabbitmq_disk_space_available_limit_bytes",
    "rabbitmq_process_open_fds",
    "rabbitmq_process_max_fds",
    "rabbitmq_erlang_uptime_seconds",
    "rabbitmq_alarms_memory_used_watermark",
    "rabbitmq_alarms_free_disk_space_watermark",
    "rabbitmq_build_info",
    "rabbitmq_identity_info",
}


def scrape(url: str, auth: tuple[str, str] | None = None, **params: str | list[str]) -> list[Sample]:
    """Every sample the endpoint answers, through prometheus_client's parser."""
    response = requests.get(url, params=params, auth=auth, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return [sample for family in text_string_to_metric_families(response.text) for sample in family.samples]


def metrics_url(broker: BrokerProcess, view: str = "") -> str:
    return f"http://127.0.0.1:{broker.metrics_port}/metrics{'/' + view if view else ''}"


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The one sample named `name` whose labels include `labels`."""
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def queue_depth(broker: BrokerProcess, queue: str) -> dict[str, float]:
    samples = scrape(metrics_url(broker, "detailed"), family="queue_coarse_metrics", vhost="/", queue=f"^{queue}$")
    prefix = "rabbitmq_detailed_queue_"
    return {s.name.removeprefix(prefix): s.value for s in samples if s.labels == {"vhost": "/", "queue": queue}}


@pytest.fixture
def channel(broker: BrokerProcess) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield connection.channel()
    if connection.is_open:
        connection.close()


def test_the_metrics_port_answers_without_credentials_in_rabbitmqs_names(broker: BrokerProcess) -> None:
    samples = scrape(metrics_url(broker))
    names = {sample.name for sample in samples}
    assert names >= DASHBOARD_METRICS, sorted(DASHBOARD_METRICS - names)
    assert value(samples, "rabbitmq_identity_info", rabbitmq_endpoint="aggregated") == 1
    assert value(samples, "rabbitmq_build_info", product_name="Lavin") == 1
    # Aggregated: no per-object labels.
    assert not [s for s in samples if s.name.startswith("rabbitmq_queue_") and s.labels]
    assert value(samples, "rabbitmq_process_resident_memory_bytes") > 1_000_000
    assert value(samples, "rabbitmq_process_open_fds") > 3


def test_queue_depth_in_the_detailed_view_follows_publishes_gets_and_acks(broker: BrokerProcess, channel) -> None:
    queue = unique_name("depth")
    channel.queue_declare(queue)
    assert queue_depth(broker, queue) == {"messages_ready": 0, "messages_unacked": 0, "messages": 0}
    channel.confirm_delivery()
    for _ in range(5):
        channel.basic_publish("", queue, b"body")
    assert queue_depth(broker, queue) == {"messages_ready": 5, "messages_unacked": 0, "messages": 5}
    tags = [channel.basic_get(queue)[0].delivery_tag for _ in range(2)]
    assert queue_depth(broker, queue) == {"messages_ready": 3, "messages_unacked": 2, "messages": 5}
    channel.basic_ack(tags[-1], multiple=True)
    channel.queue_declare(queue, passive=True)  # a round trip: the ack is in
    assert queue_depth(broker, queue) == {"messages_ready": 3, "messages_unacked": 0, "messages": 3}
    channel.queue_delete(queue)
    assert queue_depth(broker, queue) == {}


def test_detailed_gives_only_the_families_vhosts_and_queues_asked_for(broker: BrokerProcess, channel) -> None:
    queue = unique_name("detailed")
    channel.queue_declare(queue)
    channel.basic_consume(queue, lambda *args: None)
    url = metrics_url(broker, "detailed")
    samples = scrape(url, family=["queue_consumer_count", "vhost_status"], queue=f"^{queue}$")
    assert value(samples, "rabbitmq_detailed_queue_consumers", vhost="/", queue=queue) == 1
    assert value(samples, "rabbitmq_cluster_vhost_status", vhost="/") == 1
    info = value(samples, "rabbitmq_detailed_queue_info", queue=queue, queue_type="rabbit_classic_queue")
    assert info == 1
    assert value(samples, "rabbitmq_identity_info", rabbitmq_endpoint="detailed") == 1
    assert not [s for s in samples if s.name.startswith("rabbitmq_detailed_") and s.labels.get("queue") != queue]
    assert "rabbitmq_detailed_queue_messages_ready" not in {s.name for s in samples}
    # queue_metrics holds queue_consumer_count's metric: given both, it is there once.
    samples = scrape(url, family=["queue_consumer_count", "queue_metrics"], queue=f"^{queue}$")
    assert value(samples, "rabbitmq_detailed_queue_consumers", vhost="/", queue=queue) == 1
    assert value(samples, "rabbitmq_detailed_queue_messages_ready_bytes", vhost="/", queue=queue) == 0
    # An unknown vhost is left out, as RabbitMQ does: nothing of a queue then.
    samples = scrape(url, family="queue_consumer_count", vhost="no-such-vhost")
    assert not [s for s in samples if s.name == "rabbitmq_detailed_queue_consumers"]
    # The other views report on everything, as RabbitMQ's.
    assert value(scrape(metrics_url(broker), vhost="no-such-vhost"), "rabbitmq_queues") >= 1
    channel.queue_delete(queue)


def test_exchange_families_count_bindings(broker: BrokerProcess, channel) -> None:
    exchange, queue = unique_name("x"), unique_name("bound")
    channel.exchange_declare(exchange, "topic")
    channel.queue_declare(queue)
    for key in ("a.*", "b.#"):
        channel.queue_bind(queue, exchange, key)
    samples = scrape(metrics_url(broker, "detailed"), family=["exchange_bindings", "exchange_names"], vhost="/")
    assert value(samples, "rabbitmq_cluster_exchange_bindings", exchange=exchange, type="topic") == 2
    assert value(samples, "rabbitmq_cluster_exchange_name", exchange=exchange, type="topic") == 1
    assert not [s for s in samples if s.labels.get("exchange") == ""]  # the default exchange is left out
    channel.exchange_delete(exchange)
    channel.queue_delete(queue)


def test_totals_and_per_object_samples_follow_connections_and_consumers(broker: BrokerProcess) -> None:
    before = scrape(metrics_url(broker))
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_qos(prefetch_count=7)
    channel.basic_consume(queue, lambda *args: None)
    during = scrape(metrics_url(broker))
    for name in ("rabbitmq_connections", "rabbitmq_channels", "rabbitmq_consumers", "rabbitmq_queues"):
        assert value(during, name) == value(before, name) + 1, name
    per_object = scrape(metrics_url(broker, "per-object"))
    assert value(per_object, "rabbitmq_queue_consumers", vhost="/", queue=queue) == 1
    prefetches = [s for s in per_object if s.name == "rabbitmq_consumer_prefetch" and s.value == 7]
    assert len(prefetches) == 1
    assert prefetches[0].labels["channel"].endswith(f":{broker.port} (1)")
    assert value(per_object, "rabbitmq_identity_info", rabbitmq_endpoint="per-object") == 1
    connection.close()
    wait_until(
        lambda: value(scrape(metrics_url(broker)), "rabbitmq_connections") == value(before, "rabbitmq_connections"),
        "the connection to go",
    )


def test_global_counters_follow_messages_and_connections(broker: BrokerProcess) -> None:
    before = scrape(metrics_url(broker))
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.confirm_delivery()
    queue = channel.queue_declare("", exclusive=True).method.queue
    for _ in range(4):
        channel.basic_publish("", queue, b"m")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", unique_name("nowhere"), b"m", mandatory=True)
    for _ in range(4):
        method, _, _ = channel.basic_get(queue)
        channel.basic_ack(method.delivery_tag)
    channel.queue_declare(queue, passive=True)
    after = scrape(metrics_url(broker))
    connection.close()

    def grew(name: str) -> float:
        return value(after, name, protocol="amqp091") - value(before, name, protocol="amqp091")

    assert grew("rabbitmq_global_messages_received_total") == 5
    assert grew("rabbitmq_global_messages_confirmed_total") == 5
    assert grew("rabbitmq_global_messages_unroutable_returned_total") == 1
    assert grew("rabbitmq_global_messages_delivered_total") == 4
    assert grew("rabbitmq_global_messages_delivered_get_manual_ack_total") == 4
    assert grew("rabbitmq_global_messages_acknowledged_total") == 4
    assert value(after, "rabbitmq_connections_opened_total") == value(before, "rabbitmq_connections_opened_total") + 1

    def closed() -> float:
        return value(scrape(metrics_url(broker)), "rabbitmq_connections_closed_total")

    wait_until(lambda: closed() == value(before, "rabbitmq_connections_closed_total") + 1, "the close to count")


@pytest.fixture(scope="module")
def monitoring_users(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    for name, tag in (("prom-watcher", "monitoring"), ("prom-manager", "management")):
        ctl_ok(broker, "add_user", name, "pw")
        ctl_ok(broker, "set_user_tags", name, tag)
    yield broker
    for name in ("prom-watcher", "prom-manager"):
        ctl_ok(broker, "delete_user", name)


def test_the_management_port_asks_for_a_monitoring_user(monitoring_users: BrokerProcess) -> None:
    url = f"{monitoring_users.http_url}/metrics"
    response = requests.get(url, timeout=TIMEOUT)
    assert response.status_code == 401
    assert response.json() == {"error": "not_authorized", "reason": "Not_Authorized"}
    refused = requests.get(url, auth=("prom-manager", "pw"), timeout=TIMEOUT)
    assert refused.status_code == 401
    assert refused.json()["reason"] == "Not monitor user"
    for auth in (("prom-watcher", "pw"), GUEST):
        assert "rabbitmq_queues" in {s.name for s in scrape(url, auth=auth)}
    detailed = scrape(f"{url}/detailed", auth=("prom-watcher", "pw"), family="vhost_status")
    assert value(detailed, "rabbitmq_cluster_vhost_status", vhost="/") == 1
    assert requests.get(f"{url}/detailed", timeout=TIMEOUT).status_code == 401


def test_the_lavin_prefix_names_every_metric_lavin(broker: BrokerProcess) -> None:
    for view, params in (("", {}), ("per-object", {}), ("detailed", {"family": "queue_coarse_metrics"})):
        names = {s.name for s in scrape(metrics_url(broker, view), prefix="lavin", **params)}
        assert names, view
        assert not [name for name in names if not name.startswith("lavin_")], view
    assert "lavin_queues" in {s.name for s in scrape(metrics_url(broker), prefix="lavin")}
    assert "lavin_build_info" in {s.name for s in scrape(metrics_url(broker, "detailed"), prefix="lavin")}


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"prefix": "erlang"}, "'prefix' must be one of rabbitmq, lavin"),
        ({"prefix": ["lavin", "rabbitmq"]}, "'prefix' must be one of rabbitmq, lavin"),
        ({"family": "queue_coarse_metrics,no_such_family"}, "Unknown metric family: no_such_family"),
        ({"queue": "(unclosed"}, "Invalid 'queue' regex: missing ): (unclosed"),
        ({"queue": ["a", "b"]}, "Only one 'queue' query parameter is allowed"),
        ({"queue": "x" * 2001}, "'queue' regex too long"),
    ],
)
def test_a_bad_parameter_is_400_with_the_reason(broker: BrokerProcess, params: dict[str, str], reason: str) -> None:
    for base, auth in ((metrics_url(broker, "detailed"), None), (f"{broker.http_url}/metrics/detailed", GUEST)):
        response = requests.get(base, params=params, auth=auth, timeout=TIMEOUT)
        assert (response.status_code, response.text) == (400, reason)


def test_an_unknown_view_is_404(broker: BrokerProcess) -> None:
    response = requests.get(metrics_url(broker, "no-such-registry"), timeout=TIMEOUT)
    assert (response.status_code, response.text) == (404, "Unknown Registry")


def test_port_minus_one_turns_the_metrics_listener_off(broker_factory) -> None:
    process = broker_factory(extra_args=["--metrics-http-port", "-1"])
    assert not port_accepts(process.metrics_port)
    assert "(Prometheus metrics)" not in process.output
    assert requests.get(f"{process.http_url}/metrics", auth=GUEST, timeout=TIMEOUT).status_code == 200


def test_the_overview_and_the_health_check_know_the_metrics_listener(broker: BrokerProcess) -> None:
    overview = requests.get(f"{broker.http_url}/api/overview", auth=GUEST, timeout=TIMEOUT).json()
    listeners = {(listener["protocol"], listener["port"]) for listener in overview["listeners"]}
    assert ("http/prometheus", broker.metrics_port) in listeners, listeners
    check = requests.get(
        f"{broker.http_url}/api/health/checks/port-listener/{broker.metrics_port}", auth=GUEST, timeout=TIMEOUT
    )
    assert (check.status_code, check.json()["status"]) == (200, "ok")
