"""The management API's exchanges, queues and bindings, driven with `requests` as RabbitMQ's
HTTP API documentation shows: declare, publish, get, bind, purge and delete through HTTP,
with RabbitMQ's JSON, status codes and reasons, and the effects seen over AMQP."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest
import requests
from broker_process import BrokerProcess
from control_helpers import api as control_api
from control_helpers import api_path
from helpers import connect, open_session, unique_name, wait_until
from test_permissions import secret, unstarted_permtest_broker

GUEST = ("guest", "guest")
TIMEOUT = 10


class Api:
    """RabbitMQ's HTTP API on a broker, as one user."""

    def __init__(self, broker: BrokerProcess, auth: tuple[str, str] | None = GUEST) -> None:
        self.base = f"{broker.http_url}/api"
        self.auth = auth

    def call(self, method: str, path: str, body: Any = None, **params: str) -> requests.Response:
        return requests.request(
            method, self.base + path, json=body, params=params, auth=self.auth, timeout=TIMEOUT, allow_redirects=False
        )

    def get(self, path: str, **params: str) -> requests.Response:
        return self.call("GET", path, **params)

    def json(self, path: str, **params: str) -> Any:
        response = self.get(path, **params)
        assert response.status_code == 200, response.text
        return response.json()

    def put(self, path: str, body: Any = None) -> requests.Response:
        return self.call("PUT", path, {} if body is None else body)

    def post(self, path: str, body: Any) -> requests.Response:
        return self.call("POST", path, body)

    def delete(self, path: str, **params: str) -> requests.Response:
        return self.call("DELETE", path, **params)

    def publish(self, exchange: str, routing_key: str, payload: str, **properties: Any) -> requests.Response:
        body = {"properties": properties, "routing_key": routing_key, "payload": payload, "payload_encoding": "string"}
        return self.post(f"/exchanges/%2F/{exchange}/publish", body)

    def get_messages(self, queue: str, count: int, ackmode: str, **options: Any) -> list[dict[str, Any]]:
        body = {"count": count, "ackmode": ackmode, "encoding": "auto", **options}
        response = self.post(f"/queues/%2F/{queue}/get", body)
        assert response.status_code == 200, response.text
        result: list[dict[str, Any]] = response.json()
        return result


@pytest.fixture
def api(broker: BrokerProcess) -> Api:
    return Api(broker)


@pytest.fixture
def queue(api: Api) -> Iterator[str]:
    """A durable queue declared over HTTP, deleted afterwards."""
    name = unique_name("http-q")
    assert api.put(f"/queues/%2F/{name}", {"durable": True}).status_code == 201
    yield name
    api.delete(f"/queues/%2F/{name}")


@pytest.fixture
def exchange(api: Api) -> Iterator[str]:
    name = unique_name("http-x")
    assert api.put(f"/exchanges/%2F/{name}", {"type": "direct", "durable": True}).status_code == 201
    yield name
    api.delete(f"/exchanges/%2F/{name}")


