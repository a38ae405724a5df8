"""Policies, operator policies, runtime and global parameters through RabbitMQ's HTTP API,
checked with pika against live queues and exchanges: they apply at once to queues that
exist, with RabbitMQ's precedence (highest priority; the lower value between a policy and
an argument; the operator policy merged, the lower value winning), go away when removed,
survive a restart, travel in definitions, and only the right tags may change them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest
import requests
from broker_process import BrokerProcess
from helpers import connect, unique_name, wait_until
from pika.adapters.blocking_connection import BlockingChannel

GUEST = ("guest", "guest")


def api(
    broker: BrokerProcess, method: str, path: str, body: Any = None, auth: tuple[str, str] = GUEST
) -> requests.Response:
    data = None if body is None else json.dumps(body)
    headers = {"content-type": "application/json"}
    return requests.request(method, f"{broker.http_url}{path}", data=data, auth=auth, headers=headers, timeout=10)


def set_policy(broker: BrokerProcess, name: str, pattern: str, definition: dict[str, Any], **extra: Any) -> None:
    response = api(broker, "PUT", f"/api/policies/%2F/{name}", {"pattern": pattern, "definition": definition, **extra})
    assert response.status_code in (201, 204), response.text


def set_operator_policy(broker: BrokerProcess, name: str, pattern: str, definition: dict[str, Any]) -> None:
    body = {"pattern": pattern, "definition": definition, "apply-to": "queues"}
    response = api(broker, "PUT", f"/api/operator-policies/%2F/{name}", body)
    assert response.status_code in (201, 204), response.text


def clear(broker: BrokerProcess, kind: str, name: str) -> None:
    assert api(broker, "DELETE", f"/api/{kind}/%2F/{name}").status_code == 204


@pytest.fixture
def channel(broker: BrokerProcess) -> Iterator[BlockingChannel]:
    connection = connect(broker.url)
    yield connection.channel()
    connection.close()


def depth(channel: BlockingChannel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def publish(channel: BlockingChannel, queue: str, *bodies: bytes, exchange: str = "") -> None:
    for body in bodies:
        channel.basic_publish(exchange, queue, body)
    channel.queue_declare(queue, passive=True)  # a round trip: the publishes were handled


def exact(name: str) -> str:
    return f"^{name}$"


# ---- live effect -----------------------------------------------------------------------------


def test_a_max_length_policy_trims_an_existing_queue_now_and_its_removal_lifts_it(
    broker: BrokerProcess, channel: BlockingChannel
) -> None:
    queue = unique_name("policy-maxlen")
    channel.queue_declare(queue, auto_delete=False)
    publish(channel, queue, b"1", b"2", b"3", b"4", b"5")
    policy = unique_name("p")
    set_policy(broker, policy, exact(queue), {"max-length": 2}, **{"apply-to": "queues"})
    assert depth(channel, queue) == 2
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"4"  # the head was dropped, as for x-max-length
    publish(channel, queue, b"6", b"7")
    assert depth(channel, queue) == 2
    clear(broker, "policies", policy)
    publish(channel, queue, b"8", b"9", b"10")
    assert depth(channel, queue) == 5
    channel.queue_delete(queue)


def test_a_message_ttl_policy_expires_messages_already_queued(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("policy-ttl")
    channel.queue_declare(queue)
    publish(channel, queue, b"a", b"b", b"c")
    policy = unique_name("p")
    set_policy(broker, policy, exact(queue), {"message-ttl": 100})
    wait_until(lambda: depth(channel, queue) == 0, "the queued messages expired")
    clear(broker, "policies", policy)
    publish(channel, queue, b"d")
    time.sleep(0.3)
    assert depth(channel, queue) == 1
    channel.queue_delete(queue)


def test_an_expires_policy_deletes_an_unused_queue(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("policy-expires")
    channel.queue_declare(queue)
    policy = unique_name("p")
    set_policy(broker, policy, exact(queue), {"expires": 200})

    def gone() -> bool:
        probe = connect(broker.url)
        try:
            probe.channel().queue_declare(queue, passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker:
            return True
        finally:
            if probe.is_open:
                probe.close()

    wait_until(gone, "the unused queue expired")
    clear(broker, "policies", policy)


def test_a_dead_letter_policy_dead_letters_what_max_length_drops(
    broker: BrokerProcess, channel: BlockingChannel
) -> None:
    queue, dead = unique_name("policy-dlx"), unique_name("policy-dead")
    dlx = unique_name("dlx")
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dlx)
    channel.queue_declare(queue)
    policy = unique_name("p")
    set_policy(broker, policy, exact(queue), {"max-length": 1, "dead-letter-exchange": dlx})
    publish(channel, queue, b"first", b"second")
    method, properties, body = channel.basic_get(dead, auto_ack=True)
    assert method is not None and body == b"first"
    assert properties.headers["x-death"][0]["reason"] == "maxlen"
    clear(broker, "policies", policy)
    for name in (queue, dead):
        channel.queue_delete(name)
    channel.exchange_delete(dlx)


def test_an_alternate_exchange_policy_catches_unroutable_messages(
    broker: BrokerProcess, channel: BlockingChannel
) -> None:
    exchange, alternate, queue = unique_name("policy-x"), unique_name("policy-ae"), unique_name("policy-caught")
    channel.exchange_declare(exchange, "direct")
    channel.exchange_declare(alternate, "fanout")
    channel.queue_declare(queue)
    channel.queue_bind(queue, alternate)
    policy = unique_name("p")
    set_policy(broker, policy, exact(exchange), {"alternate-exchange": alternate}, **{"apply-to": "exchanges"})
    publish(channel, queue, b"lost", exchange=exchange)
    assert depth(channel, queue) == 1
    clear(broker, "policies", policy)
    publish(channel, queue, b"lost again", exchange=exchange)
    assert depth(channel, queue) == 1
    channel.queue_delete(queue)
    for name in (exchange, alternate):
        channel.exchange_delete(name)


def test_a_max_length_bytes_policy_trims_a_stream_and_wins_over_its_argument(
    broker: BrokerProcess, channel: BlockingChannel
) -> None:
    stream = unique_name("policy-stream")
    arguments = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 200, "x-max-length-bytes": 100_000}
    channel.queue_declare(stream, durable=True, arguments=arguments)
    channel.confirm_delivery()
    for number in range(40):
        channel.basic_publish("", stream, b"message %02d" % number)
    wait_until(lambda: depth(channel, stream) == 40, "the stream committed every message")
    policy = unique_name("p")
    set_policy(broker, policy, exact(stream), {"max-length-bytes": 600}, **{"apply-to": "streams"})
    assert 0 < depth(channel, stream) < 25  # whole old segments went at once
    clear(broker, "policies", policy)
    channel.queue_delete(stream)


# ---- precedence ------------------------------------------------------------------------------


def test_the_highest_priority_policy_applies_alone(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("policy-priority")
    channel.queue_declare(queue)
    low, high = unique_name("low"), unique_name("high")
    set_policy(broker, low, exact(queue), {"max-length": 3, "message-ttl": 100}, priority=1)
    set_policy(broker, high, exact(queue), {"max-length": 1}, priority=2)
    publish(channel, queue, b"1", b"2", b"3")
    time.sleep(0.3)
    assert depth(channel, queue) == 1  # the high one's length, and not the low one's TTL
    clear(broker, "policies", high)
    publish(channel, queue, b"4", b"5", b"6")
    assert depth(channel, queue) <= 3
    wait_until(lambda: depth(channel, queue) == 0, "the low one's TTL applied")
    clear(broker, "policies", low)
    channel.queue_delete(queue)


def test_the_lower_of_an_argument_and_a_policy_wins_for_limits(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("policy-arg")
    channel.queue_declare(queue, arguments={"x-max-length": 2})
    policy = unique_name("p")
    set_policy(broker, policy, exact(queue), {"max-length": 5})
    publish(channel, queue, b"1", b"2", b"3", b"4")
    assert depth(channel, queue) == 2
    set_policy(broker, policy, exact(queue), {"max-length": 1})
    assert depth(channel, queue) == 1
    clear(broker, "policies", policy)
    channel.queue_delete(queue)


def test_the_argument_wins_for_the_dead_letter_exchange(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue, by_argument, by_policy = unique_name("policy-q"), unique_name("dead-arg"), unique_name("dead-pol")
    for name in (by_argument, by_policy):
        channel.queue_declare(name)
    channel.queue_declare(queue, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": by_argument})
    policy = unique_name("p")
    set_policy(
        broker,
        policy,
        exact(queue),
        {"dead-letter-exchange": "", "dead-letter-routing-key": by_policy, "max-length": 0},
    )
    publish(channel, queue, b"gone")
    assert (depth(channel, by_argument), depth(channel, by_policy)) == (1, 0)
    clear(broker, "policies", policy)
    for name in (queue, by_argument, by_policy):
        channel.queue_delete(name)


def test_an_operator_policy_is_merged_with_the_lowest_value_winning(
    broker: BrokerProcess, channel: BlockingChannel
) -> None:
    queue = unique_name("policy-operator")
    channel.queue_declare(queue)
    policy, operator = unique_name("p"), unique_name("op")
    set_policy(broker, policy, exact(queue), {"max-length": 4})
    set_operator_policy(broker, operator, exact(queue), {"max-length": 2})
    publish(channel, queue, b"1", b"2", b"3", b"4", b"5")
    assert depth(channel, queue) == 2
    set_operator_policy(broker, operator, exact(queue), {"max-length": 10})
    publish(channel, queue, b"6", b"7", b"8")
    assert depth(channel, queue) == 4  # the policy's, lower than the operator's
    clear(broker, "operator-policies", operator)
    clear(broker, "policies", policy)
    channel.queue_delete(queue)


def test_apply_to_selects_the_kind_of_object(broker: BrokerProcess, channel: BlockingChannel) -> None:
    classic, quorum = unique_name("policy-classic"), unique_name("policy-quorum")
    channel.queue_declare(classic, durable=True)
    channel.queue_declare(quorum, durable=True, arguments={"x-queue-type": "quorum"})
    pattern = f"^({classic}|{quorum})$"
    for_exchanges, for_quorum = unique_name("xs"), unique_name("qq")
    set_policy(broker, for_exchanges, pattern, {"max-length": 0}, **{"apply-to": "exchanges"})
    set_policy(broker, for_quorum, pattern, {"max-length": 1}, **{"apply-to": "quorum_queues"}, priority=-1)
    publish(channel, classic, b"1", b"2")
    publish(channel, quorum, b"1", b"2")
    assert (depth(channel, classic), depth(channel, quorum)) == (2, 1)
    set_policy(broker, for_exchanges, pattern, {"max-length": 0}, **{"apply-to": "classic_queues"})
    assert (depth(channel, classic), depth(channel, quorum)) == (0, 1)
    for name in (for_exchanges, for_quorum):
        clear(broker, "policies", name)
    for name in (classic, quorum):
        channel.queue_delete(name)


# ---- validation and the JSON -----------------------------------------------------------------


def test_a_policy_reads_back_in_rabbitmqs_json(broker: BrokerProcess) -> None:
    name = unique_name("p")
    set_policy(broker, name, "^nothing-matches$", {"message-ttl": 1000}, priority=3, **{"apply-to": "queues"})
    expected = {
        "vhost": "/",
        "name": name,
        "pattern": "^nothing-matches$",
        "apply-to": "queues",
        "definition": {"message-ttl": 1000},
        "priority": 3,
    }
    assert api(broker, "GET", f"/api/policies/%2F/{name}").json() == expected
    assert expected in api(broker, "GET", "/api/policies").json()
    assert expected in api(broker, "GET", "/api/policies/%2F").json()
    again = api(broker, "PUT", f"/api/policies/%2F/{name}", {"pattern": "^x$", "definition": {"expires": 5}})
    assert again.status_code == 204
    assert api(broker, "GET", f"/api/policies/%2F/{name}").json()["apply-to"] == "all"
    clear(broker, "policies", name)
    assert api(broker, "GET", f"/api/policies/%2F/{name}").status_code == 404
    assert api(broker, "DELETE", f"/api/policies/%2F/{name}").status_code == 404


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"pattern": ".*", "definition": {"max-lenght": 1}},
            'Validation failed\n\n[{&lt;&lt;"max-lenght"&gt;&gt;,1}] are not recognised policy settings\n',
        ),
        (
            {"pattern": ".*", "definition": {"message-ttl": "1s"}},
            'Validation failed\n\n&lt;&lt;"1s"&gt;&gt; is not a valid message TTL\n',
        ),
        ({"pattern": ".*", "definition": {"expires": 0}}, "Validation failed\n\n0 is not a valid queue expiry\n"),
        (
            {"pattern": ".*", "definition": {"overflow": "drop-tail"}},
            'Validation failed\n\n&lt;&lt;"drop-tail"&gt;&gt; is not a valid overflow value\n',
        ),
        ({"pattern": ".*", "definition": {}}, "Validation failed\n\nno policy provided\n"),
        (
            {"pattern": ".*", "definition": {"max-length": 1}, "apply-to": "topics"},
            "Validation failed\n\napply-to 'topics' unrecognised; should be one of: 'queues', 'classic_queues', "
            " 'quorum_queues', 'streams', 'exchanges', or 'all'\n",
        ),
        ({"definition": {"max-length": 1}}, "[{key_missing,pattern}]"),
    ],
)
def test_an_invalid_policy_is_400_with_rabbitmqs_reason(broker: BrokerProcess, body: Any, reason: str) -> None:
    name = unique_name("bad")
    response = api(broker, "PUT", f"/api/policies/%2F/{name}", body)
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "reason": reason}
    assert api(broker, "GET", f"/api/policies/%2F/{name}").status_code == 404


def test_an_operator_policy_takes_only_the_limits(broker: BrokerProcess) -> None:
    body = {"pattern": ".*", "definition": {"dead-letter-exchange": "x"}}
    response = api(broker, "PUT", f"/api/operator-policies/%2F/{unique_name('op')}", body)
    assert response.status_code == 400
    assert response.json()["reason"] == (
        'Validation failed\n\n[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings\n'
    )


def test_a_policy_in_a_missing_vhost_is_404(broker: BrokerProcess) -> None:
    response = api(broker, "PUT", "/api/policies/no-such-vhost/p", {"pattern": ".*", "definition": {"expires": 9}})
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "reason": "vhost_not_found"}


def test_parameters_and_global_parameters_are_stored(broker: BrokerProcess) -> None:
    name = unique_name("shovel")
    value = {"src-uri": "amqp://", "src-queue": unique_name("a"), "dest-uri": "amqp://", "dest-queue": unique_name("b")}
    assert api(broker, "PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value}).status_code == 201
    expected = {"vhost": "/", "component": "shovel", "name": name, "value": value}
    assert api(broker, "GET", f"/api/parameters/shovel/%2F/{name}").json() == expected
    for path in ("/api/parameters", "/api/parameters/shovel", "/api/parameters/shovel/%2F"):
        assert expected in api(broker, "GET", path).json()
    refused = api(broker, "PUT", f"/api/parameters/no-such-plugin/%2F/{name}", {"value": {}})
    assert refused.status_code == 400
    assert refused.json()["reason"] == "Validation failed\n\ncomponent no-such-plugin not found\n"
    assert api(broker, "DELETE", f"/api/parameters/shovel/%2F/{name}").status_code == 204
    assert api(broker, "GET", f"/api/parameters/shovel/%2F/{name}").status_code == 404

    global_name = unique_name("g")
    assert api(broker, "PUT", f"/api/global-parameters/{global_name}", {"value": {"a": [1]}}).status_code == 201
    assert api(broker, "GET", f"/api/global-parameters/{global_name}").json() == {
        "name": global_name,
        "value": {"a": [1]},
    }
    assert {"name": global_name, "value": {"a": [1]}} in api(broker, "GET", "/api/global-parameters").json()
    assert api(broker, "DELETE", f"/api/global-parameters/{global_name}").status_code == 204
    assert api(broker, "GET", f"/api/global-parameters/{global_name}").status_code == 404


# ---- durability and definitions --------------------------------------------------------------


def test_policies_and_parameters_survive_a_restart(fresh_broker: BrokerProcess) -> None:
    set_policy(fresh_broker, "short", "^kept$", {"max-length": 1})
    set_operator_policy(fresh_broker, "capped", "^kept$", {"message-ttl": 60000})
    api(fresh_broker, "PUT", "/api/parameters/federation-upstream/%2F/up", {"value": {"uri": "amqp://"}})
    api(fresh_broker, "PUT", "/api/global-parameters/cluster_tag", {"value": "blue"})
    connection = connect(fresh_broker.url)
    connection.channel().queue_declare("kept", durable=True)
    connection.close()
    fresh_broker.restart()
    assert api(fresh_broker, "GET", "/api/policies/%2F/short").json()["definition"] == {"max-length": 1}
    assert api(fresh_broker, "GET", "/api/operator-policies/%2F/capped").json()["definition"] == {"message-ttl": 60000}
    assert api(fresh_broker, "GET", "/api/parameters/federation-upstream/%2F/up").json()["value"] == {"uri": "amqp://"}
    assert api(fresh_broker, "GET", "/api/global-parameters/cluster_tag").json()["value"] == "blue"
    connection = connect(fresh_broker.url)
    channel = connection.channel()
    publish(channel, "kept", b"1", b"2", b"3")
    assert depth(channel, "kept") == 1  # the recovered queue got its policy at start
    connection.close()


def test_an_unreadable_policies_file_stops_the_start_naming_it(fresh_broker: BrokerProcess) -> None:
    set_policy(fresh_broker, "short", "^kept$", {"max-length": 1})
    fresh_broker.stop()
    [path] = fresh_broker.data_dir.glob("*/policies.json")
    path.write_text('{"policies": [{"name": "short", "pattern": "(", "definition": {}}]}')
    with pytest.raises(RuntimeError, match=r"policies\.json"):
        fresh_broker.start()


def test_definitions_round_trip_policies_and_parameters(fresh_broker: BrokerProcess) -> None:
    set_policy(fresh_broker, "ttl", "^app\\.", {"message-ttl": 5000}, priority=2, **{"apply-to": "queues"})
    shovel = {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}
    assert api(fresh_broker, "PUT", "/api/parameters/shovel/%2F/move", {"value": shovel}).status_code == 201
    api(fresh_broker, "PUT", "/api/global-parameters/cluster_tag", {"value": "blue"})
    exported = api(fresh_broker, "GET", "/api/definitions").json()
    assert exported["policies"] == [api(fresh_broker, "GET", "/api/policies/%2F/ttl").json()]
    assert {"vhost": "/", "component": "shovel", "name": "move", "value": shovel} in exported["parameters"]
    assert exported["global_parameters"] == [{"name": "cluster_tag", "value": "blue"}]
    for path in ("/api/policies/%2F/ttl", "/api/parameters/shovel/%2F/move", "/api/global-parameters/cluster_tag"):
        api(fresh_broker, "DELETE", path)
    assert api(fresh_broker, "POST", "/api/definitions", exported).status_code == 204
    again = api(fresh_broker, "GET", "/api/definitions").json()
    for section in ("policies", "parameters", "global_parameters"):
        assert again[section] == exported[section]

    per_vhost = api(fresh_broker, "GET", "/api/definitions/%2F").json()
    assert set(per_vhost) == {"rabbit_version", "parameters", "policies", "queues", "exchanges", "bindings"}
    assert per_vhost["policies"] == exported["policies"]
    assert api(fresh_broker, "PUT", "/api/vhosts/copy").status_code == 201
    assert api(fresh_broker, "POST", "/api/definitions/copy", per_vhost).status_code == 204
    assert api(fresh_broker, "GET", "/api/policies/copy/ttl").json()["definition"] == {"message-ttl": 5000}


def test_an_invalid_policy_refuses_the_whole_definitions_document(fresh_broker: BrokerProcess) -> None:
    document = {
        "users": [{"name": "newcomer", "password": "pw", "tags": ""}],
        "policies": [{"vhost": "/", "name": "broken", "pattern": ".*", "definition": {"message-ttl": -1}}],
    }
    response = api(fresh_broker, "POST", "/api/definitions", document)
    assert response.status_code == 400
    assert response.json()["reason"] == (
        "policy 'broken' in vhost '/': Validation failed\n\n-1 is not a valid message TTL"
    )
    assert api(fresh_broker, "GET", "/api/users/newcomer").status_code == 404  # nothing was imported


# ---- who may -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tagged(broker: BrokerProcess) -> Iterator[dict[str, tuple[str, str]]]:
    """Users with permissions on vhost `team` only: `manager` (management) and `maker`
    (policymaker), and `outsider`, a policymaker without permissions on `team`."""
    vhost = "policy-team"
    assert api(broker, "PUT", f"/api/vhosts/{vhost}").status_code in (201, 204)
    users = {"manager": "management", "maker": "policymaker", "outsider": "policymaker"}
    for name, tag in users.items():
        assert api(broker, "PUT", f"/api/users/p-{name}", {"password": "pw", "tags": tag}).status_code in (201, 204)
    for name in ("manager", "maker"):
        body = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api(broker, "PUT", f"/api/permissions/{vhost}/p-{name}", body).status_code in (201, 204)
    set_body = {"pattern": "^team", "definition": {"max-length": 9}}
    assert api(broker, "PUT", f"/api/policies/{vhost}/team-limit", set_body).status_code == 201
    yield {name: (f"p-{name}", "pw") for name in users}
    for name in users:
        api(broker, "DELETE", f"/api/users/p-{name}")
    api(broker, "DELETE", f"/api/vhosts/{vhost}")


def test_a_management_user_reads_the_policies_of_its_vhosts_only(
    broker: BrokerProcess, tagged: dict[str, tuple[str, str]]
) -> None:
    listed = api(broker, "GET", "/api/policies", auth=tagged["manager"])
    assert [policy["name"] for policy in listed.json()] == ["team-limit"]
    assert api(broker, "GET", "/api/operator-policies/policy-team", auth=tagged["manager"]).json() == []
    one = api(broker, "GET", "/api/policies/policy-team/team-limit", auth=tagged["manager"])
    assert one.status_code == 401
    assert one.json() == {"error": "not_authorised", "reason": "User not authorised to access object"}
    body = {"pattern": ".*", "definition": {"max-length": 1}}
    assert api(broker, "PUT", "/api/policies/policy-team/mine", body, auth=tagged["manager"]).status_code == 401
    assert api(broker, "GET", "/api/global-parameters", auth=tagged["manager"]).status_code == 401


def test_a_policymaker_changes_policies_and_parameters_on_its_vhosts(
    broker: BrokerProcess, tagged: dict[str, tuple[str, str]]
) -> None:
    maker, outsider = tagged["maker"], tagged["outsider"]
    body = {"pattern": ".*", "definition": {"max-length": 1}}
    assert api(broker, "PUT", "/api/policies/policy-team/made", body, auth=maker).status_code == 201
    assert api(broker, "DELETE", "/api/policies/policy-team/made", auth=maker).status_code == 204
    assert api(broker, "PUT", "/api/policies/policy-team/made", body, auth=outsider).status_code == 401
    value = {"value": {"uri": "amqp://"}}
    assert api(broker, "PUT", "/api/parameters/federation-upstream/policy-team/u", value, auth=maker).status_code == 201
    assert api(broker, "GET", "/api/parameters/federation-upstream/policy-team/u", auth=outsider).status_code == 401
    assert api(broker, "DELETE", "/api/parameters/federation-upstream/policy-team/u", auth=maker).status_code == 204
    assert api(broker, "PUT", "/api/global-parameters/made-by", {"value": 1}, auth=maker).status_code == 201
    assert api(broker, "DELETE", "/api/global-parameters/made-by", auth=maker).status_code == 204
    refused = api(broker, "PUT", "/api/operator-policies/policy-team/op", body, auth=maker)
    assert refused.status_code == 401
    assert refused.json()["reason"] == "Not administrator user"
    assert api(broker, "GET", "/api/definitions/policy-team", auth=maker).status_code == 401


def test_vhost_names_in_paths_are_percent_encoded(broker: BrokerProcess) -> None:
    assert api(broker, "GET", f"/api/policies/{quote('/', safe='')}").status_code == 200
