"""Conformance tests for exchange types: subclass `ExchangeTypeKit` in your test suite.

The kit checks what the core relies on, with stand-in destinations and no broker: binding
identity (destination, routing key, arguments), unbind, `is_bound`, `remove_destination`,
the `bindings()` listing, and routing before and after each of them. What a type routes
where is its own business; the subclass describes one binding and a message it matches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from lavin.api import (
    AMQPError,
    Arguments,
    BindingId,
    Destination,
    ExchangeType,
    ExchangeTypes,
    Message,
    binding_id,
    destination_identity,
    encode_properties,
)
from lavin.testing.entry_points import check_registered


@dataclass(eq=False)
class StubDestination:
    """A stand-in for the core's queue or exchange; like them it compares by identity."""

    name: str
    kind: str = "queue"


@dataclass(frozen=True)
class Publish:
    """A message to route: its routing key, and its headers for types that read them."""

    routing_key: str
    headers: Mapping[str, Any] | None = None

    def message(self) -> Message:
        properties = {} if self.headers is None else {"headers": dict(self.headers)}
        return Message("kit-exchange", self.routing_key, encode_properties(properties), b"kit")


# Extra binding arguments that give bindings of their own, or that do not.
_SAME_ARGUMENTS = [
    pytest.param({"x-kit-note": 1}, {"x-kit-note": 1}, id="equal"),
    pytest.param(
        {"x-kit-a": 1, "x-kit-b": {"c": [1, "two"], "d": None}},
        {"x-kit-b": {"d": None, "c": [1, "two"]}, "x-kit-a": 1},
        id="tables-in-another-order",
    ),
]
_DIFFERENT_ARGUMENTS = [
    pytest.param({}, {"x-kit-note": 1}, id="one-more"),
    pytest.param({"x-kit-note": 1}, {"x-kit-note": 2}, id="other-value"),
    # Booleans, integers and floats travel as distinct AMQP field types.
    pytest.param({"x-kit-note": 1}, {"x-kit-note": True}, id="int-or-bool"),
    pytest.param({"x-kit-note": 1}, {"x-kit-note": 1.0}, id="int-or-float"),
    pytest.param({"x-kit-note": [1, 2]}, {"x-kit-note": [2, 1]}, id="array-order"),
]


