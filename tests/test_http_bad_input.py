"""Bad input to the management API is a 4xx with a reason and writes at most one log line;
a fault of the broker is a 500 and one log line, never a traceback.

Each request here used to answer 500 and write 30 to 3,000 lines of traceback (or, for the
long close reasons, left the connection open): JSON nested thousands deep, lone surrogate
escapes, headers nested past the field table bound, an `X-Reason` or a vhost name that makes
the close text longer than a short string. Content types follow RabbitMQ: 415 where it takes
only JSON, any label elsewhere.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions
import pytest
import requests
from broker_process import BrokerProcess, hermetic_env
from faulty_plugin import FAULTY_QUEUE
from helpers import unique_name

GUEST = ("guest", "guest")
TESTS_DIR = Path(__file__).resolve().parent
LONE = '"\\ud800"'  # JSON text of a string holding one lone surrogate
LONE_REASON = "JSON string with a lone surrogate \\ud800: not Unicode text"
TOO_DEEP = "JSON nested more than 100 deep"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this module alone, so its log holds only what these requests wrote, with
    tests.faulty_plugin enabled (a copy on PYTHONPATH, without the repo's other folders)."""
    root = Path(tmp_path_factory.mktemp("http-bad-input"))
    (root / "plugin-path" / "tests").mkdir(parents=True)
    shutil.copy(TESTS_DIR / "faulty_plugin.py", root / "plugin-path" / "tests")
    env = {**hermetic_env(), "PYTHONPATH": str(root / "plugin-path")}
    process = BrokerProcess(root / "data", extra_args=["--plugin", "tests.faulty_plugin"], env=env)
    process.start()
    yield process
    process.stop()


def call(
    broker: BrokerProcess, method: str, path: str, body: str | bytes | None = None, **headers: Any
) -> tuple[requests.Response, list[str]]:
    """One request (a JSON body unless a content-type is given) and the log lines it wrote;
    then the broker must still answer."""
    headers.setdefault("content-type", "application/json")
    logged = len(broker.output.splitlines())
    response = requests.request(method, broker.http_url + path, data=body, auth=GUEST, headers=headers, timeout=30)
    written = broker.output.splitlines()[logged:]
    assert requests.get(broker.http_url + "/api/overview", auth=GUEST, timeout=10).status_code == 200
    return response, written


def refused(broker: BrokerProcess, method: str, path: str, body: str, reason: str) -> None:
    response, written = call(broker, method, path, body)
    assert (response.status_code, response.json()) == (400, {"error": "bad_request", "reason": reason})
    assert written == []


def nested(depth: int, leaf: str = "1") -> str:
    """JSON arrays `depth` deep around `leaf`."""
    return "[" * depth + leaf + "]" * depth


def publish_body(routing_key: str = '"rk"', payload: str = '"x"', headers: str = "{}") -> str:
    fields = f'"routing_key": {routing_key}, "payload": {payload}, "payload_encoding": "string"'
    return f'{{{fields}, "properties": {{"headers": {headers}}}}}'


PUBLISH = "/api/exchanges/%2F/amq.default/publish"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/queues/%2F/deep", f'{{"arguments": {{"x": {nested(5000)}}}}}'),
        ("POST", "/api/definitions", f'{{"queues": {nested(5000)}}}'),
        ("PUT", "/api/queues/%2F/deep", f'{{"arguments": {{"x": {nested(150)}}}}}'),
        ("PUT", "/api/global-parameters/deep", f'{{"value": {nested(100)}}}'),
        ("POST", PUBLISH, publish_body(headers='{"a": ' * 150 + "1" + "}" * 150)),
    ],
    ids=["queue-5000", "definitions-5000", "queue-150", "parameter-101", "publish-headers-150"],
)
def test_json_nested_deeper_than_a_field_table_may_is_a_bad_request(
    broker: BrokerProcess, method: str, path: str, body: str
) -> None:
    refused(broker, method, path, body, TOO_DEEP)


def test_json_nested_as_deep_as_a_field_table_may_is_taken(broker: BrokerProcess) -> None:
    response, written = call(broker, "PUT", "/api/global-parameters/just-deep-enough", f'{{"value": {nested(99)}}}')
    assert (response.status_code, written) == (201, [])
    response, _ = call(broker, "GET", "/api/global-parameters/just-deep-enough")
    assert response.json()["value"] == json.loads(nested(99))


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/definitions", f'{{"exchanges": [{{"name": {LONE}, "vhost": "/", "type": "direct"}}]}}'),
        ("PUT", "/api/policies/%2F/lone", f'{{"pattern": {LONE}, "definition": {{"max-length": 1}}}}'),
        ("PUT", "/api/policies/%2F/lone", f'{{"pattern": "x", "definition": {{"alternate-exchange": {LONE}}}}}'),
        ("PUT", "/api/users/lone", f'{{"password": "p", "tags": {LONE}}}'),
        ("PUT", "/api/global-parameters/lone", f'{{"value": {LONE}}}'),
        ("POST", PUBLISH, publish_body(routing_key=LONE)),
        ("POST", PUBLISH, publish_body(payload=LONE)),
        ("POST", PUBLISH, publish_body(headers=f'{{"h": {LONE}}}')),
        ("POST", "/api/queues/%2F/lone/get", f'{{"count": 1, "ackmode": {LONE}, "encoding": "auto"}}'),
    ],
    ids=["definitions", "policy-pattern", "policy-definition", "tags", "global-parameter", "routing-key",
         "payload", "header", "get"],
)  # fmt: skip
def test_a_lone_surrogate_is_a_bad_request(broker: BrokerProcess, method: str, path: str, body: str) -> None:
    assert call(broker, "PUT", "/api/queues/%2F/lone", "{}")[0].status_code in (201, 204)  # for the get
    refused(broker, method, path, body, LONE_REASON)


