"""The headers exchange: bindings match message headers; routing keys are ignored.

Semantics follow RabbitMQ. The binding argument `x-match` is `all` (the default), `any`,
`all-with-x` or `any-with-x`. Other binding arguments are the conditions; those starting with
`x-` are skipped unless the mode ends in `-with-x`. A condition with a void (None) value asks
only that the header be present. `all` with no conditions matches every message; `any` with
none matches nothing. Bindings with equal conditions share one match per message.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from lavin.api import (
    Arguments,
    Binding,
    BindingId,
    BindingTable,
    Destination,
    DestinationSet,
    Message,
    PreconditionFailed,
    frozen,
)

# x-match value -> whether one condition is enough.
MATCH_MODES = {"all": False, "any": True, "all-with-x": False, "any-with-x": True}


class _Present:
    """The expectation of a void condition: any value will do."""


PRESENT: Hashable = _Present()


class Conditions(NamedTuple):
    match_any: bool
    expected: tuple[tuple[str, Hashable], ...]

    def matches(self, headers: Mapping[str, Hashable]) -> bool:
        for key, wanted in self.expected:
            found = key in headers and (wanted is PRESENT or headers[key] == wanted)
            if found == self.match_any:
                return found
        return not self.match_any


def comparable(value: Any) -> Hashable:
    """A header value in the form RabbitMQ compares it in.

    Numbers compare by value (1 == 1.0) and timestamps as their seconds; text and byte
    arrays by their bytes; booleans only with booleans; tables and arrays exactly.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, datetime):
        return value.timestamp()
    return frozen(value)


def parse_conditions(arguments: Arguments) -> Conditions:
    mode = arguments.get("x-match", "all")
    if not isinstance(mode, str):
        raise PreconditionFailed(
            f"Invalid x-match field type {_amqp_type(mode)} (value {_erlang_term(mode)}); expected longstr"
        )
    if mode not in MATCH_MODES:
        raise PreconditionFailed(
            f"Invalid x-match field value {_erlang_term(mode)}; expected all, any, all-with-x, or any-with-x"
        )
    with_x = mode.endswith("-with-x")
    expected = tuple(
        (key, PRESENT if value is None else comparable(value))
        for key, value in sorted(arguments.items())
        if key != "x-match" and (with_x or not key.startswith("x-"))
    )
    return Conditions(MATCH_MODES[mode], expected)


_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (float, "double"),
    (Decimal, "decimal"),
    (bytes, "bytearray"),
    (Mapping, "table"),
    (list, "array"),
    (datetime, "timestamp"),
)


def _amqp_type(value: Any) -> str:
    """The field type name RabbitMQ reports for a value as pika would encode it."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _erlang_term(value: Any) -> str:
    """A value spelled as RabbitMQ's error texts print it."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, bytes):
        return f'<<"{value.decode("latin-1")}">>'
    return repr(value)


class HeadersExchange(BindingTable):
    name = "headers"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._targets_by_conditions: dict[Conditions, DestinationSet] = {}

    def _index(self, binding_id: BindingId, binding: Binding) -> None:
        conditions = parse_conditions(binding.arguments)
        targets = self._targets_by_conditions.get(conditions)
        if targets is None:
            targets = self._targets_by_conditions[conditions] = DestinationSet()
        targets.add(binding_id)

    def _unindex(self, binding_id: BindingId, binding: Binding) -> None:
        conditions = parse_conditions(binding.arguments)
        targets = self._targets_by_conditions[conditions]
        targets.discard(binding_id)
        if not targets:
            del self._targets_by_conditions[conditions]

    def route(self, routing_key: str, message: Message) -> list[Destination]:
        if not self._targets_by_conditions:
            return []
        headers = {key: comparable(value) for key, value in message.headers.items()}
        routed: list[Destination] = []
        for conditions, targets in self._targets_by_conditions.items():
            if conditions.matches(headers):
                routed.extend(targets.destinations)
        return routed
