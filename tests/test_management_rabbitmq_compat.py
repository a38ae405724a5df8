"""The management API driven with `requests` exactly as RabbitMQ's HTTP API reference shows
it (its curl examples: HTTP Basic, `content-type: application/json`, `%2F` for the default
vhost): the status codes, JSON shapes and error bodies a RabbitMQ client expects."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin

import pika
import pytest
import requests
from broker_process import BrokerFactory, BrokerProcess
from control_helpers import login
from helpers import eventually

GUEST = ("guest", "guest")
JSON = {"content-type": "application/json"}
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this module's own, so that the overview's totals are exact."""
    process = BrokerProcess(tmp_path_factory.mktemp("compat") / "data")
    process.start()
    yield process
    process.stop()


class Api:
    """`curl -u guest:guest -H content-type:application/json -X METHOD URL -d BODY`."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.base = broker.http_url

    def __call__(
        self, method: str, path: str, body: Any = None, auth: tuple[str, str] | None = GUEST, **kwargs: Any
    ) -> requests.Response:
        return requests.request(method, self.base + path, json=body, auth=auth, headers=JSON, timeout=10, **kwargs)

    def get(self, path: str) -> Any:
        response = self("GET", path)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text}"
        return response.json()


@pytest.fixture
def api(broker: BrokerProcess) -> Api:
    return Api(broker)


def publish(broker: BrokerProcess, queue: str, count: int) -> None:
    with login(broker, "guest", "guest") as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for number in range(count):
            channel.basic_publish("", queue, f"m{number}".encode())


# ---- the reference's own examples --------------------------------------------------------


def test_create_and_delete_an_exchange_as_the_reference_shows(api: Api) -> None:
    created = api("PUT", "/api/exchanges/%2F/my-new-exchange", {"type": "direct", "durable": True})
    assert (created.status_code, created.content) == (201, b"")
    assert api("PUT", "/api/exchanges/%2F/my-new-exchange", {"type": "direct", "durable": True}).status_code == 204
    exchange = api.get("/api/exchanges/%2F/my-new-exchange")
    assert {key: exchange[key] for key in ("name", "vhost", "type", "durable", "auto_delete", "internal")} == {
        "name": "my-new-exchange", "vhost": "/", "type": "direct", "durable": True, "auto_delete": False,
        "internal": False,
    }  # fmt: skip
    assert exchange["arguments"] == {}
    deleted = api("DELETE", "/api/exchanges/%2F/my-new-exchange")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert api("GET", "/api/exchanges/%2F/my-new-exchange").json() == NOT_FOUND


def test_create_a_vhost_without_a_body(api: Api) -> None:
    assert api("PUT", "/api/vhosts/foo").status_code == 201
    assert api.get("/api/vhosts/foo")["name"] == "foo"
    assert api("DELETE", "/api/vhosts/foo").status_code == 204


def test_channels_sorted_with_columns(api: Api, broker: BrokerProcess) -> None:
    with login(broker, "guest", "guest") as connection:
        connection.channel()
        connection.channel()
        path = (
            "/api/channels?sort=message_stats.publish_details.rate&sort_reverse=true"
            "&columns=name,message_stats.publish_details.rate,message_stats.deliver_get_details.rate"
        )

        def both() -> list[dict[str, Any]] | None:
            channels: list[dict[str, Any]] = api.get(path)
            return channels if len(channels) == 2 else None

        channels = eventually(both)
        assert all(set(channel) <= {"name", "message_stats"} for channel in channels)


# ---- overview and queues -----------------------------------------------------------------


def test_overview_totals_and_queue_details(api: Api, broker: BrokerProcess) -> None:
    assert (
        api("PUT", "/api/queues/%2F/totals-q", {"auto_delete": False, "durable": True, "arguments": {}}).status_code
        == 201
    )
    publish(broker, "totals-q", 3)
    with login(broker, "guest", "guest") as connection:
        channel = connection.channel()
        method, _, body = channel.basic_get("totals-q")  # held unacknowledged
        assert method is not None and body == b"m0"

        def counted() -> dict[str, Any] | None:
            queue = api.get("/api/queues/%2F/totals-q")
            return queue if queue["messages_unacknowledged"] == 1 else None

        queue = eventually(counted)
        assert (queue["messages"], queue["messages_ready"], queue["messages_unacknowledged"]) == (3, 2, 1)
        assert {key: queue[key] for key in ("name", "vhost", "durable", "auto_delete", "exclusive", "arguments")} == {
            "name": "totals-q", "vhost": "/", "durable": True, "auto_delete": False, "exclusive": False,
            "arguments": {},
        }  # fmt: skip
        assert queue["consumers"] == 0
        assert queue["type"] == "classic" and queue["state"] == "running"
        assert isinstance(queue["node"], str)

        def totalled() -> dict[str, Any] | None:
            overview: dict[str, Any] = api.get("/api/overview")
            return overview if overview.get("queue_totals", {}).get("messages_unacknowledged") == 1 else None

        overview = eventually(totalled)
        assert {"rabbitmq_version", "management_version", "node", "listeners", "object_totals", "queue_totals"} <= (
            overview.keys()
        )
        assert overview["object_totals"]["queues"] == len(api.get("/api/queues"))
        assert overview["object_totals"]["connections"] >= 1 and overview["object_totals"]["channels"] >= 1
        totals = overview["queue_totals"]
        assert (totals["messages"], totals["messages_ready"], totals["messages_unacknowledged"]) == (3, 2, 1)
        assert {"protocol": "amqp", "port": broker.port} in [
            {"protocol": listener["protocol"], "port": listener["port"]} for listener in overview["listeners"]
        ]
    listed = api.get("/api/queues/%2F?columns=name,messages")
    assert {"name": "totals-q", "messages": 3} in listed
    page = api.get("/api/queues?page=1&page_size=100&name=totals")
    assert page["items"][0]["name"] == "totals-q" and page["filtered_count"] == 1
    assert api("DELETE", "/api/queues/%2F/totals-q").status_code == 204


def test_publish_and_get_through_the_api(api: Api) -> None:
    assert api("PUT", "/api/queues/%2F/api-q", {"durable": False}).status_code == 201
    message = {"properties": {"content_type": "text/plain", "headers": {"k": "v"}}, "routing_key": "api-q",
               "payload": "my body", "payload_encoding": "string"}  # fmt: skip
    assert api("POST", "/api/exchanges/%2F/amq.default/publish", message).json() == {"routed": True}
    unrouted = {**message, "routing_key": "no-such-queue"}
    assert api("POST", "/api/exchanges/%2F/amq.default/publish", unrouted).json() == {"routed": False}
    binary = {**message, "payload": "//4A", "payload_encoding": "base64"}
    assert api("POST", "/api/exchanges/%2F/amq.default/publish", binary).json() == {"routed": True}

    request = {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000}
    got = api("POST", "/api/queues/%2F/api-q/get", request)
    assert got.status_code == 200
    first, second = got.json()
    assert {key: first[key] for key in ("payload", "payload_encoding", "payload_bytes", "redelivered", "exchange",
                                        "routing_key", "message_count")} == {
        "payload": "my body", "payload_encoding": "string", "payload_bytes": 7, "redelivered": False,
        "exchange": "", "routing_key": "api-q", "message_count": 1,
    }  # fmt: skip
    assert first["properties"]["content_type"] == "text/plain"
    assert first["properties"]["headers"] == {"k": "v"}
    assert (second["payload"], second["payload_encoding"]) == ("//4A", "base64")  # ff fe 00 is not UTF-8

    requeued = api("POST", "/api/queues/%2F/api-q/get", {**request, "ackmode": "ack_requeue_false"}).json()
    assert [m["redelivered"] for m in requeued] == [True, True]
    assert api("POST", "/api/queues/%2F/api-q/get", request).json() == []
    assert api("DELETE", "/api/queues/%2F/api-q").status_code == 204


def test_purge_and_conditional_delete(api: Api, broker: BrokerProcess) -> None:
    assert api("PUT", "/api/queues/%2F/purged-q", {}).status_code == 201
    publish(broker, "purged-q", 4)
    refused = api("DELETE", "/api/queues/%2F/purged-q?if-empty=true")
    assert refused.status_code == 400 and refused.json()["error"] == "bad_request"
    assert api("DELETE", "/api/queues/%2F/purged-q/contents").status_code == 204
    assert eventually(lambda: api.get("/api/queues/%2F/purged-q")["messages"] == 0)
    assert api("DELETE", "/api/queues/%2F/purged-q?if-empty=true&if-unused=true").status_code == 204
    assert api("GET", "/api/queues/%2F/purged-q").json() == NOT_FOUND


# ---- bindings ----------------------------------------------------------------------------


def test_bindings_all_shapes(api: Api) -> None:
    api("PUT", "/api/exchanges/%2F/bind-src", {"type": "direct"})
    api("PUT", "/api/exchanges/%2F/bind-dst", {"type": "fanout"})
    api("PUT", "/api/queues/%2F/bind-q", {})
    created = api("POST", "/api/bindings/%2F/e/bind-src/q/bind-q",
                  {"routing_key": "my_routing_key", "arguments": {"x-arg": "value"}})  # fmt: skip
    assert created.status_code == 201
    # RabbitMQ's Location is relative to the path posted to.
    location = urljoin("/api/bindings/%2F/e/bind-src/q/bind-q", created.headers["Location"])
    assert location.startswith("/api/bindings/%2F/e/bind-src/q/bind-q/")
    [binding] = api.get("/api/bindings/%2F/e/bind-src/q/bind-q")
    assert {key: binding[key] for key in ("source", "vhost", "destination", "destination_type", "routing_key",
                                          "arguments")} == {
        "source": "bind-src", "vhost": "/", "destination": "bind-q", "destination_type": "queue",
        "routing_key": "my_routing_key", "arguments": {"x-arg": "value"},
    }  # fmt: skip
    assert location.endswith("/" + binding["properties_key"])
    assert api.get(location)["routing_key"] == "my_routing_key"
    assert api("POST", "/api/bindings/%2F/e/bind-src/e/bind-dst", {"routing_key": "k"}).status_code == 201
    assert api.get("/api/bindings/%2F/e/bind-src/e/bind-dst")[0]["destination_type"] == "exchange"
    assert {b["destination"] for b in api.get("/api/exchanges/%2F/bind-src/bindings/source")} == {"bind-q", "bind-dst"}
    assert [b["source"] for b in api.get("/api/exchanges/%2F/bind-dst/bindings/destination")] == ["bind-src"]
    on_queue = api.get("/api/queues/%2F/bind-q/bindings")
    assert {(b["source"], b["routing_key"]) for b in on_queue} == {("", "bind-q"), ("bind-src", "my_routing_key")}
    assert any(b["source"] == "bind-src" for b in api.get("/api/bindings/%2F"))
    assert api("DELETE", location).status_code == 204
    assert api.get("/api/bindings/%2F/e/bind-src/q/bind-q") == []
    for path in ("/api/exchanges/%2F/bind-src", "/api/exchanges/%2F/bind-dst", "/api/queues/%2F/bind-q"):
        api("DELETE", path)


# ---- policies and limits -----------------------------------------------------------------


def test_a_policy_changes_a_live_queue(api: Api, broker: BrokerProcess) -> None:
    api("PUT", "/api/queues/%2F/policy-q", {})
    publish(broker, "policy-q", 5)
    policy = {"pattern": "^policy-q$", "definition": {"max-length": 2}, "priority": 0, "apply-to": "queues"}
    assert api("PUT", "/api/policies/%2F/two-at-most", policy).status_code == 201
    assert api.get("/api/policies/%2F/two-at-most") == {"vhost": "/", "name": "two-at-most", **policy}
    assert {"vhost": "/", "name": "two-at-most", **policy} in api.get("/api/policies")

    def limited() -> dict[str, Any] | None:
        queue = api.get("/api/queues/%2F/policy-q")
        return queue if queue["messages"] == 2 else None

    queue = eventually(limited)
    assert queue["policy"] == "two-at-most"
    assert queue["effective_policy_definition"] == {"max-length": 2}
    assert api("DELETE", "/api/policies/%2F/two-at-most").status_code == 204
    assert api("GET", "/api/policies/%2F/two-at-most").json() == NOT_FOUND
    eventually(lambda: api.get("/api/queues/%2F/policy-q").get("policy") in (None, ""))
    publish(broker, "policy-q", 3)
    assert eventually(lambda: api.get("/api/queues/%2F/policy-q")["messages"] == 5)
    api("DELETE", "/api/queues/%2F/policy-q")


def test_vhost_limits(api: Api, broker: BrokerProcess) -> None:
    api("PUT", "/api/vhosts/limited")
    api("PUT", "/api/permissions/limited/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    assert api("PUT", "/api/vhost-limits/limited/max-queues", {"value": 1}).status_code == 204
    assert api.get("/api/vhost-limits/limited") == [{"vhost": "limited", "value": {"max-queues": 1}}]
    with login(broker, "guest", "guest", "limited") as connection:
        channel = connection.channel()
        channel.queue_declare("first")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("second")
        assert refused.value.reply_code == 406
    assert api("DELETE", "/api/vhost-limits/limited/max-queues").status_code == 204
    assert api("DELETE", "/api/vhosts/limited").status_code == 204


# ---- definitions -------------------------------------------------------------------------


def test_definitions_round_trip(api: Api, broker_factory: BrokerFactory) -> None:
    api("PUT", "/api/exchanges/%2F/defs-ex", {"type": "topic", "durable": True})
    api("PUT", "/api/queues/%2F/defs-q", {"durable": True, "arguments": {"x-message-ttl": 60000}})
    api("POST", "/api/bindings/%2F/e/defs-ex/q/defs-q", {"routing_key": "a.#"})
    api("PUT", "/api/policies/%2F/defs-policy", {"pattern": "^defs-", "definition": {"max-length": 9}})
    document = api.get("/api/definitions")
    assert {"rabbit_version", "users", "vhosts", "permissions", "topic_permissions", "parameters",
            "global_parameters", "policies", "queues", "exchanges", "bindings"} <= document.keys()  # fmt: skip
    per_vhost = api.get("/api/definitions/%2F")
    assert {"queues", "exchanges", "bindings", "policies"} <= per_vhost.keys() and "users" not in per_vhost

    other = Api(broker_factory())
    assert api("POST", "/api/definitions", document).status_code in (200, 201, 204)
    assert other("POST", "/api/definitions", document).status_code in (200, 201, 204)
    again = other.get("/api/definitions")
    for kind in ("queues", "exchanges", "bindings", "policies"):
        assert sorted(map(str, again[kind])) == sorted(map(str, document[kind])), kind
    assert other.get("/api/queues/%2F/defs-q")["arguments"] == {"x-message-ttl": 60000}
    assert other.get("/api/policies/%2F/defs-policy")["definition"] == {"max-length": 9}
    api("DELETE", "/api/policies/%2F/defs-policy")
    api("DELETE", "/api/queues/%2F/defs-q")
    api("DELETE", "/api/exchanges/%2F/defs-ex")


# ---- health checks -----------------------------------------------------------------------


def test_health_checks_whoami_and_aliveness(api: Api, broker: BrokerProcess) -> None:
    for check in ("alarms", "local-alarms", "virtual-hosts"):
        assert api.get(f"/api/health/checks/{check}") == {"status": "ok"}, check
    assert api.get(f"/api/health/checks/port-listener/{broker.port}") == {"status": "ok", "port": broker.port}
    missing = api("GET", "/api/health/checks/port-listener/1")
    assert missing.status_code == 503
    assert {key: missing.json()[key] for key in ("status", "reason", "missing")} == {
        "status": "failed", "reason": "No active listener", "missing": 1,
    }  # fmt: skip
    assert broker.port in missing.json()["ports"]
    assert api("GET", "/api/health/checks/port-listener/http").status_code == 400
    assert api.get("/api/aliveness-test/%2F") == {"status": "ok"}
    whoami = api.get("/api/whoami")
    assert (whoami["name"], whoami["tags"]) == ("guest", ["administrator"])


# ---- errors ------------------------------------------------------------------------------


def test_401_without_or_with_wrong_credentials(api: Api) -> None:
    for auth in (None, ("guest", "wrong"), ("nobody", "guest")):
        response = api("GET", "/api/queues", auth=auth)
        assert response.status_code == 401
        assert response.json()["error"] == "not_authorized"


@pytest.mark.parametrize(
    "path",
    [
        "/api/queues/%2F/no-such-queue",
        "/api/exchanges/%2F/no-such-exchange",
        "/api/queues/no-such-vhost",
        "/api/policies/%2F/no-such-policy",
        "/api/connections/no-such-connection",
        "/api/bindings/%2F/e/amq.direct/q/no-such-queue/key",
    ],
)
def test_404_for_what_does_not_exist(api: Api, path: str) -> None:
    response = api("GET", path)
    assert (response.status_code, response.json()) == (404, NOT_FOUND)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/queues/%2F/bad-argument", {"arguments": {"x-max-length": "ten"}}),
        ("PUT", "/api/exchanges/%2F/bad-type", {"type": "no-such-type"}),
        ("PUT", "/api/policies/%2F/no-pattern", {"definition": {"max-length": 1}}),
        ("PUT", "/api/policies/%2F/bad-definition", {"pattern": ".*", "definition": {"max-length": "ten"}}),
        ("PUT", "/api/policies/%2F/bad-apply-to", {"pattern": ".*", "definition": {}, "apply-to": "everything"}),
        ("POST", "/api/exchanges/%2F/amq.default/publish", {"routing_key": "x", "payload": "y"}),
        ("POST", "/api/exchanges/%2F/amq.default/publish",
         {"properties": {}, "routing_key": "x", "payload": "y", "payload_encoding": "rot13"}),
    ],
)  # fmt: skip
def test_400_with_a_reason(api: Api, method: str, path: str, body: Any) -> None:
    response = api(method, path, body)
    assert response.status_code == 400, response.text
    reply = response.json()
    assert reply["error"] == "bad_request" and reply["reason"]


def test_400_for_an_inequivalent_redeclaration(api: Api) -> None:
    assert api("PUT", "/api/queues/%2F/durable-q", {"durable": True}).status_code == 201
    response = api("PUT", "/api/queues/%2F/durable-q", {"durable": False})
    assert response.status_code == 400
    assert "inequivalent arg 'durable'" in response.json()["reason"]
    api("DELETE", "/api/queues/%2F/durable-q")


def test_405_for_a_method_the_path_does_not_take(api: Api) -> None:
    response = api("DELETE", "/api/overview")
    assert response.status_code == 405
