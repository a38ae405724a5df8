"""User-supplied regular expressions (topic permissions, policies, the management list
filter, the metrics queue filter) are matched in linear time: a pattern with nested
repetition answers at once and other clients are not stalled meanwhile. A pattern RE2
refuses (backreferences, lookaround) is refused where it is given, with a 400 naming it."""

from __future__ import annotations

import random
from typing import TypeVar

import pika
import pytest
import requests
from broker_process import BrokerFactory, BrokerProcess
from helpers import closes_channel, round_trip, unique_name
from stall_helpers import MAX_STALL, worst_stall_during

T = TypeVar("T")
GUEST = ("guest", "guest")
TIMEOUT = 10
# Each of these takes seconds to minutes under a backtracking matcher.
NESTED_REPETITION = r"^(\w+\.?)*$"
LAZY_NESTED = r"^amq(.*?)*$x"
# 30 word characters and a character that fails the pattern: 2**30 paths to backtrack.
LONG_KEY = "a" * 30 + "!"
# A pattern RE2 accepts whose DFA grows a new state for nearly every byte of these names
# (the last 21 bytes' a/b history): about 0.4 ms per name, 170 ms over all of them.
DFA_HOSTILE = r"(?:[ab]*a[ab]{20}){1,50}x"
_SEEDED = random.Random(28)
LONG_NAMES = ["".join(_SEEDED.choice("ab") for _ in range(250)) for _ in range(400)]
# Over the bound: 25 ms against one 255-byte name.
TOO_LARGE = r"((a|aa|aaa|a?){1,50}){1,20}x"