def error(response: requests.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


# ---- queues ----------------------------------------------------------------------------------


def test_a_queue_declared_over_http_is_rabbitmqs_json_and_consumable_over_amqp(broker: BrokerProcess, api: Api) -> None:
    name = unique_name("http-q")
    assert api.put(f"/queues/%2F/{name}", {"durable": True, "arguments": {"x-max-length": 10}}).status_code == 201
    assert api.put(f"/queues/%2F/{name}", {"durable": True, "arguments": {"x-max-length": 10}}).status_code == 204
    try:
        shown = api.json(f"/queues/%2F/{name}")
        assert {key: shown[key] for key in ("name", "vhost", "durable", "auto_delete", "exclusive", "arguments")} == {
            "name": name,
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "exclusive": False,
            "arguments": {"x-max-length": 10},
        }
        assert shown["type"] == "classic"
        assert shown["state"] == "running"
        assert shown["node"].startswith("lavin@")
        assert shown["messages"] == shown["messages_ready"] == shown["messages_unacknowledged"] == 0
        assert shown["messages_details"] == {"rate": 0.0}
        assert shown["consumer_details"] == []
        assert name in [item["name"] for item in api.json("/queues/%2F")]
        assert name in [item["name"] for item in api.json("/queues")]

        connection = connect(broker.url)
        channel = connection.channel()
        channel.basic_publish("", name, b"over amqp")
        _, _, body = channel.basic_get(name, auto_ack=False)
        assert body == b"over amqp"
        channel.basic_consume(name, lambda *args: None, consumer_tag="watching")
        shown = api.json(f"/queues/%2F/{name}")
        assert (shown["consumers"], shown["messages_unacknowledged"]) == (1, 1)  # the basic.get's
        assert shown["consumer_details"][0]["consumer_tag"] == "watching"
        assert shown["consumer_details"][0]["queue"] == {"name": name, "vhost": "/"}
        connection.close()
    finally:
        api.delete(f"/queues/%2F/{name}")


def test_an_inequivalent_redeclare_is_400_with_the_amqp_text(api: Api, queue: str) -> None:
    refused = error(api.put(f"/queues/%2F/{queue}", {"durable": False}), 400)
    assert refused == {
        "error": "bad_request",
        "reason": f"inequivalent arg 'durable' for queue '{queue}' in vhost '/': "
        "received 'false' but current is 'true'",
    }


def test_queue_types_are_rabbitmqs(api: Api) -> None:
    names = {kind: unique_name(f"http-{kind}") for kind in ("quorum", "stream", "priority")}
    try:
        for kind, name in names.items():
            arguments = {"x-max-priority": 5} if kind == "priority" else {"x-queue-type": kind}
            assert api.put(f"/queues/%2F/{name}", {"durable": True, "arguments": arguments}).status_code == 201
        assert api.json(f"/queues/%2F/{names['quorum']}")["type"] == "quorum"
        assert api.json(f"/queues/%2F/{names['stream']}")["type"] == "stream"
        assert api.json(f"/queues/%2F/{names['priority']}")["type"] == "classic"
        # A quorum queue is durable, as over AMQP.
        refused = error(api.put(f"/queues/%2F/{unique_name('q')}", {"arguments": {"x-queue-type": "quorum"}}), 400)
        assert "durable" in refused["reason"]
    finally:
        for name in names.values():
            api.delete(f"/queues/%2F/{name}")


def test_a_get_from_a_stream_is_refused_as_rabbitmq_refuses_it(api: Api) -> None:
    name = unique_name("http-stream")
    api.put(f"/queues/%2F/{name}", {"durable": True, "arguments": {"x-queue-type": "stream"}})
    try:
        body = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
        refused = error(api.post(f"/queues/%2F/{name}/get", body), 400)
        assert refused["reason"] == (
            f"540 NOT_IMPLEMENTED - basic.get not supported by stream queues queue '{name}' in vhost '/'"
        )
    finally:
        api.delete(f"/queues/%2F/{name}")


def test_a_stream_is_browsed_from_an_offset_without_consuming(api: Api) -> None:
    name = unique_name("http-stream")
    api.put(f"/queues/%2F/{name}", {"durable": True, "arguments": {"x-queue-type": "stream"}})
    try:
        for number in range(5):
            assert api.publish("amq.default", name, f"s{number}").json() == {"routed": True}
        wait_until(lambda: api.json(f"/queues/%2F/{name}")["messages"] == 5, "the stream to commit")
        read = api.post(f"/queues/%2F/{name}/stream", {"count": 2, "offset": 3, "encoding": "auto"})
        assert read.status_code == 200, read.text
        assert [(m["payload"], m["properties"]["headers"]["x-stream-offset"]) for m in read.json()] == [
            ("s3", 3),
            ("s4", 4),
        ]
        first = api.post(f"/queues/%2F/{name}/stream", {"count": 10}).json()
        assert [m["payload"] for m in first] == ["s0", "s1", "s2", "s3", "s4"]
        assert first[0]["message_count"] == 4
        refused = error(api.post(f"/queues/%2F/{name}/stream", {"count": 1, "offset": "yesterday"}), 400)
        assert refused["reason"].startswith("406 PRECONDITION_FAILED - invalid arg 'x-stream-offset'")
    finally:
        api.delete(f"/queues/%2F/{name}")


def test_a_queue_that_is_not_a_stream_is_not_browsed(api: Api, queue: str) -> None:
    refused = error(api.post(f"/queues/%2F/{queue}/stream", {"count": 1}), 400)
    assert refused["reason"] == f"queue '{queue}' in vhost '/' is not a stream"


def test_unacknowledged_deliveries_of_consumers_and_of_basic_get_are_counted(
    broker: BrokerProcess, api: Api, queue: str
) -> None:
    for number in range(3):
        api.publish("amq.default", queue, f"m{number}")
    connection = connect(broker.url)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2)
    channel.basic_consume(queue, lambda *args: None)

    def counted() -> bool:
        connection.process_data_events(0.05)
        shown = api.json(f"/queues/%2F/{queue}")
        return (shown["messages"], shown["messages_ready"], shown["messages_unacknowledged"]) == (3, 1, 2)

    wait_until(counted, "two deliveries to be unacknowledged")
    getter = connection.channel()
    method, _, _ = getter.basic_get(queue, auto_ack=False)
    shown = api.json(f"/queues/%2F/{queue}")
    assert (shown["messages"], shown["messages_ready"], shown["messages_unacknowledged"]) == (3, 0, 3)
    getter.basic_ack(method.delivery_tag)
    wait_until(lambda: api.json(f"/queues/%2F/{queue}")["messages"] == 2, "the get to be acked")
    connection.close()
    wait_until(lambda: api.json(f"/queues/%2F/{queue}")["messages_ready"] == 2, "the deliveries to be requeued")
    assert api.json(f"/queues/%2F/{queue}")["messages_unacknowledged"] == 0


