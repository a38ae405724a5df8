"""A change over the management API applies whole or not at all: what the broker could not
store is refused with 400 before anything applies, a write that fails (500) leaves nothing
in memory, no `.tmp` file and the same state after a restart, and confirmed messages are
never lost to a definition that half-applied.

The broker runs with a small RLIMIT_FSIZE, as in test_write_failures: a definition or a
parameter larger than that cannot be written (EFBIG), while everything else can.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import requests
from broker_process import stop_quietly
from limited_broker import LimitedBroker

pytestmark = pytest.mark.timeout(60)

AUTH = ("guest", "guest")
FILE_SIZE_LIMIT = 64 * 1024
TOO_LARGE = "z" * (FILE_SIZE_LIMIT + 1024)  # a value no file of the broker's may hold
DEPTH_LIMIT = 100  # as AMQP field tables


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitedBroker]:
    process = LimitedBroker(
        tmp_path_factory.mktemp("atomic") / "data", {"RLIMIT_FSIZE": (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT)}
    )
    process.start()
    yield process
    stop_quietly(process)


def nested(containers: int) -> Any:
    """A value of `containers` objects inside each other."""
    value: Any = "x"
    for _ in range(containers):
        value = {"a": value}
    return value


def api(broker: LimitedBroker, method: str, path: str, body: Any = None, raw: str | None = None) -> requests.Response:
    data = raw if raw is not None else None if body is None else json.dumps(body)
    return requests.request(
        method,
        broker.http_url + path,
        auth=AUTH,
        data=data,
        headers={"content-type": "application/json"},
        timeout=30,
    )


def exists(broker: LimitedBroker, path: str) -> bool:
    status = api(broker, "GET", path).status_code
    assert status in (200, 404), status
    return status == 200


def refused(response: requests.Response, reason: str) -> None:
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "bad_request"
    assert reason in response.json()["reason"]


def failed_write(response: requests.Response) -> None:
    assert response.status_code == 500, response.text
    assert response.json() == {"error": "internal_server_error", "reason": "[Errno 27] File too large"}


def leftovers(broker: LimitedBroker) -> list[str]:
    """Temporary files and orphaned queue directories in the data dir."""
    return sorted(
        str(path.relative_to(broker.data_dir))
        for path in broker.data_dir.rglob("*")
        if path.name.endswith(".tmp") or "orphans" in path.parts
    )


def queue_directories(broker: LimitedBroker) -> set[str]:
    """The directories of the default vhost's durable queues, by the names they hold."""
    return {path.read_text() for path in broker.data_dir.glob("*/*/.queue")}


def bindings_to(broker: LimitedBroker, queue: str) -> list[str]:
    return [row["source"] for row in api(broker, "GET", f"/api/queues/%2F/{queue}/bindings").json()]


# ---- refused before anything applies ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["queue", "exchange"])
def test_arguments_nested_too_deep_are_refused_and_nothing_is_declared(broker: LimitedBroker, kind: str) -> None:
    path = f"/api/{kind}s/%2F/deep-{kind}"
    body = {"durable": True, "type": "direct", "arguments": {"x-deep": nested(900)}}
    refused(api(broker, "PUT", path, body), "nested more than 100 deep")
    assert not exists(broker, path)
    # As deep as the limit allows: the request body and the arguments table are two of its levels.
    body["arguments"] = {"x-deep": nested(DEPTH_LIMIT - 2)}
    assert api(broker, "PUT", path, body).status_code == 201
    assert api(broker, "DELETE", path).status_code == 204


def test_binding_arguments_nested_too_deep_are_refused(broker: LimitedBroker) -> None:
    assert api(broker, "PUT", "/api/queues/%2F/bound-deep", {"durable": True}).status_code == 201
    response = api(broker, "POST", "/api/bindings/%2F/e/amq.direct/q/bound-deep", {"arguments": {"x": nested(900)}})
    refused(response, "nested more than 100 deep")
    assert bindings_to(broker, "bound-deep") == [""]  # the default exchange's only


def test_policy_definition_nested_too_deep_is_refused(broker: LimitedBroker) -> None:
    response = api(broker, "PUT", "/api/policies/%2F/deep", {"pattern": "^deep$", "definition": {"x": nested(900)}})
    refused(response, "nested more than 100 deep")
    assert not exists(broker, "/api/policies/%2F/deep")
    assert leftovers(broker) == []


