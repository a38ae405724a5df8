"""The management API's runtime endpoints, driven as RabbitMQ's docs show: overview, whoami,
nodes, connections (and closing them), channels, consumers, message rates, health checks
and the aliveness test, with RabbitMQ's visibility rules per user tag."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pytest
import requests
from broker_process import BrokerProcess, stop_quietly
from control_helpers import ctl_ok
from helpers import process_until, round_trip, unique_name
from prometheus_client.parser import text_string_to_metric_families

GUEST = ("guest", "guest")
MANAGER = ("manager", "pw")  # tag management, permissions on /
WATCHER = ("watcher", "pw")  # tag monitoring
SAMPLE_MS = 200  # collect_statistics_interval of the broker under test


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker sampling its statistics every SAMPLE_MS, with a management and a monitoring user."""
    directory = tmp_path_factory.mktemp("runtime")
    ini = directory / "lavin.ini"
    ini.write_text(f"[main]\ncollect_statistics_interval = {SAMPLE_MS}\n")
    process = BrokerProcess(directory / "data", extra_args=["--config", str(ini)])
    process.start()
    for (name, password), tag in ((MANAGER, "management"), (WATCHER, "monitoring")):
        ctl_ok(process, "add_user", name, password)
        ctl_ok(process, "set_user_tags", name, tag)
        ctl_ok(process, "set_permissions", "-p", "/", name, ".*", ".*", ".*")
    yield process
    stop_quietly(process)


def call(
    broker: BrokerProcess, method: str, path: str, auth: tuple[str, str] = GUEST, **headers: str
) -> requests.Response:
    return requests.request(method, f"{broker.http_url}{path}", auth=auth, headers=headers, timeout=10)


def get_json(broker: BrokerProcess, path: str, auth: tuple[str, str] = GUEST) -> Any:
    response = call(broker, "GET", path, auth)
    assert response.status_code == 200, response.text
    return response.json()


def connect(broker: BrokerProcess, name: str, auth: tuple[str, str] = GUEST) -> pika.BlockingConnection:
    """A pika connection that names itself `name` (client property connection_name)."""
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            broker.host,
            broker.port,
            "/",
            pika.PlainCredentials(*auth),
            client_properties={"connection_name": name},
            connection_attempts=1,
        )
    )


def connection_named(broker: BrokerProcess, name: str, auth: tuple[str, str] = GUEST) -> dict[str, Any]:
    found = [c for c in get_json(broker, "/api/connections", auth) if c.get("user_provided_name") == name]
    assert len(found) == 1, found
    return found[0]


