"""The messages a store appended most recently, kept as objects so that a consumer close
behind the publisher gets them without reading and decoding their records again.

The records are written all the same: the window is a cache, and dropping any entry at any
time only costs a read. It is bounded per store (entries and bytes) and across all stores
(bytes), so idle queues cannot pin much memory.
"""

from __future__ import annotations

from typing import Final

from lavin.api.message import Message

# Sized to cover the backlog that publisher flow control allows (lavin.broker.queues.queue.FLOW_HIGH
# messages, or FLOW_HIGH_BYTES of bodies plus the message that went past it: two messages of
# 16 MiB).
WINDOW_MESSAGES: Final = 16384
WINDOW_BYTES: Final = 40 << 20  # per store: record bytes plus ENTRY_OVERHEAD per message
ALL_WINDOWS_BYTES: Final = 64 << 20  # the same, across every store of the process
ENTRY_OVERHEAD: Final = 256  # the message object, its strings and the entry's list slots
# An entry for the message the last entry of any window was made for: one message routed to
# several queues (fan-out) is held once, so only the first entry pays for it.
SHARED_ENTRY_OVERHEAD: Final = 96


class _Budget:
    __slots__ = ("last_message", "used")

    def __init__(self) -> None:
        self.used = 0
        self.last_message: Message | None = None  # of the last entry made, in any window


_budget: Final = _Budget()
# Shared by every window that holds nothing yet, and never appended to: an empty list is 56
# bytes, and most of a broker's queues (100,000 of them, say) may never hold a message.
_NO_SIZES: Final[list[int]] = []
_NO_MESSAGES: Final[list[Message | None]] = []
_NO_SHARED: Final[list[bool]] = []
_COMPACT_AT: Final = 1024  # taken entries kept at the lists' front before they are cut off


def window_bytes() -> int:
    """What every store's window holds, in the bytes the budget counts."""
    return _budget.used


class DecodedWindow:
    """Recent appends in id order, as three parallel lists from `_head` on: the record's
    size, the message (None for a gap: records appended but not remembered) and whether
    the entry shares its message with the entry made before it, in any window.

    Ids are not stored: each entry's id is the one before it plus that one's size, from
    `_first_id`. A window holds an entry per message per queue, so an entry is three list
    slots; a tuple and a boxed id per entry cost a fan-out to 100 queues a tenth of its
    time in allocation and garbage collection."""

    __slots__ = ("_bytes", "_first_id", "_head", "_messages", "_next_id", "_shared", "_sizes")

    def __init__(self) -> None:
        self._sizes = _NO_SIZES
        self._messages = _NO_MESSAGES
        self._shared = _NO_SHARED
        self._head = 0  # the first entry not taken or dropped
        self._first_id = 0  # id of the entry at `_head`
        self._next_id = 0  # id the next entry would have without a gap
        self._bytes = 0

    def remember(self, message_id: int, size: int, message: Message) -> None:
        """Called for each append, in order; skipped while the process-wide budget is spent."""
        shared = message is _budget.last_message
        cost = SHARED_ENTRY_OVERHEAD if shared else size + ENTRY_OVERHEAD
        if _budget.used + cost > ALL_WINDOWS_BYTES:
            return
        _budget.last_message = message
        sizes = self._sizes
        if sizes is _NO_SIZES:
            sizes = self._sizes = []
            self._messages = []
            self._shared = []
        if self._head == len(sizes):
            self._first_id = self._next_id = message_id
        elif message_id != self._next_id:  # records in between were not remembered
            sizes.append(message_id - self._next_id)
            self._messages.append(None)
            self._shared.append(False)
        sizes.append(size)
        self._messages.append(message)
        self._shared.append(shared)
        self._next_id = message_id + size
        self._bytes += cost
        _budget.used += cost
        while len(sizes) - self._head > WINDOW_MESSAGES or self._bytes > WINDOW_BYTES:
            self._drop_first()

    def take(self, message_id: int) -> tuple[int, Message] | None:
        """(record size, message) of `message_id` when it is held; entries before it are
        dropped, since a store reads in id order."""
        sizes = self._sizes
        while self._head < len(sizes) and self._first_id <= message_id:
            entry_id = self._first_id
            size = sizes[self._head]
            message = self._messages[self._head]
            self._drop_first()
            if entry_id == message_id and message is not None:
                return size, message
        return None

    def forget_last(self, message_id: int) -> None:
        """The last append was consumed without being read (delivered straight away)."""
        sizes, messages = self._sizes, self._messages
        if self._head == len(sizes) or messages[-1] is None or self._next_id - sizes[-1] != message_id:
            return
        self._release(sizes.pop(), messages.pop(), self._shared.pop())
        self._next_id = message_id
        if self._head < len(sizes) and messages[len(messages) - 1] is None:  # a gap is only kept before an entry
            self._next_id -= sizes.pop()
            messages.pop()
            self._shared.pop()

    def held(self, first_id: int, removed: frozenset[int]) -> tuple[int, int]:
        """(messages, body bytes) held from `first_id` on, less the `removed` ids: entries
        before it were taken, or passed over, and are only dropped by the next `take`."""
        count = body_bytes = 0
        message_id = self._first_id
        messages = self._messages
        for index in range(self._head, len(self._sizes)):
            message = messages[index]
            if message is not None and message_id >= first_id and message_id not in removed:
                count += 1
                body_bytes += len(message.body)
            message_id += self._sizes[index]
        return count, body_bytes

    def clear(self) -> None:
        self._sizes, self._messages, self._shared = _NO_SIZES, _NO_MESSAGES, _NO_SHARED
        self._head = 0
        _budget.used -= self._bytes  # `_bytes` is the sum of the held entries' costs
        self._bytes = 0

    def _drop_first(self) -> None:
        """Drop the entry at `_head`; the taken ones are cut off the lists now and then."""
        head = self._head
        sizes, messages = self._sizes, self._messages
        size = sizes[head]
        self._first_id += size
        self._release(size, messages[head], self._shared[head])
        messages[head] = None  # the message may be large: not kept until the lists are cut
        head += 1
        if head == len(sizes):
            del sizes[:], messages[:], self._shared[:]
            head = 0
        elif head >= _COMPACT_AT and head * 2 >= len(sizes):
            del sizes[:head], messages[:head], self._shared[:head]
            head = 0
        self._head = head

    def _release(self, size: int, message: Message | None, shared: bool) -> None:
        if message is None:
            return
        cost = SHARED_ENTRY_OVERHEAD if shared else size + ENTRY_OVERHEAD
        self._bytes -= cost
        _budget.used -= cost
