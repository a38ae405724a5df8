"""Routing tables of the built-in exchange types, tested as plain objects without a broker."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import entry_points
from typing import Any

import pytest
from lavin.api import ExchangeType, Message, PreconditionFailed
from lavin.api.message import encode_properties
from lavin.plugins.exchanges.direct import DirectExchange
from lavin.plugins.exchanges.fanout import FanoutExchange
from lavin.plugins.exchanges.headers import HeadersExchange
from lavin.plugins.exchanges.topic import ROUTE_CACHE_SIZE, TopicExchange

ALL_TYPES = [DirectExchange, FanoutExchange, TopicExchange, HeadersExchange]
NO_HEADERS = Message("x", "", encode_properties({}), b"")


def message(headers: dict[str, Any] | None = None) -> Message:
    return Message("x", "", encode_properties({"headers": headers}), b"")


def routed(exchange: ExchangeType, routing_key: str, msg: Message = NO_HEADERS) -> set[Any]:
    return set(exchange.route(routing_key, msg))


def routed_in_order(exchange: ExchangeType, routing_key: str, msg: Message = NO_HEADERS) -> list[str]:
    """Destination names, sorted but with any duplicates kept."""
    return sorted(str(destination) for destination in exchange.route(routing_key, msg))


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_entry_point_name_is_the_amqp_type(exchange_type: type[ExchangeType]) -> None:
    (entry,) = [e for e in entry_points(group="lavin.exchanges") if e.name == exchange_type.name]
    assert entry.load() is exchange_type


# --- binding identity, shared by every type ----------------------------------------------------


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_bind_and_unbind_are_idempotent(exchange_type: type[ExchangeType]) -> None:
    exchange = exchange_type({})
    assert exchange.bind("q1", "k", {}) is True
    assert exchange.bind("q1", "k", {}) is False
    assert len(list(exchange.bindings())) == 1
    assert exchange.unbind("q1", "k", {}) is True
    assert exchange.unbind("q1", "k", {}) is False
    assert list(exchange.bindings()) == []
    assert routed(exchange, "k") == set()


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_arguments_take_part_in_identity(exchange_type: type[ExchangeType]) -> None:
    exchange = exchange_type({})
    assert exchange.bind("q1", "k", {})
    assert exchange.bind("q1", "k", {"x-note": 1})
    assert exchange.bind("q1", "k", {"x-note": True}), "True and 1 are different field values"
    assert not exchange.bind("q1", "k", {"x-note": 1})
    assert exchange.unbind("q1", "k", {"x-note": 1})
    assert routed(exchange, "k") == {"q1"}
    assert sorted(repr(b.arguments) for b in exchange.bindings()) == ["{'x-note': True}", "{}"]


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_argument_order_and_nesting_do_not_matter(exchange_type: type[ExchangeType]) -> None:
    exchange = exchange_type({})
    assert exchange.bind("q1", "k", {"x-a": 1, "x-b": {"c": [1, "two"], "d": None}})
    assert not exchange.bind("q1", "k", {"x-b": {"d": None, "c": [1, "two"]}, "x-a": 1})
    assert exchange.unbind("q1", "k", {"x-b": {"d": None, "c": [1, "two"]}, "x-a": 1})


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_routing_keys_take_part_in_identity(exchange_type: type[ExchangeType]) -> None:
    exchange = exchange_type({})
    assert exchange.bind("q1", "a", {})
    assert exchange.bind("q1", "b", {})
    assert exchange.bind("q2", "a", {})
    assert {(b.destination, b.routing_key) for b in exchange.bindings()} == {
        ("q1", "a"),
        ("q1", "b"),
        ("q2", "a"),
    }


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_remove_destination_drops_only_its_bindings(exchange_type: type[ExchangeType]) -> None:
    exchange = exchange_type({})
    for destination in ("q1", "q2"):
        exchange.bind(destination, "a", {})
        exchange.bind(destination, "b", {"x-note": "n"})
    exchange.remove_destination("q1")
    exchange.remove_destination("never-bound")
    assert {b.destination for b in exchange.bindings()} == {"q2"}
    assert routed(exchange, "a") == {"q2"}
    assert exchange.bind("q1", "a", {}), "the removed binding is gone for good"


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_destinations_are_opaque_hashables(exchange_type: type[ExchangeType]) -> None:
    exchange = exchange_type({})
    first, second = object(), ("exchange", "e2")
    exchange.bind(first, "k", {})
    exchange.bind(second, "k", {})
    assert routed(exchange, "k") == {first, second}


@pytest.mark.parametrize("exchange_type", ALL_TYPES)
def test_bindings_may_change_while_listed(exchange_type: type[ExchangeType]) -> None:
    exchange = exchange_type({})
    for index in range(5):
        exchange.bind(f"q{index}", "k", {})
    for binding in exchange.bindings():
        exchange.unbind(binding.destination, binding.routing_key, binding.arguments)
    assert list(exchange.bindings()) == []


# --- direct and fanout ---------------------------------------------------------------------------


def test_direct_routes_on_exact_key() -> None:
    exchange = DirectExchange({})
    exchange.bind("q1", "a", {})
    exchange.bind("q2", "a", {"x-other": 1})
    exchange.bind("q2", "b", {})
    exchange.bind("q3", "", {})
    assert routed(exchange, "a") == {"q1", "q2"}
    assert routed(exchange, "b") == {"q2"}
    assert routed(exchange, "") == {"q3"}
    assert routed(exchange, "A") == set()
    assert routed(exchange, "a.b") == set()


def test_direct_returns_each_destination_once_per_key() -> None:
    exchange = DirectExchange({})
    exchange.bind("q1", "a", {})
    exchange.bind("q1", "a", {"x-other": 1})
    assert routed_in_order(exchange, "a") == ["q1"]


def test_fanout_ignores_routing_keys() -> None:
    exchange = FanoutExchange({})
    exchange.bind("q1", "a", {})
    exchange.bind("q1", "b", {})
    exchange.bind("q2", "", {})
    assert routed_in_order(exchange, "anything") == ["q1", "q2"]
    exchange.unbind("q1", "a", {})
    assert routed_in_order(exchange, "") == ["q1", "q2"]
    exchange.unbind("q1", "b", {})
    assert routed_in_order(exchange, "") == ["q2"]


# --- topic -------------------------------------------------------------------------------------

TOPIC_CASES = [
    # binding key, routing key, matches
    ("#", "", True),
    ("#", "a", True),
    ("#", "a.b.c", True),
    ("#", ".", True),
    ("*", "", False),
    ("*", "a", True),
    ("*", "a.b", False),
    ("*", ".", False),
    ("*.*", ".", True),
    ("", "", True),
    ("", "a", False),
    ("", ".", False),
    ("a", "a", True),
    ("a", "ab", False),
    ("a", "a.b", False),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("a.#", "ab", False),
    ("a.#", "b.a", False),
    ("#.a", "a", True),
    ("#.a", "b.c.a", True),
    ("#.a", "a.b", False),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.b.c", False),
    ("a.#.b", "a..b", True),
    ("#.#", "", True),
    ("#.#", "a.b", True),
    ("#.#.#", "a", True),
    ("a.#.#.b", "a.b", True),
    ("#.*", "", False),
    ("#.*", "a", True),
    ("#.*", "a.b.c", True),
    ("*.#", "", False),
    ("*.#", "a", True),
    ("#.*.#", "a.b.c", True),
    ("#.*.#", "", False),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("#.b.#", "b", True),
    ("#.b.#", "a.b.c", True),
    ("#.b.#", "a.c", False),
    ("a..b", "a..b", True),
    ("a..b", "a.b", False),
    ("a.*.b", "a..b", True),
    ("a.*.b", "a.b", False),
    ("a.", "a.", True),
    ("a.", "a", False),
    ("a.*", "a.", True),
    (".a", ".a", True),
    (".a", "a", False),
    ("*.a", ".a", True),
    ("#.a", ".a", True),
    (".", ".", True),
    (".", "", False),
    ("..", "..", True),
    ("*.*.*", "..", True),
    # Wildcard characters in a routing key are ordinary words.
    ("a", "*", False),
    ("*", "*", True),
    ("#", "#", True),
    ("a.b", "a.#", False),
    ("a*", "ab", False),
    ("a*", "a*", True),
]


@pytest.mark.parametrize(("binding_key", "routing_key", "matches"), TOPIC_CASES)
def test_topic_edge_cases(binding_key: str, routing_key: str, matches: bool) -> None:
    exchange = TopicExchange({})
    exchange.bind("q", binding_key, {})
    assert routed(exchange, routing_key) == ({"q"} if matches else set())


def reference_match(pattern: list[str], words: list[str]) -> bool:
    """The topic rule spelled out recursively, to check the trie against."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return reference_match(rest, words) or (bool(words) and reference_match(pattern, words[1:]))
    return bool(words) and head in ("*", words[0]) and reference_match(rest, words[1:])