class ExchangeTypeKit:
    """Inherit it in a class named `Test...` and set `exchange_type`; describe a binding of
    your type and a message it matches when the defaults (a direct-style key) do not fit.
    Extra binding arguments named `x-kit-...` must not change what a binding matches."""

    exchange_type: ClassVar[type[ExchangeType]]
    exchange_arguments: ClassVar[Arguments] = {}
    # The installed types `create` may look up, for a type that wraps another.
    exchange_types: ClassVar[ExchangeTypes] = {}
    binding_key: ClassVar[str] = "kit.key"
    other_binding_key: ClassVar[str] = "kit.other-key"
    binding_arguments: ClassVar[Arguments] = {}
    matching: ClassVar[Publish] = Publish("kit.key")
    # None for a type whose bindings match every message, as fanout's do.
    not_matching: ClassVar[Publish | None] = Publish("kit.nothing")
    # False for a type that sends a message to one of the matching destinations only.
    routes_to_all: ClassVar[bool] = True
    # A (binding key, arguments) the type refuses with an AMQP error, if there is one.
    refused_binding: ClassVar[tuple[str, Arguments] | None] = None

    # -- helpers a subclass may use in tests of its own ------------------------------------

    def new_table(self) -> ExchangeType:
        """A table the way the core makes one, for a new exchange."""
        types = {self.exchange_type.name: self.exchange_type, **self.exchange_types}
        return self.exchange_type.create(self.exchange_arguments, types)

    def bind(self, table: ExchangeType, destination: Destination, extra: Arguments | None = None) -> bool:
        """Bind with the kit's binding, plus `extra` arguments."""
        return table.bind(destination, self.binding_key, {**self.binding_arguments, **(extra or {})})

    def unbind(self, table: ExchangeType, destination: Destination, extra: Arguments | None = None) -> bool:
        return table.unbind(destination, self.binding_key, {**self.binding_arguments, **(extra or {})})

    @staticmethod
    def routed(table: ExchangeType, publish: Publish) -> set[Destination]:
        return set(table.route(publish.routing_key, publish.message()))

    @staticmethod
    def listed(table: ExchangeType) -> Counter[BindingId]:
        return Counter(binding_id(b.destination, b.routing_key, b.arguments) for b in table.bindings())

    def assert_routes_to(self, table: ExchangeType, destinations: set[Destination]) -> None:
        """A matching message goes to these destinations (to one of them, for a type that
        does not route to all), and a message that matches nothing goes nowhere."""
        routed = self.routed(table, self.matching)
        if self.routes_to_all or not destinations:
            assert routed == destinations
        else:
            assert len(routed) == 1 and routed <= destinations, routed
        if self.not_matching is not None:
            assert self.routed(table, self.not_matching) == set()

    # -- the kit ---------------------------------------------------------------------------

    def test_name_matches_its_entry_point(self) -> None:
        check_registered("lavin.exchanges", self.exchange_type)

    def test_an_empty_table_routes_nowhere(self) -> None:
        table = self.new_table()
        assert not table.is_bound()
        assert list(table.bindings()) == []
        self.assert_routes_to(table, set())

    def test_a_binding_routes_what_it_matches(self) -> None:
        table, queue = self.new_table(), StubDestination("q")
        assert self.bind(table, queue) is True
        assert table.is_bound() and table.is_bound(queue)
        assert not table.is_bound(StubDestination("q")), "another object of the same name is another destination"
        self.assert_routes_to(table, {queue})

    def test_an_equal_binding_is_not_added_again(self) -> None:
        table, queue = self.new_table(), StubDestination("q")
        assert self.bind(table, queue) is True
        assert self.bind(table, queue) is False
        assert sum(self.listed(table).values()) == 1
        self.assert_routes_to(table, {queue})

    @pytest.mark.parametrize(("first", "second"), _SAME_ARGUMENTS)
    def test_equal_arguments_make_one_binding(self, first: Arguments, second: Arguments) -> None:
        table, queue = self.new_table(), StubDestination("q")
        assert self.bind(table, queue, first) is True
        assert self.bind(table, queue, second) is False
        assert self.unbind(table, queue, second) is True
        assert not table.is_bound()

    @pytest.mark.parametrize(("first", "second"), _DIFFERENT_ARGUMENTS)
    def test_arguments_are_part_of_the_identity(self, first: Arguments, second: Arguments) -> None:
        table, queue = self.new_table(), StubDestination("q")
        assert self.bind(table, queue, first) is True
        assert self.bind(table, queue, second) is True
        assert sum(self.listed(table).values()) == 2
        assert self.unbind(table, queue, first) is True
        assert self.unbind(table, queue, first) is False
        assert table.is_bound(queue)
        self.assert_routes_to(table, {queue})

    def test_the_binding_key_is_part_of_the_identity(self) -> None:
        table, queue = self.new_table(), StubDestination("q")
        assert self.bind(table, queue) is True
        assert table.bind(queue, self.other_binding_key, self.binding_arguments) is True
        assert sum(self.listed(table).values()) == 2
        assert table.unbind(queue, self.other_binding_key, self.binding_arguments) is True
        assert [b.routing_key for b in table.bindings()] == [self.binding_key]
        self.assert_routes_to(table, {queue})

    def test_unbind_removes_the_binding(self) -> None:
        table, queue = self.new_table(), StubDestination("q")
        self.bind(table, queue)
        assert self.unbind(table, queue) is True
        assert self.unbind(table, queue) is False
        assert not table.is_bound(queue) and not table.is_bound()
        assert list(table.bindings()) == []
        self.assert_routes_to(table, set())
        assert self.bind(table, queue) is True, "an unbound binding can be made again"

    def test_bindings_lists_every_binding(self) -> None:
        table = self.new_table()
        queue, exchange = StubDestination("d"), StubDestination("d", kind="exchange")
        self.bind(table, queue)
        self.bind(table, queue, {"x-kit-note": 1})
        self.bind(table, exchange)
        key, arguments = self.binding_key, self.binding_arguments
        assert self.listed(table) == Counter([
            binding_id(queue, key, arguments),
            binding_id(queue, key, {**arguments, "x-kit-note": 1}),
            binding_id(exchange, key, arguments),
        ])  # fmt: skip

    def test_remove_destination_drops_only_its_bindings(self) -> None:
        table = self.new_table()
        queue, other = StubDestination("q1"), StubDestination("q2")
        self.bind(table, queue)
        self.bind(table, queue, {"x-kit-note": 1})
        self.bind(table, other)
        table.remove_destination(queue)
        assert not table.is_bound(queue) and table.is_bound(other) and table.is_bound()
        assert [b.destination for b in table.bindings()] == [other]
        self.assert_routes_to(table, {other})
        assert self.unbind(table, queue) is False
        table.remove_destination(other)
        assert not table.is_bound()
        self.assert_routes_to(table, set())

    def test_routing_does_not_depend_on_bind_order(self) -> None:
        """After a restart the core binds again, in any order, with new destination
        objects: a message must go where it went before."""
        names = [("q1", "queue"), ("q2", "queue"), ("q3", "queue"), ("q1", "exchange")]
        forward, backward = self.new_table(), self.new_table()
        for name, kind in names:
            self.bind(forward, StubDestination(name, kind))
        for name, kind in reversed(names):
            self.bind(backward, StubDestination(name, kind))
        for publish in [self.matching, self.not_matching]:
            if publish is not None:
                routes = [table.route(publish.routing_key, publish.message()) for table in (forward, backward)]
                assert Counter(map(destination_identity, routes[0])) == Counter(map(destination_identity, routes[1]))

    def test_a_refused_binding_leaves_the_table_unchanged(self) -> None:
        if self.refused_binding is None:
            pytest.skip("the kit subclass names no binding the type refuses (refused_binding)")
        table, queue = self.new_table(), StubDestination("q")
        self.bind(table, queue)
        before = self.listed(table)
        key, arguments = self.refused_binding
        with pytest.raises(AMQPError):
            table.bind(StubDestination("refused"), key, arguments)
        assert self.listed(table) == before
        self.assert_routes_to(table, {queue})
