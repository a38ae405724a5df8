"""The consistent-hash exchange: each message goes to exactly one destination, picked by a
hash of its routing key (or of a header or property), in proportion to binding weights.

As in RabbitMQ, the binding key is the weight: a destination bound with "2" owns twice
the buckets of one bound with "1". The value is hashed with MurmurHash3 to a 64-bit key and
placed in a bucket by jump consistent hashing. Unlike RabbitMQ, buckets are ordered by the
destinations' names, not by binding order, so the same bindings route the same way after a
restart. Names compare with their digit runs as numbers ("w-2" < "w-10"), so adding "w-10"
to "w-0" .. "w-9" appends its buckets at the end, which moves only about 1/n of the keys.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate

import mmh3
from lavin.api import (
    Arguments,
    Binding,
    BindingId,
    BindingTable,
    Destination,
    Message,
    PreconditionFailed,
    destination_identity,
)

from .jump_hash import jump_bucket

HASHABLE_PROPERTIES = ("message_id", "correlation_id", "timestamp")
TEXT_ENCODING = "utf-8"
TEXT_ERRORS = "surrogateescape"

_WEIGHT = re.compile(r"[+-]?[0-9]+")
_DIGIT_RUNS = re.compile(r"([0-9]+)")

# (routing key, message) -> the bytes to hash
ValueReader = Callable[[str, Message], bytes]
OrderKey = tuple[tuple[str | int, ...], str, str]


def parse_weight(binding_key: str) -> int:
    if not _WEIGHT.fullmatch(binding_key):
        raise PreconditionFailed(f'The binding key must be an integer: <<"{binding_key}">>')
    weight = int(binding_key)
    if weight < 1:
        raise PreconditionFailed("The binding key must be greater than 0")
    return weight


def bucket_order(destination: Destination) -> OrderKey:
    """Sorts destinations by name, digit runs compared as numbers, then kind."""
    name, kind = destination_identity(destination)
    # split() alternates text and digit runs, so equal positions hold equal types.
    parts = tuple(int(part) if index % 2 else part for index, part in enumerate(_DIGIT_RUNS.split(name)))
    return parts, name, kind


def as_bytes(value: object) -> bytes:
    """A header or property value as hashed; a missing one hashes like the empty string."""
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    text = value if isinstance(value, str) else str(value)
    return text.encode(TEXT_ENCODING, TEXT_ERRORS)


def _text_argument(arguments: Arguments, name: str) -> str | None:
    value = arguments.get(name)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode(TEXT_ENCODING, TEXT_ERRORS)
    raise PreconditionFailed(f"Invalid argument, '{name}' must be a string")


def value_reader(arguments: Arguments) -> ValueReader:
    """What a message is hashed on: `hash-header`, `hash-property`, else its routing key.

    LavinMQ's `x-hash-on` names a header too, when `hash-header` is not given.
    """
    header = _text_argument(arguments, "hash-header")
    if header is None:
        header = _text_argument(arguments, "x-hash-on")
    prop = _text_argument(arguments, "hash-property")
    if header is not None and prop is not None:
        raise PreconditionFailed("hash-header and hash-property are mutually exclusive")
    if prop is not None:
        if prop not in HASHABLE_PROPERTIES:
            raise PreconditionFailed(f"Unsupported property: {prop}")
        return lambda _routing_key, message: as_bytes(message.props.get(prop))
    if header is not None:
        return lambda _routing_key, message: as_bytes(message.headers.get(header))
    return lambda routing_key, _message: routing_key.encode(TEXT_ENCODING, TEXT_ERRORS)


class ConsistentHashExchange(BindingTable):
    name = "x-consistent-hash"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._hashed_value = value_reader(arguments)
        # A destination's weight is the sum of its bindings' weights.
        self._weights: dict[Destination, int] = {}
        self._order_keys: dict[Destination, OrderKey] = {}
        # Rebuilt on the next route after a change, so binding many in a row stays linear.
        self._stale = False
        self._destinations: tuple[Destination, ...] = ()
        self._bucket_ends: list[int] = []  # destination i owns buckets [ends[i-1], ends[i])

    def _index(self, binding_id: BindingId, binding: Binding) -> None:
        weight = parse_weight(binding.routing_key)
        destination = binding.destination
        if destination not in self._weights:
            self._weights[destination] = 0
            self._order_keys[destination] = bucket_order(destination)
        self._weights[destination] += weight
        self._stale = True

    def _unindex(self, binding_id: BindingId, binding: Binding) -> None:
        destination = binding.destination
        remaining = self._weights[destination] - parse_weight(binding.routing_key)
        if remaining:
            self._weights[destination] = remaining
        else:
            del self._weights[destination], self._order_keys[destination]
        self._stale = True

    def _rebuild(self) -> None:
        self._destinations = tuple(sorted(self._weights, key=self._order_keys.__getitem__))
        self._bucket_ends = list(accumulate(self._weights[d] for d in self._destinations))
        self._stale = False

    def route(self, routing_key: str, message: Message) -> tuple[Destination, ...]:
        if self._stale:
            self._rebuild()
        destinations = self._destinations
        if len(destinations) < 2:
            return destinations
        key = mmh3.hash64(self._hashed_value(routing_key, message), signed=False)[0]
        bucket = jump_bucket(key, self._bucket_ends[-1])
        return (destinations[bisect_right(self._bucket_ends, bucket)],)