def split(key: str) -> list[str]:
    return key.split(".") if key else []


def test_topic_agrees_with_the_reference_rule_on_every_small_key() -> None:
    patterns = [
        ".".join(words) for length in range(4) for words in itertools.product(["a", "b", "", "*", "#"], repeat=length)
    ]
    keys = [".".join(words) for length in range(5) for words in itertools.product(["a", "b", ""], repeat=length)]
    exchange = TopicExchange({})
    for pattern in patterns:
        exchange.bind(pattern, pattern, {})
    for key in keys:
        expected = {p for p in patterns if reference_match(split(p), split(key))}
        assert routed(exchange, key) == expected, key


def test_topic_returns_each_destination_once() -> None:
    exchange = TopicExchange({})
    for pattern in ("#", "a.*", "a.b", "#.b", "#.#"):
        exchange.bind("q1", pattern, {})
    exchange.bind("q2", "a.b", {})
    assert routed_in_order(exchange, "a.b") == ["q1", "q2"]


def test_topic_equivalent_patterns_are_separate_bindings() -> None:
    exchange = TopicExchange({})
    assert exchange.bind("q1", "#", {})
    assert exchange.bind("q1", "#.#", {})
    assert {b.routing_key for b in exchange.bindings()} == {"#", "#.#"}
    assert exchange.unbind("q1", "#.#", {})
    assert routed(exchange, "a") == {"q1"}
    assert exchange.unbind("q1", "#", {})
    assert routed(exchange, "a") == set()


