"""The leader's side of replication: every change its stores make under the data dir,
encoded once as frames and handed to each follower, and the stream's position (bytes)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Final, Protocol

from lavin.clustering import wire
from lavin.storage.changes import StrPath
from lavin.storage.data_dir_index import relative_path

TIME_SAMPLE_INTERVAL: Final = 0.01  # seconds between samples of (position, time), for lag in seconds
MAX_TIME_SAMPLES: Final = 100_000


class StreamReader(Protocol):
    """A follower, as the stream sees it."""

    def send_change(self, data: bytes) -> None: ...


class ChangeStream:
    """A `lavin.storage.changes.ChangeSink`: relative paths, frames, fan-out."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.root = root
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop: changes from other threads are handed over
        self.position = 0  # bytes of change frames since this node became leader
        self.readers: set[StreamReader] = set()
        # Buckets of changes: (position after the bucket's last change, when its first was made).
        self._times: deque[tuple[int, float]] = deque()

    def written(self, path: StrPath, offset: int, data: bytes) -> None:
        relative = relative_path(self.root, path)
        if relative is not None:
            self._emit(wire.write_frames(relative, offset, data))

    def truncated(self, path: StrPath, size: int) -> None:
        relative = relative_path(self.root, path)
        if relative is not None:
            self._emit((wire.truncate_frame(relative, size),))

    def replaced(self, path: StrPath, data: bytes) -> None:
        relative = relative_path(self.root, path)
        if relative is not None:
            self._emit((wire.replace_frame(relative, data),))

    def removed(self, path: StrPath) -> None:
        relative = relative_path(self.root, path)
        if relative is not None:
            self._emit((wire.remove_frame(relative),))

    def renamed(self, source: StrPath, target: StrPath) -> None:
        relative_source = relative_path(self.root, source)
        relative_target = relative_path(self.root, target)
        if relative_source is None:
            return
        if relative_target is None:  # moved out of what is replicated (set aside to delete): gone
            self._emit((wire.remove_frame(relative_source),))
        else:
            self._emit((wire.rename_frame(relative_source, relative_target),))

    def _emit(self, frames: Iterable[bytes]) -> None:
        if threading.get_ident() != self._loop_thread:  # a store's work done in a worker thread
            self._loop.call_soon_threadsafe(self._emit, list(frames))
            return
        for data in frames:
            self.position += len(data)
            for reader in self.readers:
                reader.send_change(data)
        now = time.monotonic()
        times = self._times
        if times and now - times[-1][1] < TIME_SAMPLE_INTERVAL:
            times[-1] = (self.position, times[-1][1])
        else:
            times.append((self.position, now))
            if len(times) > MAX_TIME_SAMPLES:
                times.popleft()

    def age(self, acknowledged: int) -> float:
        """Seconds since the oldest change past `acknowledged` was made (0: none); at most
        TIME_SAMPLE_INTERVAL more than that, never less."""
        for position, made in self._times:
            if position > acknowledged:
                return max(0.0, time.monotonic() - made)
        return 0.0

    def forget_before(self, acknowledged: int) -> None:
        """Every reader has acknowledged this far: older samples are not needed."""
        times = self._times
        while len(times) > 1 and times[1][0] <= acknowledged:
            times.popleft()
