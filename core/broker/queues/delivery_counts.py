"""How often each message was handed back, for `x-delivery-limit` and `x-delivery-count`.

Only messages that were requeued have an entry. Durable queues append every change to a
small log beside their segments (written through to the OS, so a crash of the process
loses nothing) and read it back on start; a count of 0 is a tombstone.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from lavin.storage import changes
from lavin.storage.changes import CHANGES

_ENTRY = struct.Struct("<QI")
FILE_NAME = "delivery_counts"


class DeliveryCounts:
    def __init__(self, directory: Path | None, queue_is_empty: bool) -> None:
        """`directory` is None for queues whose counts need not survive a restart."""
        self._counts: dict[int, int] = {}
        self._fd = -1
        self._path = Path()
        if directory is None:
            return
        path = self._path = directory / FILE_NAME
        if queue_is_empty:
            # Message ids may be handed out again once a store is empty: old counts must go.
            changes.remove_file(path, missing_ok=True)
        else:
            self._load(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sink = CHANGES.sink
        if sink is not None:
            sink.written(path, 0, b"")  # creates the file when it is new
        if self._counts:
            self._rewrite(path)

    def _load(self, path: Path) -> None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        usable = len(data) - len(data) % _ENTRY.size  # a torn last entry is ignored
        for message_id, count in _ENTRY.iter_unpack(data[:usable]):
            if count:
                self._counts[message_id] = count
            else:
                self._counts.pop(message_id, None)

    def _rewrite(self, path: Path) -> None:
        """Compact on start: only live counts are kept."""
        temporary = path.with_suffix(".tmp")
        data = b"".join(_ENTRY.pack(i, c) for i, c in self._counts.items())
        temporary.write_bytes(data)
        changes.install(temporary, path, data)
        os.close(self._fd)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)

    def get(self, message_id: int) -> int:
        return self._counts.get(message_id, 0)

    def increment(self, message_id: int) -> int:
        count = self._counts.get(message_id, 0) + 1
        self._counts[message_id] = count
        if self._fd >= 0:
            changes.append(self._fd, self._path, _ENTRY.pack(message_id, count))
        return count

    def forget(self, message_id: int) -> None:
        if self._counts.pop(message_id, None) is not None and self._fd >= 0:
            changes.append(self._fd, self._path, _ENTRY.pack(message_id, 0))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