def test_a_queue_name_longer_than_255_bytes_is_400(api: Api) -> None:
    refused = error(api.put(f"/queues/%2F/{'q' * 256}", {"durable": True}), 400)
    assert refused["reason"] == "queue should be less than 255 bytes, actually was 256\n"


def test_publish_through_the_api_changes_messages_and_get_honours_each_ack_mode(api: Api, queue: str) -> None:
    for number in range(4):
        published = api.publish("amq.default", queue, f"m{number}", delivery_mode=2, headers={"n": number})
        assert published.status_code == 200, published.text
        assert published.json() == {"routed": True}
    assert api.json(f"/queues/%2F/{queue}")["messages"] == 4

    peeked = api.get_messages(queue, 2, "ack_requeue_true")
    assert [m["payload"] for m in peeked] == ["m0", "m1"]
    first = peeked[0]
    assert first == {
        "payload_bytes": 2,
        "redelivered": False,
        "exchange": "",
        "routing_key": queue,
        "message_count": 3,
        "properties": {"delivery_mode": 2, "headers": {"n": 0}},
        "payload": "m0",
        "payload_encoding": "string",
    }
    assert api.json(f"/queues/%2F/{queue}")["messages"] == 4

    again = api.get_messages(queue, 1, "reject_requeue_true")
    assert (again[0]["payload"], again[0]["redelivered"]) == ("m0", True)
    assert api.json(f"/queues/%2F/{queue}")["messages"] == 4

    dropped = api.get_messages(queue, 1, "reject_requeue_false")
    assert dropped[0]["payload"] == "m0"
    taken = api.get_messages(queue, 1, "ack_requeue_false")
    assert taken[0]["payload"] == "m1"
    assert api.json(f"/queues/%2F/{queue}")["messages"] == 2

    rest = api.get_messages(queue, 10, "ack_requeue_false", truncate=1)
    assert [(m["payload"], m["payload_bytes"]) for m in rest] == [("m", 2), ("m", 2)]
    assert api.get_messages(queue, 5, "ack_requeue_false") == []


def test_binary_payloads_go_in_and_out_as_base64(api: Api, queue: str) -> None:
    raw = bytes(range(250, 256))
    body = {
        "properties": {"content_type": "application/octet-stream"},
        "routing_key": queue,
        "payload": base64.b64encode(raw).decode(),
        "payload_encoding": "base64",
    }
    assert api.post("/exchanges/%2F/amq.default/publish", body).json() == {"routed": True}
    (got,) = api.get_messages(queue, 1, "ack_requeue_false")
    assert got["payload_encoding"] == "base64"
    assert base64.b64decode(got["payload"]) == raw
    assert got["properties"] == {"content_type": "application/octet-stream"}


def test_a_publish_a_full_queue_rejects_is_400_as_in_rabbitmq(api: Api) -> None:
    name = unique_name("http-full")
    arguments = {"x-max-length": 1, "x-overflow": "reject-publish"}
    api.put(f"/queues/%2F/{name}", {"durable": True, "arguments": arguments})
    try:
        assert api.publish("amq.default", name, "first", delivery_mode=2).json() == {"routed": True}
        refused = error(api.publish("amq.default", name, "second", delivery_mode=2), 400)
        assert refused == {"error": "bad_request", "reason": "rejected Unable to publish message. Check queue limits."}
    finally:
        api.delete(f"/queues/%2F/{name}")


def test_an_unroutable_publish_is_routed_false(api: Api, exchange: str) -> None:
    assert api.publish(exchange, "nowhere", "x").json() == {"routed": False}


