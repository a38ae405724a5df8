"""Micro-benchmarks of routing: the topic trie with 1,000 bindings, and jump hashing."""

from __future__ import annotations

import itertools

import pytest
from lavin.api.message import Message
from lavin.plugins.exchanges.topic import ROUTE_CACHE_SIZE, TopicExchange
from pytest_benchmark.fixture import BenchmarkFixture

BINDINGS = 1000
DISTINCT_KEYS = 10_000  # more than the route cache holds: every lookup walks the trie


def binding_key(index: int) -> str:
    """Literal words, `*` and `#` in the proportions a busy topic exchange might see."""
    return (
        f"stock.nyse.sym{index}",
        f"stock.*.sym{index}",
        f"news.#.topic{index}",
        f"log.{index}.#",
    )[index % 4]


def routing_key(index: int) -> str:
    """A different key for every index; three in four match one binding each."""
    bound = index % (BINDINGS // 4) * 4
    return (
        f"stock.venue{index}.sym{bound + 1}",  # stock.*.symN
        f"news.world.{index}.topic{bound + 2}",  # news.#.topicN
        f"log.{bound + 3}.error.{index}",  # log.N.#
        f"metrics.host{index}.cpu",  # nothing
    )[index % 4]


@pytest.fixture(scope="module")
def topic_exchange() -> TopicExchange:
    exchange = TopicExchange({})
    for index in range(BINDINGS):
        exchange.bind(f"queue-{index}", binding_key(index), {})
    return exchange


def test_topic_route_cached_key(benchmark: BenchmarkFixture, topic_exchange: TopicExchange) -> None:
    message = Message("amq.topic", "stock.nyse.sym42", b"\x00\x00", b"")
    benchmark(topic_exchange.route, "stock.nyse.sym42", message)


def test_topic_route_distinct_keys(benchmark: BenchmarkFixture, topic_exchange: TopicExchange) -> None:
    assert DISTINCT_KEYS > ROUTE_CACHE_SIZE
    keys = itertools.cycle([routing_key(index) for index in range(DISTINCT_KEYS)])
    message = Message("amq.topic", "", b"\x00\x00", b"")
    route = topic_exchange.route
    benchmark(lambda: route(next(keys), message))


def test_jump_hash_1000_buckets(benchmark: BenchmarkFixture) -> None:
    jump_hash = pytest.importorskip("lavin.plugins.exchanges.jump_hash")
    benchmark(jump_hash.jump_bucket, 0x9E3779B97F4A7C15, 1000)