def poll(fetch: Callable[[], Any], done: Callable[[Any], bool], what: str, timeout: float = 10.0) -> Any:
    """`fetch()` again until `done` holds for it; a few sampler intervals are enough."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}: {value}")
        time.sleep(SAMPLE_MS / 4000)


# ---- overview, whoami, nodes -------------------------------------------------------------


def test_overview_totals_follow_queues_connections_and_channels(broker: BrokerProcess) -> None:
    before = get_json(broker, "/api/overview")
    assert before["product_name"] == "Lavin"
    assert {"management_version", "rabbitmq_version", "product_version", "cluster_name", "node"} <= set(before)
    assert {"protocol": "amqp", "port": broker.port} in [
        {"protocol": listener["protocol"], "port": listener["port"]} for listener in before["listeners"]
    ]
    assert {"protocol": "http", "port": broker.http_port} in [
        {"protocol": listener["protocol"], "port": listener["port"]} for listener in before["listeners"]
    ]
    assert set(before["queue_totals"]) >= {"messages", "messages_ready", "messages_unacknowledged", "messages_details"}
    connection = connect(broker, unique_name("overview"))
    channel = connection.channel()
    queue = unique_name("overview-q")
    channel.queue_declare(queue, auto_delete=True)
    channel.basic_publish("", queue, b"one")
    round_trip(channel)
    channel.basic_consume(queue, lambda *_: None)
    after = get_json(broker, "/api/overview")
    for key in ("connections", "channels", "queues", "consumers"):
        assert after["object_totals"][key] == before["object_totals"][key] + 1, key
    assert after["queue_totals"]["messages_unacknowledged"] >= 1
    connection.close()
    closed = get_json(broker, "/api/overview")
    assert closed["object_totals"]["connections"] == before["object_totals"]["connections"]


def test_whoami_lists_the_tags(broker: BrokerProcess) -> None:
    assert get_json(broker, "/api/whoami", MANAGER) == {"name": "manager", "tags": ["management"]}
    assert get_json(broker, "/api/whoami") == {"name": "guest", "tags": ["administrator"]}


def test_the_node_and_the_cluster_name(broker: BrokerProcess) -> None:
    nodes = get_json(broker, "/api/nodes")
    assert len(nodes) == 1
    node = nodes[0]
    assert node["type"] == "disc" and node["running"] is True
    assert node["mem_used"] > 0 and node["fd_used"] > 0 and node["disk_free"] > 0
    assert node["mem_alarm"] is False and node["disk_free_alarm"] is False
    assert node["os_pid"] == str(broker.pid)
    assert get_json(broker, f"/api/nodes/{quote(node['name'], safe='')}")["name"] == node["name"]
    assert get_json(broker, "/api/cluster-name") == {"name": node["name"]}
    assert get_json(broker, "/api/extensions") == []
    assert call(broker, "GET", "/api/nodes", MANAGER).status_code == 401  # nodes are for monitors


def test_the_node_memory_breakdown_in_rabbitmqs_shape(broker: BrokerProcess) -> None:
    node = quote(get_json(broker, "/api/nodes")[0]["name"], safe="")
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue  # non-durable: its records stay in memory
        for _ in range(20):
            channel.basic_publish("", queue, b"x" * 10_000)
        round_trip(channel)
        memory = get_json(broker, f"/api/nodes/{node}/memory")["memory"]
    finally:
        connection.close()
    assert memory["strategy"] == "rss" and memory["total"]["rss"] > 0
    assert memory["queue_procs"] >= 200_000 and memory["binary"] == 0  # an Erlang category: none in Lavin
    lavin_categories = ("queue_procs", "connection_readers", "connection_writers", "other_system")
    assert sum(memory[name] for name in lavin_categories) == memory["total"]["rss"]
    assert call(broker, "GET", "/api/nodes/nobody@nowhere/memory", GUEST).status_code == 404
    assert call(broker, "GET", f"/api/nodes/{node}/memory", MANAGER).status_code == 401


# ---- connections -------------------------------------------------------------------------


def test_a_connection_is_listed_with_rabbitmqs_fields(broker: BrokerProcess) -> None:
    name = unique_name("listed")
    connection = connect(broker, name)
    try:
        listed = connection_named(broker, name)
        assert listed["name"] == f"127.0.0.1:{listed['peer_port']} -> 127.0.0.1:{broker.port}"
        assert listed["user"] == "guest" and listed["vhost"] == "/" and listed["state"] == "running"
        assert listed["protocol"] == "AMQP 0-9-1" and listed["auth_mechanism"] == "PLAIN" and listed["ssl"] is False
        assert listed["port"] == broker.port and listed["peer_host"] == "127.0.0.1"
        assert listed["client_properties"]["connection_name"] == name
        assert abs(listed["connected_at"] - time.time() * 1000) < 60_000
        assert listed["recv_oct"] > 0 and listed["send_oct"] > 0 and "rate" in listed["recv_oct_details"]
        assert listed["frame_max"] > 0 and listed["channel_max"] > 0
        assert listed["timeout"] == 60  # the heartbeat negotiated: pika takes the broker's default
        path = f"/api/connections/{quote(listed['name'], safe='')}"
        assert get_json(broker, path)["name"] == listed["name"]
        connection.channel()
        connection.channel()
        channels = get_json(broker, f"{path}/channels")
        assert [c["name"] for c in channels] == [f"{listed['name']} (1)", f"{listed['name']} (2)"]
        assert [c["name"] for c in get_json(broker, "/api/vhosts/%2F/connections")].count(listed["name"]) == 1
        assert [c["name"] for c in get_json(broker, "/api/connections/username/guest")].count(listed["name"]) == 1
    finally:
        connection.close()


def closed_by_broker(connection: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker:
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        process_until(connection, lambda: False, "the broker closes the connection", timeout=5)
    return closed.value


def test_deleting_a_connection_closes_it_with_320_and_the_reason(broker: BrokerProcess) -> None:
    name = unique_name("closed")
    connection = connect(broker, name)
    path = f"/api/connections/{quote(connection_named(broker, name)['name'], safe='')}"
    assert call(broker, "DELETE", path, **{"X-Reason": "maintenance window"}).status_code == 204
    closed = closed_by_broker(connection)
    assert (closed.reply_code, closed.reply_text) == (320, "CONNECTION_FORCED - maintenance window")
    assert call(broker, "GET", path).status_code == 404

    connection = connect(broker, name)
    path = f"/api/connections/{quote(connection_named(broker, name)['name'], safe='')}"
    assert call(broker, "DELETE", path).status_code == 204
    closed = closed_by_broker(connection)
    assert (closed.reply_code, closed.reply_text) == (320, "CONNECTION_FORCED - Closed via management plugin")


def test_deleting_a_users_connections_closes_them_all(broker: BrokerProcess) -> None:
    first, second = connect(broker, unique_name("mine"), MANAGER), connect(broker, unique_name("mine"), MANAGER)
    assert call(broker, "DELETE", "/api/connections/username/manager").status_code == 204
    for connection in (first, second):
        assert closed_by_broker(connection).reply_code == 320
    assert get_json(broker, "/api/connections/username/manager") == []


# ---- channels and consumers --------------------------------------------------------------


def test_channels_and_consumers_are_shown(broker: BrokerProcess) -> None:
    name = unique_name("consuming")
    connection = connect(broker, name)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_qos(prefetch_count=7)
        queue = unique_name("consumed")
        channel.queue_declare(queue, auto_delete=True)
        tag = channel.basic_consume(queue, lambda *_: None, exclusive=True)
        connection_name = connection_named(broker, name)["name"]
        channel_name = f"{connection_name} (1)"
        shown = get_json(broker, f"/api/channels/{quote(channel_name, safe='')}")
        assert shown["number"] == 1 and shown["vhost"] == "/" and shown["user"] == "guest"
        assert shown["connection_details"]["name"] == connection_name
        assert shown["consumer_count"] == 1 and shown["prefetch_count"] == 7 and shown["global_prefetch_count"] == 0
        assert shown["confirm"] is True and shown["transactional"] is False and shown["state"] == "running"
        assert shown["messages_unacknowledged"] == 0 and "message_stats" in shown
        assert channel_name in [c["name"] for c in get_json(broker, "/api/channels")]
        assert channel_name in [c["name"] for c in get_json(broker, "/api/vhosts/%2F/channels")]
        consumers = [c for c in get_json(broker, "/api/consumers/%2F") if c["consumer_tag"] == tag]
        assert len(consumers) == 1
        consumer = consumers[0]
        assert consumer["queue"] == {"name": queue, "vhost": "/"}
        assert consumer["channel_details"]["name"] == channel_name
        assert consumer["channel_details"]["connection_name"] == connection_name
        assert consumer["ack_required"] is True and consumer["exclusive"] is True and consumer["active"] is True
        assert consumer["prefetch_count"] == 7 and consumer["arguments"] == {}
        assert tag in [c["consumer_tag"] for c in get_json(broker, "/api/consumers")]
    finally:
        connection.close()


# ---- who sees what -----------------------------------------------------------------------


def test_a_management_user_sees_and_closes_only_its_own_connections(broker: BrokerProcess) -> None:
    guests, own = unique_name("guests"), unique_name("own")
    guest_connection, manager_connection = connect(broker, guests), connect(broker, own, MANAGER)
    try:
        guest_channel_name = f"{connection_named(broker, guests)['name']} (1)"
        guest_connection.channel()
        seen = {c.get("user_provided_name") for c in get_json(broker, "/api/connections", MANAGER)}
        assert own in seen and guests not in seen
        assert {c["user"] for c in get_json(broker, "/api/channels", MANAGER)} <= {"manager"}
        assert guests in {c.get("user_provided_name") for c in get_json(broker, "/api/connections", WATCHER)}
        guest_path = f"/api/connections/{quote(connection_named(broker, guests)['name'], safe='')}"
        assert call(broker, "GET", guest_path, MANAGER).status_code == 401
        assert call(broker, "GET", f"/api/channels/{quote(guest_channel_name, safe='')}", MANAGER).status_code == 401
        assert call(broker, "GET", guest_path, WATCHER).status_code == 200
        for who in (MANAGER, WATCHER):  # closing another user's connection takes an administrator
            refused = call(broker, "DELETE", guest_path, who)
            assert refused.status_code == 401
            assert refused.json() == {"error": "not_authorised", "reason": "User not authorised to access object"}
        assert call(broker, "GET", "/api/connections/username/guest", MANAGER).status_code == 401
        own_path = f"/api/connections/{quote(connection_named(broker, own, MANAGER)['name'], safe='')}"
        assert call(broker, "DELETE", own_path, MANAGER).status_code == 204
        assert closed_by_broker(manager_connection).reply_code == 320
    finally:
        guest_connection.close()


# ---- message rates -----------------------------------------------------------------------


def test_message_stats_count_and_rates_appear_after_publishing(broker: BrokerProcess) -> None:
    name = unique_name("rates")
    connection = connect(broker, name)
    channel = connection.channel()
    channel.confirm_delivery()
    queue = unique_name("rates-q")
    channel.queue_declare(queue, auto_delete=True)
    for _ in range(40):
        channel.basic_publish("", queue, b"m")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", unique_name("nowhere"), b"lost", mandatory=True)
    for _ in range(10):
        method, _, _ = channel.basic_get(queue, auto_ack=True)
        assert method is not None
    method, _, _ = channel.basic_get(queue)
    assert method is not None
    channel.basic_ack(method.delivery_tag)
    round_trip(channel)
    connection_name = connection_named(broker, name)["name"]
    channel_path = f"/api/channels/{quote(connection_name + ' (1)', safe='')}"
    stats = get_json(broker, channel_path)["message_stats"]  # counts are read when asked for
    assert stats["publish"] == 41 and stats["confirm"] == 41 and stats["return_unroutable"] == 1
    assert (stats["get_no_ack"], stats["get"], stats["ack"], stats["deliver_get"]) == (10, 1, 1, 11)
    assert (stats["deliver"], stats["deliver_no_ack"], stats["redeliver"]) == (0, 0, 0)

    def publish_and_get() -> dict[str, Any]:
        """One more publish and get, so that every sample sees traffic; then the rates."""
        channel.basic_publish("", queue, b"m")
        channel.basic_get(queue, auto_ack=True)
        return dict(get_json(broker, channel_path)["message_stats"])

    poll(
        publish_and_get,
        lambda s: s["publish_details"]["rate"] > 0 and s["deliver_get_details"]["rate"] > 0,
        "the sampler gives the channel publish and deliver_get rates",
    )
    overview = get_json(broker, "/api/overview")["message_stats"]
    assert overview["publish"] >= 41 and overview["deliver_get"] >= 11
    channel.close()  # what a closed channel counted stays in the totals
    assert get_json(broker, "/api/overview")["message_stats"]["publish"] >= overview["publish"]
    other = connection.channel()
    other.basic_publish("", queue, b"m")
    round_trip(other)
    assert call(broker, "DELETE", f"/api/connections/{quote(connection_name, safe='')}").status_code == 204
    closed_by_broker(connection)  # ... and so does what a closed connection's channels counted
    assert get_json(broker, "/api/overview")["message_stats"]["publish"] >= overview["publish"] + 1
    poll(
        lambda: get_json(broker, "/api/overview")["message_stats"]["publish_details"]["rate"],
        lambda rate: rate == 0,
        "the overview's publish rate falls back to 0",
    )


def test_queues_exchanges_and_vhosts_show_their_message_stats(broker: BrokerProcess) -> None:
    queue, exchange = unique_name("stats-q"), unique_name("stats-x")
    with connect(broker, unique_name("stats")) as connection:
        channel = connection.channel()
        channel.exchange_declare(exchange, "fanout", auto_delete=True)
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, exchange)
        for _ in range(5):
            channel.basic_publish(exchange, "", b"m")
        for _ in range(2):
            method, _, _ = channel.basic_get(queue)
            assert method is not None
        channel.basic_ack(method.delivery_tag, multiple=True)
        round_trip(channel)
        queue_json = get_json(broker, f"/api/queues/%2F/{queue}")
        counts = (queue_json["messages"], queue_json["messages_ready"], queue_json["messages_unacknowledged"])
        assert counts == (3, 3, 0)
        stats = queue_json["message_stats"]
        assert (stats["publish"], stats["get"], stats["ack"], stats["deliver_get"]) == (5, 2, 2, 2)
        exchange_stats = get_json(broker, f"/api/exchanges/%2F/{exchange}")["message_stats"]
        assert (exchange_stats["publish_in"], exchange_stats["publish_out"]) == (5, 5)
        vhost = get_json(broker, "/api/vhosts/%2F")
        assert vhost["messages_ready"] >= 3 and vhost["message_stats"]["publish"] >= 5


# ---- health checks and aliveness ---------------------------------------------------------


def test_health_checks_pass_on_a_healthy_broker(broker: BrokerProcess) -> None:
    for check in ("alarms", "local-alarms", "virtual-hosts"):
        assert get_json(broker, f"/api/health/checks/{check}") == {"status": "ok"}, check
    assert get_json(broker, f"/api/health/checks/port-listener/{broker.port}") == {"status": "ok", "port": broker.port}
    unused = min(set(range(1024, 65536)) - set(broker.listeners.values()))  # not one of the broker's listeners
    failed = call(broker, "GET", f"/api/health/checks/port-listener/{unused}")
    assert failed.status_code == 503
    assert failed.json()["status"] == "failed" and failed.json()["missing"] == unused
    assert broker.port in failed.json()["ports"]


def test_the_alarm_health_checks_fail_while_an_alarm_is_on(tmp_path: Path) -> None:
    ini = tmp_path / "alarm.ini"
    ini.write_text("[main]\nvm_memory_high_watermark.relative = 0\n")
    alarmed = BrokerProcess(tmp_path / "data", extra_args=["--config", str(ini)])
    alarmed.start()
    try:
        for check, where in (("alarms", "in the cluster"), ("local-alarms", "on the node")):
            response = call(alarmed, "GET", f"/api/health/checks/{check}")
            assert response.status_code == 503
            body = response.json()
            assert body["status"] == "failed" and body["reason"] == f"resource alarm(s) in effect {where}"
            assert [alarm["resource"] for alarm in body["alarms"]] == ["memory"]
        assert get_json(alarmed, "/api/nodes")[0]["mem_alarm"] is True
    finally:
        stop_quietly(alarmed)


def test_the_aliveness_test_publishes_and_gets_a_message(broker: BrokerProcess) -> None:
    assert get_json(broker, "/api/aliveness-test/%2F") == {"status": "ok"}
    assert get_json(broker, "/api/aliveness-test/%2F", MANAGER) == {"status": "ok"}
    assert call(broker, "GET", "/api/aliveness-test/no-such-vhost").status_code == 404


ALIVENESS_VHOST = "aliveness"


@pytest.fixture(scope="module")
def aliveness_vhost(broker: BrokerProcess) -> str:
    """A vhost of its own, with users refused the aliveness test in each way RabbitMQ refuses it."""
    ctl_ok(broker, "add_vhost", ALIVENESS_VHOST)
    ctl_ok(broker, "set_permissions", "-p", ALIVENESS_VHOST, "guest", ".*", ".*", ".*")
    for name, tag, patterns in (
        ("alive-empty", "management", ("", "", "")),
        ("alive-no-write", "management", (".*", "", ".*")),
        ("alive-watcher", "monitoring", None),
        ("alive-admin", "administrator", None),
    ):
        ctl_ok(broker, "add_user", name, "pw")
        ctl_ok(broker, "set_user_tags", name, tag)
        if patterns is not None:
            ctl_ok(broker, "set_permissions", "-p", ALIVENESS_VHOST, name, *patterns)
    return ALIVENESS_VHOST


def refused(user: str, kind: str, name: str) -> str:
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '{ALIVENESS_VHOST}' refused for user '{user}'"


@pytest.mark.parametrize(
    ("user", "reason"),
    [
        ("alive-empty", refused("alive-empty", "queue", "aliveness-test")),
        ("alive-no-write", refused("alive-no-write", "exchange", "amq.default")),
        ("alive-watcher", "Access refused."),  # sees every vhost, but has no access to this one
        ("alive-admin", "Access refused."),
    ],
)
def test_the_aliveness_test_runs_with_the_requesters_amqp_permissions(
    broker: BrokerProcess, aliveness_vhost: str, user: str, reason: str
) -> None:
    response = call(broker, "GET", f"/api/aliveness-test/{aliveness_vhost}", (user, "pw"))
    assert response.status_code == 401, response.text
    assert response.json() == {"error": "not_authorised", "reason": reason}
    # A refused user declared nothing: the queue is not there.
    assert call(broker, "GET", f"/api/queues/{aliveness_vhost}/aliveness-test").status_code == 404


def test_the_aliveness_test_never_takes_a_message_it_did_not_publish(
    broker: BrokerProcess, aliveness_vhost: str
) -> None:
    parameters = pika.ConnectionParameters(
        broker.host, broker.port, aliveness_vhost, pika.PlainCredentials(*GUEST), connection_attempts=1
    )
    path = f"/api/aliveness-test/{aliveness_vhost}"
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.queue_declare("aliveness-test")
        channel.basic_publish("", "aliveness-test", b"someone else's")
        failed = call(broker, "GET", path)
        assert failed.status_code == 503, failed.text
        reason = "aliveness-test queue holds messages that are not the test's"
        assert failed.json() == {"status": "failed", "reason": reason}
        method, _, body = channel.basic_get("aliveness-test", auto_ack=True)
        assert method is not None and (body, method.redelivered, method.message_count) == (b"someone else's", False, 0)
        assert get_json(broker, path) == {"status": "ok"}
        assert channel.queue_declare("aliveness-test", passive=True).method.message_count == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/connections/no-such-connection",
        "/api/connections/no-such-connection/channels",
        "/api/channels/no-such-channel%20(1)",
        "/api/nodes/no-such-node",
        "/api/vhosts/no-such-vhost/connections",
        "/api/vhosts/no-such-vhost/channels",
        "/api/consumers/no-such-vhost",
    ],
)
def test_unknown_names_are_404(broker: BrokerProcess, path: str) -> None:
    response = call(broker, "GET", path)
    assert response.status_code == 404
    assert response.json() == {"error": "Object Not Found", "reason": "Not Found"}


def test_gets_through_the_api_are_counted_as_rabbitmq_counts_them(broker: BrokerProcess) -> None:
    """Two gets with requeue: two gets with ack, the second of a redelivered message; a get
    with ack_requeue_false is a get without ack. The vhost counts them too."""
    queue = unique_name("api-get")
    with connect(broker, unique_name("api-get")) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=False)
        channel.basic_publish("", queue, b"m")
        round_trip(channel)
    vhost_before = get_json(broker, "/api/vhosts/%2F")["message_stats"]
    path = f"/api/queues/%2F/{queue}/get"
    for ack_mode in ("ack_requeue_true", "reject_requeue_true", "ack_requeue_false"):
        body = {"count": 1, "ackmode": ack_mode, "encoding": "auto"}
        response = requests.post(f"{broker.http_url}{path}", json=body, auth=GUEST, timeout=10)
        assert response.status_code == 200 and len(response.json()) == 1, response.text
    stats = get_json(broker, f"/api/queues/%2F/{queue}")["message_stats"]
    assert (stats["get"], stats["get_no_ack"], stats["redeliver"], stats["deliver_get"]) == (2, 1, 2, 3)
    vhost_after = get_json(broker, "/api/vhosts/%2F")["message_stats"]
    grown = {key: vhost_after[key] - vhost_before.get(key, 0) for key in ("get", "get_no_ack", "redeliver")}
    assert grown == {"get": 2, "get_no_ack": 1, "redeliver": 2}
    detailed = requests.get(
        f"http://127.0.0.1:{broker.metrics_port}/metrics/detailed",
        params={"family": "queue_delivery_metrics", "vhost": "/", "queue": f"^{queue}$"},
        timeout=10,
    ).text
    assert "rabbitmq_detailed_queue_get_ack_total{" in detailed
    counted = {
        sample.name: sample.value
        for family in text_string_to_metric_families(detailed)
        for sample in family.samples
        if sample.labels.get("queue") == queue
    }
    assert counted["rabbitmq_detailed_queue_get_ack_total"] == 2
    assert counted["rabbitmq_detailed_queue_get_total"] == 1
    call(broker, "DELETE", f"/api/queues/%2F/{queue}")


# ---- sample histories (RabbitMQ's lengths_age / msg_rates_age) ----------------------------

RANGES = {"lengths_age": "60", "lengths_incr": "1", "msg_rates_age": "60", "msg_rates_incr": "1"}


def samples_of(details: dict[str, Any]) -> list[int]:
    """The values of a `*_details` history, newest first, after checking its shape."""
    samples = details["samples"]
    stamps = [sample["timestamp"] for sample in samples]
    assert stamps == sorted(stamps, reverse=True) and all(stamp % 1000 == 0 for stamp in stamps), stamps
    return [sample["sample"] for sample in samples]


def test_sample_histories_as_rabbitmqs_charts_ask_for_them(broker: BrokerProcess) -> None:
    queue, exchange = unique_name("history-q"), unique_name("history-x")
    with connect(broker, unique_name("history")) as connection:
        channel = connection.channel()
        channel.exchange_declare(exchange, "fanout", auto_delete=True)
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, exchange)
        for _round in range(3):  # three steps more than a second apart: three different samples
            for _ in range(2):
                channel.basic_publish(exchange, "", b"m")
            round_trip(channel)
            time.sleep(1.6)  # more than the 1 s step, with room for a late sampler
        ranged = requests.get(f"{broker.http_url}/api/queues/%2F/{queue}", params=RANGES, auth=GUEST, timeout=10)
        assert ranged.status_code == 200, ranged.text
        data = ranged.json()
        published = samples_of(data["message_stats"]["publish_details"])
        assert published[0] == 6 and 2 in published and 4 in published, published
        assert published == sorted(published, reverse=True)
        assert data["message_stats"]["publish_details"]["avg_rate"] > 0
        assert data["message_stats"]["publish_details"]["avg"] == sum(published) / len(published)
        assert samples_of(data["messages_ready_details"])[0] == 6
        assert "samples" in data["message_stats"]["deliver_get_details"]
        exchange_data = get_json(broker, f"/api/exchanges/%2F/{exchange}?msg_rates_age=60&msg_rates_incr=1")
        assert samples_of(exchange_data["message_stats"]["publish_in_details"])[0] == 6
        overview = get_json(broker, "/api/overview?" + "&".join(f"{k}={v}" for k, v in RANGES.items()))
        assert samples_of(overview["message_stats"]["publish_details"])[0] >= 6
        assert samples_of(overview["queue_totals"]["messages_ready_details"])[0] >= 6
        vhost = get_json(broker, "/api/vhosts/%2F?msg_rates_age=60&msg_rates_incr=1")
        assert samples_of(vhost["message_stats"]["publish_details"])[0] >= 6
        plain = get_json(broker, f"/api/queues/%2F/{queue}")
        assert plain["message_stats"]["publish_details"].keys() == {"rate"}


@pytest.mark.parametrize(
    "query",
    [
        "lengths_age=60",
        "msg_rates_incr=5",
        "lengths_age=x&lengths_incr=5",
        "lengths_age=60&lengths_incr=0",
        "msg_rates_age=100000&msg_rates_incr=1",
    ],
)
def test_a_bad_sample_range_is_a_400(broker: BrokerProcess, query: str) -> None:
    response = call(broker, "GET", f"/api/overview?{query}")
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "bad_request"