def test_bad_publishes_are_400_naming_the_field_and_a_missing_exchange_is_404(api: Api, queue: str) -> None:
    missing = error(api.publish(unique_name("missing"), "k", "x"), 404)
    assert missing == {"error": "not_found", "reason": "exchange_not_found"}
    assert "delivery_mode" in error(api.publish("amq.default", queue, "x", delivery_mode="two"), 400)["reason"]
    assert "headers" in error(api.publish("amq.default", queue, "x", headers=[1]), 400)["reason"]
    body = {"properties": {}, "routing_key": queue, "payload": "x", "payload_encoding": "rot13"}
    assert "payload_encoding" in error(api.post("/exchanges/%2F/amq.default/publish", body), 400)["reason"]
    missing_fields = error(api.post("/exchanges/%2F/amq.default/publish", {"routing_key": queue}), 400)
    assert missing_fields["reason"] == "[{key_missing,properties},{key_missing,payload},{key_missing,payload_encoding}]"
    not_json = requests.post(
        f"{api.base}/exchanges/%2F/amq.default/publish", data=b"{nope", auth=GUEST, timeout=TIMEOUT
    )
    assert error(not_json, 400)["reason"] == "not_json"
    expiration = error(api.publish("amq.default", queue, "x", expiration="soon"), 400)
    assert expiration["reason"].startswith("406 PRECONDITION_FAILED - invalid expiration 'soon'")
    assert api.json(f"/queues/%2F/{queue}")["messages"] == 0


def test_values_amqp_frames_cannot_carry_are_400_not_500(api: Api, exchange: str, queue: str) -> None:
    timestamp = error(api.publish("amq.default", queue, "x", timestamp=-1), 400)
    assert timestamp["reason"] == "properties.timestamp must be between 0 and 18446744073709551615"
    assert "content_type" in error(api.publish("amq.default", queue, "x", content_type="t" * 256), 400)["reason"]
    assert "routing_key" in error(api.publish("amq.default", "k" * 256, "x"), 400)["reason"]
    too_big = error(api.put(f"/queues/%2F/{unique_name('q')}", {"arguments": {"x-big": 2**70}}), 400)
    assert too_big["reason"] == f"arguments: integer {2**70} does not fit a field table"
    long_key = error(api.post(f"/bindings/%2F/e/{exchange}/q/{queue}", {"routing_key": "k" * 256}), 400)
    assert long_key["reason"] == "routing_key must be at most 255 bytes"


def test_names_with_slashes_are_percent_encoded_in_paths(api: Api) -> None:
    name = unique_name("a/b c")
    path = f"/queues/%2F/{quote(name, safe='')}"
    assert api.put(path, {"durable": False}).status_code == 201
    assert api.json(path)["name"] == name
    assert api.delete(path).status_code == 204


def test_bad_get_requests_are_400(api: Api, queue: str) -> None:
    wrong_mode = error(api.post(f"/queues/%2F/{queue}/get", {"count": 1, "ackmode": "x", "encoding": "auto"}), 400)
    assert wrong_mode["reason"].startswith("Invalid ackmode value: x")
    assert "count" in error(api.post(f"/queues/%2F/{queue}/get", {"ackmode": "ack_requeue_true"}), 400)["reason"]
    body = {"count": "many", "ackmode": "ack_requeue_true", "encoding": "auto"}
    assert "count" in error(api.post(f"/queues/%2F/{queue}/get", body), 400)["reason"]
    body = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    assert error(api.post(f"/queues/%2F/{unique_name('missing')}/get", body), 404)["reason"] == "queue_not_found"


def test_a_persistent_message_published_through_the_api_survives_kill_9(fresh_broker: BrokerProcess) -> None:
    api = Api(fresh_broker)
    assert api.put("/queues/%2F/durable-q", {"durable": True}).status_code == 201
    assert api.publish("amq.default", "durable-q", "kept", delivery_mode=2).json() == {"routed": True}
    fresh_broker.kill()
    fresh_broker.start()
    (got,) = api.get_messages("durable-q", 1, "ack_requeue_false")
    assert got["payload"] == "kept"


