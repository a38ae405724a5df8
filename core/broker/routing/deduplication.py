"""Message deduplication on an exchange, as LavinMQ (and RabbitMQ's community plugin) do it.

An exchange declared with `x-message-deduplication: true` remembers the value of each
message's deduplication header (`x-deduplication-header` names it; by default that name
itself) and routes a message whose value it remembers nowhere. It remembers the latest
`x-cache-size` values (default 128), each for `x-cache-ttl` ms (default: until pushed out),
or for the message's own `x-cache-ttl` header. Messages without the header always pass.
The memory is lost when the broker stops.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any

from lavin.api import Message, errors
from lavin.broker.queues.queue import STORED

ENABLED_ARGUMENT = "x-message-deduplication"
SIZE_ARGUMENT = "x-cache-size"
TTL_ARGUMENT = "x-cache-ttl"  # also a message header, overriding the exchange's
HEADER_ARGUMENT = "x-deduplication-header"
DEFAULT_SIZE = 128
DEFAULT_HEADER = "x-deduplication-header"

_HEADERS_FLAG = 0x20  # in the first byte of the property flags


def now_ms() -> int:
    return int(time.time() * 1000)


def _whole_number(arguments: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise errors.PreconditionFailed(f"invalid argument '{name}': expected an integer of at least {minimum}")
    return value


class MessageCache:
    """The deduplication values an exchange remembers, oldest first."""

    def __init__(self, size: int, ttl: int | None, header: str) -> None:
        self.size = size
        self.ttl = ttl
        self.header = header
        self._expiry: OrderedDict[Hashable, int | None] = OrderedDict()  # value -> ms, or None

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> MessageCache | None:
        """The cache an exchange's arguments ask for, or None; 406 for invalid ones."""
        enabled = arguments.get(ENABLED_ARGUMENT)
        if enabled is None or enabled is False:
            return None
        if enabled is not True:
            raise errors.PreconditionFailed(f"invalid argument '{ENABLED_ARGUMENT}': expected a boolean")
        header = arguments.get(HEADER_ARGUMENT, DEFAULT_HEADER)
        if not isinstance(header, str):
            raise errors.PreconditionFailed(f"invalid argument '{HEADER_ARGUMENT}': expected a string")
        size = _whole_number(arguments, SIZE_ARGUMENT, 1)
        return cls(DEFAULT_SIZE if size is None else size, _whole_number(arguments, TTL_ARGUMENT, 0), header)

    def value_of(self, message: Message) -> Hashable | None:
        """The message's deduplication value, or None when it has none."""
        properties = message.properties
        if len(properties) < 2 or not properties[0] & _HEADERS_FLAG:
            return None
        value = message.headers.get(self.header)
        if isinstance(value, bytearray | list | dict):
            return repr(value)  # unhashable types: their text tells them apart
        return value

    def is_duplicate(self, value: Hashable) -> bool:
        if value not in self._expiry:
            return False
        expiry = self._expiry[value]
        if expiry is not None and expiry <= now_ms():
            del self._expiry[value]
            return False
        return True

    def publish(self, message: Message) -> int:
        """Remember the message's value: the cache is stored into like a queue, so that only
        a message that is really published, not one merely routed to check, counts."""
        value = self.value_of(message)
        if value is not None:
            ttl = message.headers.get(TTL_ARGUMENT)
            if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
                ttl = self.ttl
            self._expiry.pop(value, None)
            self._expiry[value] = None if ttl is None else now_ms() + ttl
            while len(self._expiry) > self.size:
                self._expiry.popitem(last=False)
        return STORED