def test_confirmed_messages_survive_a_restart_after_a_refused_declare(broker: LimitedBroker) -> None:
    """The issue's probe: the refused declare must leave no live queue that takes messages
    and loses them at the next start."""
    refused(
        api(broker, "PUT", "/api/queues/%2F/kept", {"durable": True, "arguments": {"x-deep": nested(900)}}),
        "nested more than 100 deep",
    )
    assert api(broker, "PUT", "/api/queues/%2F/kept", {"durable": True}).status_code == 201
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.confirm_delivery()
    for number in range(3):
        channel.basic_publish("", "kept", f"m{number}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()
    broker.restart()
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    got = [channel.basic_get("kept", auto_ack=True)[2] for _ in range(3)]
    connection.close()
    assert got == [b"m0", b"m1", b"m2"]
    assert leftovers(broker) == []


def test_an_import_is_refused_whole_for_a_lone_surrogate(broker: LimitedBroker) -> None:
    document = (
        '{"exchanges": [{"name": "fine-before", "vhost": "/", "type": "direct", "durable": true},'
        ' {"name": "e\\ud800", "vhost": "/", "type": "direct", "durable": true}]}'
    )
    refused(api(broker, "POST", "/api/definitions", raw=document), "lone surrogate \\ud800")
    names = {row["name"] for row in api(broker, "GET", "/api/exchanges/%2F").json()}
    assert not names & {"fine-before", "e\ud800"}


@pytest.mark.parametrize("section", ["exchanges", "queues"])
def test_an_import_refuses_names_over_255_bytes(broker: LimitedBroker, section: str) -> None:
    long_name = "n" * 300
    document = {
        "queues": [{"name": "imported-before", "vhost": "/", "durable": True}],
        section: [{"name": long_name, "vhost": "/", "type": "direct", "durable": True}],
    }
    if section == "queues":
        document["queues"].append(document[section].pop())
    refused(api(broker, "POST", "/api/definitions", document), "name must be at most 255 bytes")
    assert not exists(broker, "/api/queues/%2F/imported-before")
    assert not exists(broker, f"/api/{section}/%2F/{long_name}")


# ---- a write that fails changes nothing ------------------------------------------------------


def test_a_declare_whose_definition_cannot_be_written_changes_nothing(broker: LimitedBroker) -> None:
    big = {"durable": True, "type": "direct", "arguments": {"x-note": TOO_LARGE}}
    failed_write(api(broker, "PUT", "/api/queues/%2F/unwritten", big))
    failed_write(api(broker, "PUT", "/api/exchanges/%2F/unwritten", big))
    assert api(broker, "PUT", "/api/queues/%2F/bound-big", {"durable": True}).status_code == 201
    failed_write(api(broker, "POST", "/api/bindings/%2F/e/amq.direct/q/bound-big", {"arguments": {"x": TOO_LARGE}}))
    for _ in range(2):  # as the broker runs, then as it starts again
        assert not exists(broker, "/api/queues/%2F/unwritten")
        assert not exists(broker, "/api/exchanges/%2F/unwritten")
        assert "unwritten" not in queue_directories(broker)
        assert bindings_to(broker, "bound-big") == [""]
        assert leftovers(broker) == []
        broker.restart()
    # The log was cut back: what is declared next is written and kept.
    assert api(broker, "PUT", "/api/exchanges/%2F/written", {"type": "direct", "durable": True}).status_code == 201
    broker.restart()
    assert exists(broker, "/api/exchanges/%2F/written")


def test_a_global_parameter_that_cannot_be_written_leaves_no_temporary_file(broker: LimitedBroker) -> None:
    assert api(broker, "PUT", "/api/global-parameters/kept", {"value": "v1"}).status_code == 201
    failed_write(api(broker, "PUT", "/api/global-parameters/kept", {"value": TOO_LARGE}))
    failed_write(api(broker, "PUT", "/api/global-parameters/big", {"value": TOO_LARGE}))
    refused(
        api(broker, "PUT", "/api/global-parameters/surrogate", raw='{"value": "\\udc80"}'),
        "lone surrogate \\udc80",
    )
    for _ in range(2):
        assert api(broker, "GET", "/api/global-parameters/kept").json()["value"] == "v1"
        assert not exists(broker, "/api/global-parameters/big")
        assert not exists(broker, "/api/global-parameters/surrogate")
        assert leftovers(broker) == []
        broker.restart()


def test_each_refusal_or_failure_logs_at_most_one_line(broker: LimitedBroker) -> None:
    """Runs last in the module: no request above wrote a traceback."""
    log = Path(broker.log_path).read_text()
    assert "Traceback" not in log
    assert log.count("File too large") <= 5  # one line per failed write above