def test_delete_with_if_unused_and_if_empty_is_refused_as_rabbitmq_refuses_it(
    broker: BrokerProcess, api: Api, queue: str
) -> None:
    connection = connect(broker.url)
    channel = connection.channel()
    channel.basic_consume(queue, lambda *args: None)
    in_use = error(api.delete(f"/queues/%2F/{queue}", **{"if-unused": "true"}), 400)
    assert in_use == {"error": "bad_request", "reason": f"queue '{queue}' in vhost '/' in use"}
    connection.close()
    api.publish("amq.default", queue, "x")
    not_empty = error(api.delete(f"/queues/%2F/{queue}", **{"if-empty": "true"}), 400)
    assert not_empty["reason"] == f"queue '{queue}' in vhost '/' not empty"

    assert api.delete(f"/queues/%2F/{queue}/contents").status_code == 204
    assert api.json(f"/queues/%2F/{queue}")["messages"] == 0
    assert api.delete(f"/queues/%2F/{queue}", **{"if-unused": "true", "if-empty": "true"}).status_code == 204
    assert error(api.get(f"/queues/%2F/{queue}"), 404) == {"error": "Object Not Found", "reason": "Not Found"}
    assert api.delete(f"/queues/%2F/{queue}").status_code == 404


def test_missing_vhosts_and_objects_are_404(api: Api) -> None:
    assert api.get("/queues/no-such-vhost").status_code == 404
    assert api.get("/exchanges/no-such-vhost").status_code == 404
    assert api.get("/bindings/no-such-vhost").status_code == 404
    assert api.put("/queues/no-such-vhost/q", {"durable": True}).status_code == 404
    assert api.get(f"/exchanges/%2F/{unique_name('missing')}").status_code == 404


def test_lists_take_rabbitmqs_list_parameters(api: Api, queue: str) -> None:
    page = api.json("/queues/%2F", page="1", page_size="500", name=queue, columns="name,messages")
    assert page["items"] == [{"name": queue, "messages": 0}]


# ---- exchanges -------------------------------------------------------------------------------


def test_exchanges_are_declared_shown_and_deleted_as_in_rabbitmq(api: Api) -> None:
    name = unique_name("http-x")
    body = {"type": "topic", "durable": "true", "auto_delete": False, "internal": False, "arguments": {}}
    assert api.put(f"/exchanges/%2F/{name}", body).status_code == 201
    assert api.put(f"/exchanges/%2F/{name}", body).status_code == 204
    assert api.json(f"/exchanges/%2F/{name}") == {
        "name": name,
        "vhost": "/",
        "type": "topic",
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "arguments": {},
        "user_who_performed_action": "",
        "message_stats": {
            "publish_in": 0,
            "publish_in_details": {"rate": 0.0},
            "publish_out": 0,
            "publish_out_details": {"rate": 0.0},
        },
    }
    refused = error(api.put(f"/exchanges/%2F/{name}", {"type": "direct", "durable": True}), 400)
    assert refused["reason"] == (
        f"inequivalent arg 'type' for exchange '{name}' in vhost '/': received 'direct' but current is 'topic'"
    )
    assert "durable" in error(api.put(f"/exchanges/%2F/{name}", {"type": "topic", "durable": "troo"}), 400)["reason"]
    bad_type = error(api.put(f"/exchanges/%2F/{unique_name('x')}", {"type": "no-such-type"}), 400)
    assert bad_type["reason"] == "invalid exchange type 'no-such-type'"
    assert api.delete(f"/exchanges/%2F/{name}").status_code == 204
    assert api.get(f"/exchanges/%2F/{name}").status_code == 404
    assert api.delete(f"/exchanges/%2F/{name}").status_code == 404


def test_the_default_exchange_is_listed_with_an_empty_name_and_is_amq_default_in_paths(api: Api) -> None:
    names = [item["name"] for item in api.json("/exchanges/%2F")]
    assert "" in names
    assert "amq.direct" in names
    assert api.json("/exchanges/%2F/amq.default")["name"] == ""
    assert error(api.delete("/exchanges/%2F/amq.direct"), 401) == {
        "error": "not_authorised",
        "reason": "Access refused.",
    }


def test_an_exchange_in_use_is_not_deleted_with_if_unused(api: Api, exchange: str, queue: str) -> None:
    assert api.post(f"/bindings/%2F/e/{exchange}/q/{queue}", {"routing_key": "k"}).status_code == 201
    in_use = error(api.delete(f"/exchanges/%2F/{exchange}", **{"if-unused": "true"}), 400)
    assert in_use["reason"] == f"exchange '{exchange}' in vhost '/' in use"


# ---- bindings --------------------------------------------------------------------------------


