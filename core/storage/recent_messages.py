"""The last messages pushed to a store, kept decoded so that taking them costs no read.

A queue that keeps up with its publishers takes messages moments after they were pushed;
this bounded window (by count and by body bytes) lets it skip re-reading and decoding
them. It is a cache: anything evicted is simply read from the segment again.
"""

from __future__ import annotations

from lavin.message import Message

MAX_MESSAGES = 16384
MAX_BODY_BYTES = 4 << 20


class RecentMessages:
    __slots__ = ("_entries", "_body_bytes")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Message, int]] = {}  # id -> (message, record size)
        self._body_bytes = 0

    def add(self, message_id: int, message: Message, record_size: int) -> None:
        entries = self._entries
        entries[message_id] = (message, record_size)
        self._body_bytes += len(message.body)
        while len(entries) > MAX_MESSAGES or self._body_bytes > MAX_BODY_BYTES:
            oldest = next(iter(entries))  # dicts keep insertion order: oldest first
            self._body_bytes -= len(entries.pop(oldest)[0].body)

    def pop(self, message_id: int) -> tuple[Message, int] | None:
        entry = self._entries.pop(message_id, None)
        if entry is not None:
            self._body_bytes -= len(entry[0].body)
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self._body_bytes = 0