@pytest.fixture
def own_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker of its own: a stalled one (the defect) must not hold up other tests."""
    return broker_factory()


def test_a_pathological_topic_permission_refuses_a_long_key_without_stalling(own_broker: BrokerProcess) -> None:
    exchange = unique_name("topic")
    body = {"exchange": exchange, "write": NESTED_REPETITION, "read": ".*"}
    put = requests.put(f"{own_broker.http_url}/api/topic-permissions/%2F/guest", json=body, auth=GUEST, timeout=TIMEOUT)
    assert put.status_code == 201, put.text
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        channel = connection.channel()
        channel.exchange_declare(exchange, "topic", auto_delete=True)
        channel.basic_publish(exchange, "good.key", b"allowed")
        round_trip(channel)

        channel.basic_publish(exchange, LONG_KEY, b"refused")
        stall, _ = worst_stall_during(own_broker, lambda: None)
        assert stall < MAX_STALL
        text = f"access to topic '{LONG_KEY}' in exchange '{exchange}' in vhost '/' refused for user 'guest'"
        with closes_channel(403, f"ACCESS_REFUSED - {text}"):
            round_trip(channel)
    finally:
        connection.close()


def test_a_pathological_policy_pattern_does_not_stall_declares(own_broker: BrokerProcess) -> None:
    body = {"pattern": NESTED_REPETITION, "definition": {"max-length": 5}, "apply-to": "queues"}
    put = requests.put(f"{own_broker.http_url}/api/policies/%2F/nested", json=body, auth=GUEST, timeout=TIMEOUT)
    assert put.status_code == 201, put.text
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        channel = connection.channel()
        stall, declared = worst_stall_during(own_broker, lambda: channel.queue_declare(LONG_KEY, exclusive=True))
        assert stall < MAX_STALL and declared.method.queue == LONG_KEY
    finally:
        connection.close()


def test_a_pathological_metrics_queue_filter_answers_at_once(own_broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        queue = connection.channel().queue_declare("", exclusive=True).method.queue
        assert queue.startswith("amq.gen-")
        url = f"http://127.0.0.1:{own_broker.metrics_port}/metrics/detailed"
        params = {"family": "queue_coarse_metrics", "queue": LAZY_NESTED}
        stall, scraped = worst_stall_during(own_broker, lambda: requests.get(url, params=params, timeout=TIMEOUT))
        assert stall < MAX_STALL
        assert scraped.status_code == 200 and queue not in scraped.text
    finally:
        connection.close()


@pytest.mark.parametrize("endpoint", ["metrics", "list"])
def test_a_costly_filter_over_many_queues_runs_off_the_event_loop(own_broker: BrokerProcess, endpoint: str) -> None:
    if endpoint == "metrics":
        url = f"http://127.0.0.1:{own_broker.metrics_port}/metrics/detailed"
        params = {"family": "queue_coarse_metrics", "queue": DFA_HOSTILE}
    else:
        url = f"{own_broker.http_url}/api/queues/%2F"
        params = {"page": "1", "use_regex": "true", "name": DFA_HOSTILE, "columns": "name"}
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        channel = connection.channel()
        for name in LONG_NAMES:
            channel.queue_declare(name, exclusive=True)
        stall, answer = worst_stall_during(
            own_broker, lambda: requests.get(url, params=params, auth=GUEST, timeout=TIMEOUT)
        )
        assert stall < MAX_STALL
        assert answer.status_code == 200 and LONG_NAMES[0] not in answer.text
    finally:
        connection.close()


def test_a_pattern_over_the_program_size_bound_is_a_400(broker: BrokerProcess) -> None:
    body = {"pattern": TOO_LARGE, "definition": {"max-length": 1}}
    put = requests.put(f"{broker.http_url}/api/policies/%2F/too-large", json=body, auth=GUEST, timeout=TIMEOUT)
    assert put.status_code == 400, put.text
    assert f"'{TOO_LARGE}'" in put.json()["reason"] and "pattern too large: " in put.json()["reason"]
    metrics_url = f"http://127.0.0.1:{broker.metrics_port}/metrics/detailed"
    scraped = requests.get(metrics_url, params={"family": "queue_coarse_metrics", "queue": TOO_LARGE}, timeout=TIMEOUT)
    assert scraped.status_code == 400 and "pattern too large" in scraped.text


def test_a_pathological_list_filter_answers_at_once(own_broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(own_broker.url))
    try:
        params = {"page": "1", "use_regex": "true", "name": r"^127\.0\.0(.*?)*$x"}
        url = f"{own_broker.http_url}/api/connections"
        stall, listed = worst_stall_during(
            own_broker, lambda: requests.get(url, params=params, auth=GUEST, timeout=TIMEOUT)
        )
        assert stall < MAX_STALL
        assert listed.status_code == 200 and listed.json()["items"] == []
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("path", "body", "pattern"),
    [
        ("/api/policies/%2F/lookahead", {"pattern": "^(?=a)", "definition": {"max-length": 1}}, "^(?=a)"),
        ("/api/permissions/%2F/guest", {"configure": "(a)\\1", "write": ".*", "read": ".*"}, "(a)\\1"),
        ("/api/topic-permissions/%2F/guest", {"exchange": "amq.topic", "write": "(?<!x)y", "read": ".*"}, "(?<!x)y"),
    ],
)
def test_a_pattern_re2_refuses_is_a_400_naming_it(
    broker: BrokerProcess, path: str, body: dict[str, object], pattern: str
) -> None:
    response = requests.put(f"{broker.http_url}{path}", json=body, auth=GUEST, timeout=TIMEOUT)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "bad_request"
    assert f"'{pattern}'" in response.json()["reason"]


def test_a_filter_re2_refuses_is_a_400_naming_it(broker: BrokerProcess) -> None:
    params = {"page": "1", "use_regex": "true", "name": "(?=a)"}
    listed = requests.get(f"{broker.http_url}/api/queues", params=params, auth=GUEST, timeout=TIMEOUT)
    assert listed.status_code == 400
    assert listed.json()["reason"] == "invalid regular expression '(?=a)': invalid perl operator: (?="
    metrics_url = f"http://127.0.0.1:{broker.metrics_port}/metrics/detailed"
    scraped = requests.get(metrics_url, params={"family": "queue_coarse_metrics", "queue": "(a)\\1"}, timeout=TIMEOUT)
    assert scraped.status_code == 400
    assert "Invalid 'queue' regex: invalid escape sequence: \\1" in scraped.text
