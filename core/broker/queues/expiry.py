"""Message TTL: when a message expires, and an index of per-message expirations.

Queue-level TTL needs no index: in a FIFO queue the head is always the oldest message, so
a timer on the head is enough. Per-message `expiration` can expire a message anywhere in
the queue, so those messages (and only those) get an entry here.
"""

from __future__ import annotations

from heapq import heappop, heappush

from lavin.api import Message, errors

EXPIRATION_FLAG = 0x01  # 0x0100 in the property flag word: its high byte


def message_expiration(message: Message) -> int | None:
    """The `expiration` property in ms, None when absent; 406 when it is not a number."""
    properties = message.properties
    if len(properties) < 2 or not properties[0] & EXPIRATION_FLAG:
        return None
    try:
        value = message.props.get("expiration")
    except ValueError:
        return None  # malformed properties are refused elsewhere
    if value is None:
        return None
    if value.isascii() and value.isdigit():  # int() would also take other scripts' digits
        return int(value)
    problem = _expiration_problem(value)
    if problem is None:
        return int(value)
    raise errors.PreconditionFailed(f"invalid expiration '{value}': {problem}")


def _expiration_problem(value: str) -> str | None:
    """RabbitMQ's reason for refusing an expiration (it parses a leading integer)."""
    sign = 1 if value.startswith(("+", "-")) else 0
    digits = len(value) - len(value[sign:].lstrip("0123456789"))
    if digits == sign:
        return "no_integer"
    if digits < len(value):
        return f'{{leftover_string,"{value[digits:]}"}}'
    return f"{{value_negative,{int(value)}}}" if int(value) < 0 else None


def expires_at(message: Message, queue_ttl: int | None) -> int | None:
    """Wall-clock ms at which the message expires, or None."""
    expiration = message_expiration(message)
    if expiration is None:
        return None if queue_ttl is None else message.timestamp + queue_ttl
    if queue_ttl is not None:
        expiration = min(expiration, queue_ttl)
    return message.timestamp + expiration


class ExpiryIndex:
    """Messages with a per-message expiration, ready or delivered-but-unacked."""

    def __init__(self) -> None:
        self._ready: dict[int, int] = {}
        self._taken: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []  # (expires at, id) of ready ones; stale allowed

    def __bool__(self) -> bool:
        return bool(self._ready or self._taken)

    def add(self, message_id: int, due: int, *, taken: bool) -> None:
        if taken:
            self._taken[message_id] = due
        else:
            self._ready[message_id] = due
            heappush(self._heap, (due, message_id))

    def taken(self, message_id: int) -> None:
        due = self._ready.pop(message_id, None)
        if due is not None:
            self._taken[message_id] = due

    def requeued(self, message_id: int) -> None:
        due = self._taken.pop(message_id, None)
        if due is not None:
            self._ready[message_id] = due
            heappush(self._heap, (due, message_id))

    def acked(self, message_id: int) -> None:
        self._taken.pop(message_id, None)
        self._ready.pop(message_id, None)

    def next_due(self) -> int | None:
        heap = self._heap
        while heap and self._ready.get(heap[0][1]) != heap[0][0]:
            heappop(heap)  # taken, acked or re-added since: stale
        return heap[0][0] if heap else None

    def pop_due(self, now: int) -> list[int]:
        """Ready ids whose time has come; they leave the index."""
        due_ids = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, message_id = heappop(heap)
            if self._ready.get(message_id) == due:
                del self._ready[message_id]
                due_ids.append(message_id)
        return due_ids
