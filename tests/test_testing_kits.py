"""The conformance kits of lavin.testing, run against the built-in types: each must pass
the kit that third-party types are held to."""

from __future__ import annotations

from typing import ClassVar

import pytest
from lavin.api import Arguments, ExchangeTypes
from lavin.plugins.exchanges.consistent_hash import ConsistentHashExchange
from lavin.plugins.exchanges.delayed import DelayedMessageExchange
from lavin.plugins.exchanges.direct import DirectExchange
from lavin.plugins.exchanges.fanout import FanoutExchange
from lavin.plugins.exchanges.headers import HeadersExchange
from lavin.plugins.exchanges.topic import TopicExchange
from lavin.plugins.queues.classic import ClassicQueue
from lavin.plugins.queues.priority import PriorityQueue
from lavin.testing import ExchangeTypeKit, Publish, QueueTypeKit

pytest_plugins = ["pytester"]


class TestDirectExchange(ExchangeTypeKit):
    exchange_type = DirectExchange


class TestFanoutExchange(ExchangeTypeKit):
    exchange_type = FanoutExchange
    not_matching = None


class TestTopicExchange(ExchangeTypeKit):
    exchange_type = TopicExchange
    binding_key = "kit.*"
    not_matching = Publish("kit.key.deeper")


class TestHeadersExchange(ExchangeTypeKit):
    exchange_type = HeadersExchange
    binding_arguments: ClassVar[Arguments] = {"x-match": "all", "colour": "blue"}
    matching = Publish("", {"colour": "blue"})
    not_matching = Publish("", {"colour": "red"})
    refused_binding = ("", {"x-match": "some"})


class TestConsistentHashExchange(ExchangeTypeKit):
    exchange_type = ConsistentHashExchange
    binding_key, other_binding_key = "1", "2"  # binding keys are weights
    not_matching = None
    routes_to_all = False
    refused_binding = ("heavy", {})


class TestDelayedMessageExchange(ExchangeTypeKit):
    exchange_type = DelayedMessageExchange
    exchange_arguments: ClassVar[Arguments] = {"x-delayed-type": "direct"}
    exchange_types: ClassVar[ExchangeTypes] = {"direct": DirectExchange}


class TestClassicQueue(QueueTypeKit):
    queue_type = ClassicQueue


class TestPriorityQueue(QueueTypeKit):
    queue_type = PriorityQueue
    queue_arguments: ClassVar[Arguments] = {"x-max-priority": 5}


BROKEN_TYPES = '''
from lavin.api import QueueType
from lavin.plugins.exchanges.direct import DirectExchange
from lavin.testing import ExchangeTypeKit, QueueTypeKit


class ForgetsArguments(DirectExchange):
    """Binding identity without the arguments, as the first x-prefix sample had it."""

    name = "x-forgets-arguments"

    def bind(self, destination, routing_key, arguments):
        return super().bind(destination, routing_key, {})

    def unbind(self, destination, routing_key, arguments):
        return super().unbind(destination, routing_key, {})


class ForgetsOnRestart(QueueType):
    """Claims durable queues but keeps them in a transient store."""

    name = "x-forgets-on-restart"

    @classmethod
    def create(cls, path, arguments, durable, storage):
        return storage.fifo_store(path, durable=False)


class TestForgetsArguments(ExchangeTypeKit):
    exchange_type = ForgetsArguments


class TestForgetsOnRestart(QueueTypeKit):
    queue_type = ForgetsOnRestart
'''


def test_the_kits_catch_broken_types(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken=BROKEN_TYPES)
    result = pytester.runpytest("-rf", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines_random([
        "FAILED *TestForgetsArguments::test_arguments_are_part_of_the_identity*",
        "FAILED *TestForgetsOnRestart::test_flush_returns_open_fds?durable?*",
        "FAILED *TestForgetsOnRestart::test_a_restart_keeps_messages_not_acked*",
        "FAILED *TestForgetsOnRestart::test_a_crash_keeps_what_flush_covered*",
    ])  # fmt: skip
    assert "TestForgetsOnRestart::test_take_returns_every_message_once_in_order" not in result.stdout.str()
