"""The regex fuzzer: seeded pathological patterns thrown at every endpoint that takes one
(list filters, the metrics filter, policies and operator policies, permissions and topic
permissions, then a publish under that topic permission). Each request answers, 2xx or a
400, within REQUEST_BOUND, and another client's round trip stays under MAX_STALL while they
run (the median of many samples: a disk write or a scheduling hiccup on a busy machine is
not a stall, a slow matcher slows every sample)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
import requests
from broker_process import BrokerProcess
from stall_helpers import MAX_STALL, stalls_during

GUEST = ("guest", "guest")
SEED = 28
REQUEST_BOUND = 2.0  # seconds for any one request
LIST_ENDPOINTS = ["queues", "exchanges", "connections", "channels", "vhosts", "users", "bindings", "policies"]
LONG_KEY = "a" * 60 + "!"


def pathological_patterns(seed: int = SEED, count: int = 12) -> list[str]:
    """Fixed hostile patterns and `count` random mixes of their parts: nested quantifiers,
    overlapping alternations, counted repetitions, long classes, what RE2 refuses
    (lookaround, backreferences, repetition counts over 1,000), huge and invalid ones."""
    fixed = [
        r"^(\w+\.?)*$",
        r"^amq(.*?)*$x",
        r"^(a|a)*$",
        r"(a|aa|aaa)+$",
        r"((a+)+)+b",
        r"(x{1000}){1000}",
        r"a{1001}",
        "[" + "".join(chr(c) for c in range(0x21, 0x7E) if chr(c) not in "[]\\^-") + "]{1,1000}$",
        r"(?=a)a",
        r"(?<!b)c",
        r"(a)\1",
        "(",
        "[a-",
        "*a",
        "a{2,1}",
        "(a|b)" * 1000,
    ]
    parts = [r"(\w+)*", r"(a|a?)+", r"(.*?)*", r"[a-z0-9_.]{0,999}", r"(\d|\w)+", r"(?:a*)*", r"\.?"]
    rng = random.Random(seed)
    mixed = ["^" + "".join(rng.choice(parts) for _ in range(rng.randint(2, 6))) + "$!" for _ in range(count)]
    return fixed + mixed


PATTERNS = pathological_patterns()


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("fuzz"))
    broker.start()
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    for name in ("a" * 30, "amqgen-" + "a" * 30, "fuzz.queue.with.dots"):
        channel.queue_declare(name)
    requests.put(f"{broker.http_url}/api/users/fuzzer", json={"password": "pw", "tags": ""}, auth=GUEST, timeout=5)
    yield broker
    connection.close()
    broker.stop()


def answered(response: requests.Response, pattern: str, started: float) -> None:
    """2xx, or a 400 (naming the pattern where the endpoint names it), within the bound."""
    assert time.monotonic() - started < REQUEST_BOUND, f"{response.url} took too long"
    assert response.status_code < 300 or response.status_code == 400, (pattern, response.status_code, response.text)


def names(response: requests.Response, pattern: str) -> bool:
    """Whether a 400's reason names the pattern (policy errors escape its angle brackets, as RabbitMQ's)."""
    reason = response.json()["reason"]
    return pattern in reason or pattern.replace("<", "&lt;").replace(">", "&gt;") in reason


def call(method: str, url: str, pattern: str, **kwargs: Any) -> requests.Response:
    started = time.monotonic()
    response = requests.request(method, url, auth=GUEST, timeout=REQUEST_BOUND * 5, **kwargs)
    answered(response, pattern, started)
    return response


def throw_at_lists(broker: BrokerProcess) -> None:
    for pattern in PATTERNS:
        for endpoint in LIST_ENDPOINTS:
            params = {"page": "1", "use_regex": "true", "name": pattern}
            call("GET", f"{broker.http_url}/api/{endpoint}", pattern, params=params)
        metrics = f"http://127.0.0.1:{broker.metrics_port}/metrics/detailed"
        call("GET", metrics, pattern, params={"family": "queue_coarse_metrics", "queue": pattern})


def throw_at_policies(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    try:
        for index, pattern in enumerate(PATTERNS):
            for kind in ("policies", "operator-policies"):
                body = {"pattern": pattern, "definition": {"max-length": 1000}, "apply-to": "queues"}
                response = call("PUT", f"{broker.http_url}/api/{kind}/%2F/fuzz-{index}", pattern, json=body)
                if response.status_code == 400:
                    assert names(response, pattern), response.text
            channel.queue_declare("a" * 30 + "!")  # every policy is matched against it
    finally:
        connection.close()
        for index in range(len(PATTERNS)):
            for kind in ("policies", "operator-policies"):
                requests.delete(f"{broker.http_url}/api/{kind}/%2F/fuzz-{index}", auth=GUEST, timeout=5)


def throw_at_permissions(broker: BrokerProcess) -> None:
    for pattern in PATTERNS:
        body = {"configure": pattern, "write": pattern, "read": pattern}
        response = call("PUT", f"{broker.http_url}/api/permissions/%2F/fuzzer", pattern, json=body)
        if response.status_code == 400:
            assert names(response, pattern), response.text
        topic = {"exchange": "amq.topic", "write": pattern, "read": pattern}
        response = call("PUT", f"{broker.http_url}/api/topic-permissions/%2F/fuzzer", pattern, json=topic)
        if response.status_code == 400:
            assert names(response, pattern), response.text
            continue
        publish_under_topic_permission(broker)


def publish_under_topic_permission(broker: BrokerProcess) -> None:
    """A publish with a long key: accepted or refused (403), at once."""
    requests.put(
        f"{broker.http_url}/api/permissions/%2F/fuzzer",
        json={"configure": ".*", "write": ".*", "read": ".*"},
        auth=GUEST,
        timeout=5,
    )
    started = time.monotonic()
    credentials = pika.PlainCredentials("fuzzer", "pw")
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, credentials=credentials))
    try:
        channel = connection.channel()
        channel.basic_publish("amq.topic", LONG_KEY, b"x")
        channel.exchange_declare("amq.topic", passive=True)
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 403
    finally:
        if connection.is_open:
            connection.close()
    assert time.monotonic() - started < REQUEST_BOUND


@pytest.mark.parametrize("throw", [throw_at_lists, throw_at_policies, throw_at_permissions])
def test_pathological_patterns_answer_in_time_without_stalling_others(
    fuzz_broker: BrokerProcess, throw: Callable[[BrokerProcess], None]
) -> None:
    stalls, _ = stalls_during(fuzz_broker, lambda: throw(fuzz_broker))
    assert len(stalls) >= 5
    median = statistics.median(stalls)
    assert median < MAX_STALL, f"another client waited {median * 1000:.0f} ms (median), slowest {stalls[-5:]}"
    assert "Traceback" not in fuzz_broker.output


def test_the_generator_is_seeded_and_covers_each_kind() -> None:
    assert pathological_patterns() == pathological_patterns()
    assert pathological_patterns(seed=1) != pathological_patterns()
    assert any("(?=" in pattern for pattern in PATTERNS) and any(len(pattern) > 4000 for pattern in PATTERNS)