def test_topic_unbind_keeps_overlapping_branches() -> None:
    exchange = TopicExchange({})
    exchange.bind("q1", "a.b.c", {})
    exchange.bind("q2", "a.b", {})
    exchange.bind("q3", "a.*.c", {})
    exchange.unbind("q1", "a.b.c", {})
    assert routed(exchange, "a.b") == {"q2"}
    assert routed(exchange, "a.b.c") == {"q3"}
    exchange.unbind("q2", "a.b", {})
    assert routed(exchange, "a.b") == set()
    assert routed(exchange, "a.x.c") == {"q3"}


def test_topic_cache_follows_bind_and_unbind() -> None:
    exchange = TopicExchange({})
    exchange.bind("q1", "a.b", {})
    assert routed(exchange, "a.b") == {"q1"}
    exchange.bind("q2", "a.*", {})
    assert routed(exchange, "a.b") == {"q1", "q2"}
    exchange.remove_destination("q1")
    assert routed(exchange, "a.b") == {"q2"}
    exchange.unbind("q2", "a.*", {})
    assert routed(exchange, "a.b") == set()


def test_topic_stays_correct_past_the_cache_size() -> None:
    exchange = TopicExchange({})
    exchange.bind("all", "#.x", {})
    exchange.bind("first", "k0.x", {})
    for index in range(ROUTE_CACHE_SIZE * 2 + 3):
        assert routed(exchange, f"k{index}.x") == ({"all", "first"} if index == 0 else {"all"})
    assert routed(exchange, "k0.x") == {"all", "first"}


def test_topic_many_bindings_and_deep_wildcards() -> None:
    exchange = TopicExchange({})
    for index in range(2000):
        exchange.bind(f"q{index}", f"stock.{index}.#", {})
    exchange.bind("deep", ".".join(["#"] * 30 + ["end"]), {})
    assert routed(exchange, "stock.42.nyse.ibm") == {"q42"}
    assert routed(exchange, ".".join(["w"] * 100 + ["end"])) == {"deep"}


# --- headers -----------------------------------------------------------------------------------


def headers_routed(arguments: dict[str, Any], headers: dict[str, Any] | None) -> bool:
    exchange = HeadersExchange({})
    exchange.bind("q", "", arguments)
    return routed(exchange, "", message(headers)) == {"q"}


