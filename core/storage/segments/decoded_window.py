"""The messages a store appended most recently, kept as objects so that a consumer close
behind the publisher gets them without reading and decoding their records again.

The records are written all the same: the window is a cache, and dropping any entry at any
time only costs a read. It is bounded per store (entries and bytes) and across all stores
(bytes), so idle queues cannot pin much memory.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from lavin.api.message import Message

# Sized to cover the backlog that publisher flow control allows (lavin.broker.queues.queue.FLOW_HIGH
# messages, or FLOW_HIGH_BYTES of bodies plus the message that went past it: two messages of
# 16 MiB).
WINDOW_MESSAGES: Final = 16384
WINDOW_BYTES: Final = 40 << 20  # per store: record bytes plus ENTRY_OVERHEAD per message
ALL_WINDOWS_BYTES: Final = 64 << 20  # the same, across every store of the process
ENTRY_OVERHEAD: Final = 256  # the message object, its strings and the entry tuple
# An entry for the message the last entry of any window was made for: one message routed to
# several queues (fan-out) is held once, so only the first entry pays for it.
SHARED_ENTRY_OVERHEAD: Final = 96


class _Budget:
    __slots__ = ("last_message", "used")

    def __init__(self) -> None:
        self.used = 0
        self.last_message: Message | None = None  # of the last entry made, in any window


_budget: Final = _Budget()
_NO_ENTRIES: Final[deque[tuple[int, int, Message, int]]] = deque(maxlen=0)  # shared, and never appended to


def window_bytes() -> int:
    """What every store's window holds, in the bytes the budget counts."""
    return _budget.used


class DecodedWindow:
    """(id, record size, message, cost) of recent appends, in id order."""

    __slots__ = ("_bytes", "_entries")

    def __init__(self) -> None:
        # Made at the first append: an empty deque is 760 bytes, and most of a broker's
        # queues (100,000 of them, say) may never hold a message.
        self._entries: deque[tuple[int, int, Message, int]] = _NO_ENTRIES
        self._bytes = 0

    def remember(self, message_id: int, size: int, message: Message) -> None:
        """Called for each append, in order; skipped while the process-wide budget is spent."""
        cost = SHARED_ENTRY_OVERHEAD if message is _budget.last_message else size + ENTRY_OVERHEAD
        if _budget.used + cost > ALL_WINDOWS_BYTES:
            return
        _budget.last_message = message
        entries = self._entries
        if entries is _NO_ENTRIES:
            entries = self._entries = deque()
        entries.append((message_id, size, message, cost))
        self._bytes += cost
        _budget.used += cost
        while len(entries) > WINDOW_MESSAGES or self._bytes > WINDOW_BYTES:
            self._release(entries.popleft()[3])

    def take(self, message_id: int) -> tuple[int, Message] | None:
        """(record size, message) of `message_id` when it is held; entries before it are
        dropped, since a store reads in id order."""
        entries = self._entries
        while entries:
            entry = entries[0]
            if entry[0] > message_id:
                return None
            entries.popleft()
            self._release(entry[3])
            if entry[0] == message_id:
                return entry[1], entry[2]
        return None

    def forget_last(self, message_id: int) -> None:
        """The last append was consumed without being read (delivered straight away)."""
        entries = self._entries
        if entries and entries[-1][0] == message_id:
            self._release(entries.pop()[3])

    def held(self, first_id: int, removed: frozenset[int]) -> tuple[int, int]:
        """(messages, body bytes) held from `first_id` on, less the `removed` ids: entries
        before it were taken, or passed over, and are only dropped by the next `take`."""
        count = body_bytes = 0
        for message_id, _, message, _ in self._entries:
            if message_id >= first_id and message_id not in removed:
                count += 1
                body_bytes += len(message.body)
        return count, body_bytes

    def clear(self) -> None:
        self._entries = _NO_ENTRIES
        _budget.used -= self._bytes
        self._bytes = 0

    def _release(self, cost: int) -> None:
        self._bytes -= cost
        _budget.used -= cost