def test_a_surrogate_pair_is_text(broker: BrokerProcess) -> None:
    """What `json.dumps` sends for a character beyond the BMP: an escaped pair, not a lone one."""
    queue = unique_name("pair")
    assert call(broker, "PUT", f"/api/queues/%2F/{queue}", "{}")[0].status_code == 201
    response, written = call(
        broker,
        "POST",
        PUBLISH,
        json.dumps({**json.loads(publish_body()), "routing_key": queue, "payload": "\U0001f407"}),
    )
    assert (response.status_code, response.json(), written) == (200, {"routed": True}, [])
    got = call(
        broker,
        "POST",
        f"/api/queues/%2F/{queue}/get",
        '{"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}',
    )[0]
    assert got.json()[0]["payload"] == "\U0001f407"


def test_nan_and_infinity_are_not_json(broker: BrokerProcess) -> None:
    refused(broker, "PUT", "/api/global-parameters/nan", '{"value": NaN}', "not_json")
    refused(broker, "PUT", "/api/global-parameters/inf", '{"value": [-Infinity]}', "not_json")


def closed_by_broker(connection: pika.BlockingConnection) -> tuple[int, str]:
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=5)
    return closed.value.reply_code, closed.value.reply_text


def test_a_close_reason_over_255_bytes_is_cut_and_the_connection_closed(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    [name] = [c["name"] for c in requests.get(broker.http_url + "/api/connections", auth=GUEST, timeout=10).json()]
    reason = "é" * 200  # 400 bytes of UTF-8: a cut at 252 bytes would split a character
    response, written = call(
        broker, "DELETE", f"/api/connections/{quote(name, safe='')}", **{"X-Reason": reason.encode()}
    )
    assert response.status_code == 204
    assert len(written) <= 1 and all("closing AMQP connection" in line for line in written), written  # the close
    code, text = closed_by_broker(connection)
    assert code == 320
    assert text == "CONNECTION_FORCED - " + "é" * 116 + "..."  # 20 + 232 bytes, then the mark of the cut
    assert len(text.encode()) <= 255


def test_deleting_a_vhost_of_a_long_name_closes_its_connections(broker: BrokerProcess) -> None:
    vhost = "v" + "é" * 120  # 241 bytes: the close text around it passes 255
    path = quote(vhost, safe="")
    assert call(broker, "PUT", f"/api/vhosts/{path}")[0].status_code == 201
    permissions = '{"configure": ".*", "write": ".*", "read": ".*"}'
    assert call(broker, "PUT", f"/api/permissions/{path}/guest", permissions)[0].status_code in (201, 204)
    parameters = pika.ConnectionParameters(broker.host, broker.port, vhost, pika.PlainCredentials(*GUEST))
    connection = pika.BlockingConnection(parameters)
    response, written = call(broker, "DELETE", f"/api/vhosts/{path}")
    assert response.status_code == 204
    assert len(written) <= 2 and "ERROR" not in "".join(written), written  # the delete and the close
    code, text = closed_by_broker(connection)
    assert code == 320
    assert text.startswith(f"CONNECTION_FORCED - vhost '{vhost[:100]}") and text.endswith("...")
    assert len(text.encode()) <= 255
    assert call(broker, "GET", f"/api/vhosts/{path}")[0].status_code == 404


UNSUPPORTED = {"error": "unsupported_media_type"}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/definitions", "{}"),
        ("POST", "/api/definitions/%2F", "{}"),
        ("PUT", "/api/vhost-limits/%2F/max-queues", '{"value": 10}'),
        ("PUT", "/api/operator-policies/%2F/op", '{"pattern": "x", "definition": {"max-length": 1}}'),
    ],
)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_labelled_json_is_415_where_rabbitmq_takes_only_json(
    broker: BrokerProcess, method: str, path: str, body: str, content_type: str | None
) -> None:
    """RabbitMQ's definitions, limits and operator policy endpoints accept application/json
    only, and answer 415 to another type or none (Lavin's body says why)."""
    logged = len(broker.output.splitlines())
    headers = {} if content_type is None else {"content-type": content_type}
    response = requests.request(
        method, broker.http_url + path, data=body.encode(), auth=GUEST, headers=headers, timeout=10
    )
    assert response.status_code == 415
    assert response.json().items() >= UNSUPPORTED.items()
    assert broker.output.splitlines()[logged:] == []
    response, _ = call(broker, method, path, body, **{"content-type": "application/json; charset=utf-8"})
    assert response.status_code in (201, 204)


def test_other_endpoints_take_a_json_body_whatever_its_label(broker: BrokerProcess) -> None:
    """As RabbitMQ's other endpoints (`content_types_accepted` is '*')."""
    response, _ = call(
        broker, "PUT", f"/api/queues/%2F/{unique_name('labelled')}", "{}", **{"content-type": "text/plain"}
    )
    assert response.status_code == 201


def test_an_unexpected_fault_is_a_500_and_one_log_line(broker: BrokerProcess) -> None:
    response, written = call(broker, "PUT", f"/api/queues/%2F/{FAULTY_QUEUE}", "{}")
    assert response.status_code == 500
    assert response.json()["error"] == "internal_server_error"
    assert len(written) == 1, written[:5]
    assert "ERROR" in written[0] and f"PUT /api/queues///{FAULTY_QUEUE} failed: RecursionError" in written[0]