HEADER_CASES = [
    # binding arguments, message headers, matches
    ({"a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
    ({"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3}, True),
    ({"a": 1, "b": "x"}, {"a": 1}, False),
    ({"a": 1, "b": "x"}, {"a": 1, "b": "y"}, False),
    ({"x-match": "all", "a": 1}, {"a": 1}, True),
    ({"x-match": "any", "a": 1, "b": "x"}, {"b": "x"}, True),
    ({"x-match": "any", "a": 1, "b": "x"}, {"a": 2, "b": "y"}, False),
    ({"x-match": "any", "a": 1}, None, False),
    # No conditions: `all` matches everything, `any` nothing.
    ({}, None, True),
    ({}, {"a": 1}, True),
    ({"x-match": "all"}, None, True),
    ({"x-match": "any"}, {"a": 1}, False),
    # x- arguments are not conditions unless the mode says -with-x.
    ({"x-match": "all", "x-tag": "t"}, None, True),
    ({"x-match": "any", "x-tag": "t"}, {"x-tag": "t"}, False),
    ({"x-match": "all-with-x", "x-tag": "t"}, {"x-tag": "t"}, True),
    ({"x-match": "all-with-x", "x-tag": "t"}, None, False),
    ({"x-match": "all-with-x", "x-tag": "t", "a": 1}, {"x-tag": "t"}, False),
    ({"x-match": "any-with-x", "x-tag": "t", "a": 1}, {"x-tag": "t"}, True),
    ({"x-match": "any-with-x", "x-tag": "t"}, {"x-tag": "u"}, False),
    ({"x-match": "all-with-x"}, {"x-match": "any"}, True),
    # A void condition asks for presence only.
    ({"a": None}, {"a": 5}, True),
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {"b": 5}, False),
    ({"a": 1}, {"a": None}, False),
    ({"x-match": "any", "a": None, "b": 1}, {"a": "anything"}, True),
    # Values compare by type-aware equality.
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": 2**40}, {"a": 2**40}, True),
    ({"a": 1}, {"a": True}, False),
    ({"a": True}, {"a": 1}, False),
    ({"a": True}, {"a": True}, True),
    ({"a": False}, {"a": 0}, False),
    ({"a": 1}, {"a": "1"}, False),
    ({"a": "x"}, {"a": bytearray(b"x")}, True),
    ({"a": "é"}, {"a": bytearray("é".encode())}, True),
    ({"a": bytearray(b"x")}, {"a": "x"}, True),
    ({"a": "x"}, {"a": "X"}, False),
    ({"a": ""}, {"a": ""}, True),
    ({"a": 1.5}, {"a": 1.5}, True),
    ({"a": Decimal("1.5")}, {"a": Decimal("1.5")}, True),
    ({"a": {"b": [1, "c"]}}, {"a": {"b": [1, "c"]}}, True),
    ({"a": {"b": 1}}, {"a": {"b": 2}}, False),
    ({"a": [1, 2]}, {"a": [2, 1]}, False),
    ({"a": [1]}, {"a": 1}, False),
    ({"a": datetime(2024, 1, 2, tzinfo=UTC)}, {"a": datetime(2024, 1, 2, tzinfo=UTC)}, True),
    ({"a": datetime(2024, 1, 2, tzinfo=UTC)}, {"a": datetime(2024, 1, 3, tzinfo=UTC)}, False),
]


@pytest.mark.parametrize(("arguments", "headers", "matches"), HEADER_CASES)
def test_headers_matching(arguments: dict[str, Any], headers: dict[str, Any] | None, matches: bool) -> None:
    assert headers_routed(arguments, headers) is matches


def test_headers_ignore_routing_keys() -> None:
    exchange = HeadersExchange({})
    exchange.bind("q", "some-key", {"a": 1})
    assert routed(exchange, "other-key", message({"a": 1})) == {"q"}


def test_headers_bindings_with_equal_conditions_route_each_destination_once() -> None:
    exchange = HeadersExchange({})
    exchange.bind("q1", "k1", {"a": 1})
    exchange.bind("q1", "k2", {"a": 1})
    exchange.bind("q2", "k1", {"a": 1})
    exchange.bind("q3", "k1", {"x-match": "any", "a": 1, "b": 2})
    assert routed_in_order(exchange, "", message({"a": 1})) == ["q1", "q2", "q3"]
    exchange.unbind("q1", "k1", {"a": 1})
    assert routed_in_order(exchange, "", message({"a": 1})) == ["q1", "q2", "q3"]


EXPECTED_MODES = "expected all, any, all-with-x, or any-with-x"


@pytest.mark.parametrize(
    ("x_match", "text"),
    [
        ("one", f'Invalid x-match field value <<"one">>; {EXPECTED_MODES}'),
        ("ALL", f'Invalid x-match field value <<"ALL">>; {EXPECTED_MODES}'),
        (1, "Invalid x-match field type signedint (value 1); expected longstr"),
        (True, "Invalid x-match field type bool (value true); expected longstr"),
        (None, "Invalid x-match field type void (value undefined); expected longstr"),
    ],
)
def test_headers_refuse_invalid_x_match(x_match: Any, text: str) -> None:
    exchange = HeadersExchange({})
    with pytest.raises(PreconditionFailed) as raised:
        exchange.bind("q", "", {"x-match": x_match, "a": 1})
    assert raised.value.text == text
    assert raised.value.reply_text == f"PRECONDITION_FAILED - {text}"
    assert list(exchange.bindings()) == []
    assert routed(exchange, "", message({"a": 1})) == set()