def test_queue_bindings_have_rabbitmqs_props_keys_and_location(
    broker: BrokerProcess, api: Api, exchange: str, queue: str
) -> None:
    pair = f"/bindings/%2F/e/{exchange}/q/{queue}"
    plain = api.post(pair, {})
    assert plain.status_code == 201
    assert plain.headers["Location"] == f"{queue}/~"
    keyed = api.post(pair, {"routing_key": "a b/c"})
    assert keyed.headers["Location"] == f"{queue}/a+b%2Fc"
    with_arguments = api.post(pair, {"routing_key": "rk", "arguments": {"x-match": "any"}})
    props = with_arguments.headers["Location"].split("/", 1)[1]
    assert props.startswith("rk~") and len(props) > 3

    listed = api.json(pair)
    assert sorted(item["properties_key"] for item in listed) == sorted(["~", "a+b%2Fc", props])
    binding = api.json(f"{pair}/{quote(props, safe='')}")
    assert binding == {
        "source": exchange,
        "vhost": "/",
        "destination": queue,
        "destination_type": "queue",
        "routing_key": "rk",
        "arguments": {"x-match": "any"},
        "properties_key": props,
    }
    assert api.get(f"{pair}/rk").status_code == 404  # the arguments are part of its identity
    assert api.get(f"{pair}/{quote(props, safe='')}x").status_code == 404

    on_queue = api.json(f"/queues/%2F/{queue}/bindings")
    assert on_queue[0] == {
        "source": "",
        "vhost": "/",
        "destination": queue,
        "destination_type": "queue",
        "routing_key": queue,
        "arguments": {},
        "properties_key": queue,
    }
    assert len(on_queue) == 4
    assert len(api.json(f"/exchanges/%2F/{exchange}/bindings/source")) == 3
    assert {"source": exchange, "destination": queue} in [
        {"source": b["source"], "destination": b["destination"]} for b in api.json("/bindings/%2F")
    ]

    # The binding routes, over AMQP too.
    assert api.publish(exchange, "a b/c", "routed").json() == {"routed": True}
    connection = connect(broker.url)
    assert connection.channel().basic_get(queue, auto_ack=True)[2] == b"routed"
    connection.close()

    assert api.delete(f"{pair}/{quote('a+b%2Fc', safe='')}").status_code == 204
    assert api.delete(f"{pair}/{quote('a+b%2Fc', safe='')}").status_code == 404
    assert api.delete(f"{pair}/~").status_code == 204
    assert api.delete(f"{pair}/{quote(props, safe='')}").status_code == 204
    assert api.json(pair) == []
    assert api.publish(exchange, "a b/c", "lost").json() == {"routed": False}


def test_exchange_to_exchange_bindings(api: Api, exchange: str) -> None:
    fanout = unique_name("http-fanout")
    api.put(f"/exchanges/%2F/{fanout}", {"type": "fanout"})
    try:
        pair = f"/bindings/%2F/e/{exchange}/e/{fanout}"
        created = api.post(pair, {"routing_key": "routing"})
        assert (created.status_code, created.headers["Location"]) == (201, f"{fanout}/routing")
        binding = api.json(f"{pair}/routing")
        assert (binding["destination"], binding["destination_type"]) == (fanout, "exchange")
        assert api.json(f"/exchanges/%2F/{fanout}/bindings/destination") == [binding]
        assert api.json(f"/exchanges/%2F/{exchange}/bindings/source") == [binding]
        assert api.delete(f"{pair}/routing").status_code == 204
        assert api.get(f"{pair}/routing").status_code == 404
    finally:
        api.delete(f"/exchanges/%2F/{fanout}")


def test_binding_to_missing_ends_is_404_and_to_the_default_exchange_is_refused(
    api: Api, exchange: str, queue: str
) -> None:
    missing_queue = error(api.post(f"/bindings/%2F/e/{exchange}/q/no-such-queue", {}), 404)
    assert missing_queue == {"error": "not_found", "reason": "no queue 'no-such-queue' in vhost '/'"}
    missing_exchange = error(api.post(f"/bindings/%2F/e/no-such-x/q/{queue}", {}), 404)
    assert missing_exchange["reason"] == "no exchange 'no-such-x' in vhost '/'"
    assert api.post(f"/bindings/%2F/e/amq.default/q/{queue}", {}).status_code == 401
    assert "arguments" in error(api.post(f"/bindings/%2F/e/{exchange}/q/{queue}", {"arguments": 5}), 400)["reason"]


# ---- who may do what -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def team(broker: BrokerProcess) -> Iterator[str]:
    """Vhost `objteam`; user `objmanager` (management) with permissions there only, on
    names that start with "mine"; user `objplain` without tags. An administrator, like
    any user, needs permissions on a vhost to declare there."""
    admin = Api(broker)
    assert admin.put("/vhosts/objteam").status_code in (201, 204)
    for user, tags in (("objmanager", "management"), ("objplain", "")):
        assert admin.put(f"/users/{user}", {"password": "pw", "tags": tags}).status_code in (201, 204)
    patterns = {"configure": "^mine", "write": "^mine", "read": "^mine"}
    assert admin.put("/permissions/objteam/objmanager", patterns).status_code in (201, 204)
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert admin.put("/permissions/objteam/guest", everything).status_code in (201, 204)
    assert admin.put("/queues/objteam/mine-q", {"durable": True}).status_code == 201
    assert admin.put("/queues/objteam/theirs-q", {"durable": True}).status_code == 201
    yield "objteam"
    for user in ("objmanager", "objplain"):
        admin.delete(f"/users/{user}")
    admin.delete("/vhosts/objteam")


def test_a_management_user_sees_only_its_vhosts_objects(broker: BrokerProcess, team: str) -> None:
    manager = Api(broker, ("objmanager", "pw"))
    assert {item["vhost"] for item in manager.json("/queues")} == {team}
    assert {item["vhost"] for item in manager.json("/exchanges")} == {team}
    assert {item["vhost"] for item in manager.json("/bindings")} == {team}
    assert [item["name"] for item in manager.json(f"/queues/{team}")] == ["mine-q", "theirs-q"]


# Every endpoint that names a vhost's objects, for a vhost the user has no permissions on.
VHOST_SCOPED_CALLS = [
    ("GET", "/queues/%2F", None),
    ("GET", "/queues/%2F/mine-q", None),
    ("PUT", "/queues/%2F/mine-x", {"durable": True}),
    ("DELETE", "/queues/%2F/mine-x", None),
    ("DELETE", "/queues/%2F/mine-x/contents", None),
    ("POST", "/queues/%2F/mine-x/get", {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    ("GET", "/queues/%2F/mine-x/bindings", None),
    ("GET", "/exchanges/%2F", None),
    ("GET", "/exchanges/%2F/amq.direct", None),
    ("PUT", "/exchanges/%2F/mine-e", {"type": "direct"}),
    ("POST", "/exchanges/%2F/amq.direct/publish", {"routing_key": "k", "payload": "x", "properties": {}}),
    ("GET", "/bindings/%2F", None),
    ("POST", "/bindings/%2F/e/amq.direct/q/mine-x", {"routing_key": "k"}),
]


@pytest.mark.parametrize(("method", "path", "body"), VHOST_SCOPED_CALLS)
def test_a_vhost_without_permissions_is_401_on_every_object_endpoint(
    broker: BrokerProcess, team: str, method: str, path: str, body: Any
) -> None:
    """RabbitMQ 3.13's `is_authorized_vhost`: 401, and the same reply from every endpoint."""
    response = Api(broker, ("objmanager", "pw")).call(method, path, body)
    assert response.status_code == 401, response.text
    assert response.json() == {"error": "not_authorised", "reason": "User not authorised to access virtual host"}
    assert Api(broker, ("objmanager", "pw")).get("/queues/no-such-vhost").status_code == 404


def test_users_without_a_management_tag_or_credentials_are_401(broker: BrokerProcess, team: str) -> None:
    assert Api(broker, ("objplain", "pw")).get("/queues").status_code == 401
    assert Api(broker, None).get("/queues").status_code == 401
    assert Api(broker, ("objmanager", "wrong")).get("/queues").status_code == 401


def test_the_users_amqp_permissions_decide_what_it_may_change(broker: BrokerProcess, team: str) -> None:
    manager = Api(broker, ("objmanager", "pw"))
    refused = {"error": "not_authorised", "reason": "Access refused."}
    assert error(manager.put(f"/queues/{team}/theirs-new", {"durable": True}), 401) == refused
    assert error(manager.delete(f"/queues/{team}/theirs-q"), 401) == refused
    assert error(manager.delete(f"/queues/{team}/theirs-q/contents"), 401) == refused
    assert error(manager.put(f"/exchanges/{team}/theirs-x", {"type": "fanout"}), 401) == refused
    assert error(manager.post(f"/bindings/{team}/e/amq.fanout/q/mine-q", {}), 401) == refused

    body = {"properties": {}, "routing_key": "mine-q", "payload": "x", "payload_encoding": "string"}
    publish = error(manager.post(f"/exchanges/{team}/amq.default/publish", body), 401)
    assert publish == {
        "error": "not_authorised",
        "reason": f"ACCESS_REFUSED - access to exchange 'amq.default' in vhost '{team}' refused for user 'objmanager'",
    }
    get = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    read = error(manager.post(f"/queues/{team}/theirs-q/get", get), 401)
    assert (
        read["reason"] == f"ACCESS_REFUSED - access to queue 'theirs-q' in vhost '{team}' refused for user 'objmanager'"
    )

    # What its patterns allow, it may do.
    assert manager.put(f"/exchanges/{team}/mine-x", {"type": "fanout"}).status_code == 201
    assert manager.post(f"/bindings/{team}/e/mine-x/q/mine-q", {}).status_code == 201
    body = {"properties": {}, "routing_key": "", "payload": "x", "payload_encoding": "string"}
    assert manager.post(f"/exchanges/{team}/mine-x/publish", body).json() == {"routed": True}
    assert len(manager.post(f"/queues/{team}/mine-q/get", get).json()) == 1
    assert manager.delete(f"/queues/{team}/mine-q/contents").status_code == 204
    assert manager.delete(f"/exchanges/{team}/mine-x").status_code == 204


def test_over_the_control_socket_everything_is_allowed(broker: BrokerProcess) -> None:
    vhost = unique_name("nobodys")
    assert control_api(broker, "PUT", api_path("vhosts", vhost))[0] == 201
    try:
        assert control_api(broker, "PUT", api_path("queues", vhost, "q"), {"durable": True})[0] == 201
        published = {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"}
        assert control_api(broker, "POST", api_path("exchanges", vhost, "amq.default", "publish"), published) == (
            200,
            {"routed": True},
        )
        status, queues = control_api(broker, "GET", api_path("queues", vhost))
        assert (status, [(q["name"], q["messages"]) for q in queues]) == (200, [("q", 1)])
        assert control_api(broker, "DELETE", api_path("queues", vhost, "q"))[0] == 204
    finally:
        control_api(broker, "DELETE", api_path("vhosts", vhost))


def test_an_exclusive_queue_of_a_connection_is_locked_to_the_api(broker: BrokerProcess, api: Api) -> None:
    with open_session(broker.url) as session:
        name = unique_name("exclusive")
        session.channel.queue_declare(name, exclusive=True)
        shown = api.json(f"/queues/%2F/{name}")
        assert shown["exclusive"] is True
        locked = error(api.delete(f"/queues/%2F/{name}"), 400)
        assert locked["reason"].startswith(f"cannot obtain exclusive access to locked queue '{name}'")
        get = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
        assert error(api.post(f"/queues/%2F/{name}/get", get), 400)["reason"].startswith("405 RESOURCE_LOCKED")
    wait_until(lambda: api.get(f"/queues/%2F/{name}").status_code == 404, "the exclusive queue to go")


def test_pika_sees_what_the_api_declared_and_bound(broker: BrokerProcess, api: Api, exchange: str, queue: str) -> None:
    api.post(f"/bindings/%2F/e/{exchange}/q/{queue}", {"routing_key": "k"})
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare(queue, passive=True)
    channel.exchange_declare(exchange, passive=True)
    channel.basic_publish(exchange, "k", b"via amqp")
    wait_until(lambda: api.json(f"/queues/%2F/{queue}")["messages"] == 1, "the message to arrive")
    connection.close()


@pytest.fixture(scope="module")
def permtest_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with test_permissions' `permtest` backend: a JSON password describes the
    user, its permissions and how late its authorizer answers."""
    process = unstarted_permtest_broker(tmp_path_factory.mktemp("management-permissions"))
    process.start()
    yield process
    process.stop()


def test_an_authorizer_that_answers_later_is_waited_for(permtest_broker: BrokerProcess) -> None:
    password = secret(
        "^mine", "^mine", "^mine", topic=[["/", "mine-topic", "^allowed", ".*"]], tags=("management",), delay=0.05
    )
    late = Api(permtest_broker, ("late", password))
    assert late.put("/queues/%2F/mine-late", {"durable": False}).status_code == 201
    assert error(late.put("/queues/%2F/theirs-late", {}), 401) == {
        "error": "not_authorised",
        "reason": "Access refused.",
    }
    assert Api(permtest_broker).put("/exchanges/%2F/mine-topic", {"type": "topic"}).status_code == 201
    body = {"properties": {}, "routing_key": "allowed.key", "payload": "x", "payload_encoding": "string"}
    assert late.post("/exchanges/%2F/mine-topic/publish", body).json() == {"routed": False}
    refused = error(late.post("/exchanges/%2F/mine-topic/publish", {**body, "routing_key": "denied.key"}), 401)
    assert refused["reason"] == (
        "ACCESS_REFUSED - access to topic 'denied.key' in exchange 'mine-topic' in vhost '/' refused for user 'late'"
    )
