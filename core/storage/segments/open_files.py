"""The file descriptors of segment files, ack files and queue directories: a process-wide
budget spent on the files used most recently.

A queue holds no descriptor while it is idle. A store opens its files when it reads or
writes them and tells the pool (`opened`); past the budget the pool takes the descriptors
of the least recently used entries (`PooledFiles.take_fds`), and their stores reopen them
on their next use. The budget is an eighth of RLIMIT_NOFILE (an entry holds at most two
descriptors), so that however many queues exist, most descriptors stay for sockets.

A store's `flush` returns descriptors to fsync. Nothing is evicted while it runs
(`hold`), and the core pins what it returned until its worker thread has synced them
(`pin`, `unpin`): a descriptor the pool takes meanwhile is closed only then, so that its
number is not reused for another file under the fsync.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Final, Protocol

from lavin.storage.disk import open_directory

MIN_BUDGET: Final = 16


class PooledFiles(Protocol):
    """A segment (its data file and ack file) or a directory whose descriptors the pool may take."""

    def take_fds(self) -> list[int]:
        """The descriptors it holds, forgotten: it opens its files again when next used."""
        ...


_NONE_SPARED: Final[frozenset[PooledFiles]] = frozenset()


def default_budget() -> int:
    """Entries the pool keeps open: an eighth of the open-file limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_BUDGET, soft // 8)


class OpenFiles:
    def __init__(self, budget: int = 0) -> None:
        self.budget = budget  # entries; 0: default_budget() at the first use, after start-up raised the limit
        self._entries: dict[PooledFiles, None] = {}  # least recently used first
        self._newest: PooledFiles | None = None  # the last entry, which using again moves nowhere
        self._holds = 0
        self._held: set[PooledFiles] = set()  # used while held
        self._pins: dict[int, int] = {}  # fd -> how many fsyncs wait for it
        self._closing: set[int] = set()  # taken while pinned

    def __len__(self) -> int:
        return len(self._entries)

    def capacity(self) -> int:
        if not self.budget:
            self.budget = default_budget()
        return self.budget

    def opened(self, files: PooledFiles) -> None:
        """`files` opened a descriptor: it is now the most recently used entry, and the
        least recently used others give theirs back while the pool is over budget."""
        self._touch(files)
        if not self._holds:
            self._make_room(_NONE_SPARED)

    def used(self, files: PooledFiles) -> None:
        """`files` was used again: the last to give its descriptors back."""
        if files is not self._newest and files in self._entries:
            self._touch(files)

    def release(self, files: PooledFiles) -> None:
        """Close the descriptors of `files` (evicted, its file deleted, or its store closes);
        a pinned one once it is unpinned."""
        self._entries.pop(files, None)
        if files is self._newest:
            self._newest = None
        for fd in files.take_fds():
            if fd in self._pins:
                self._closing.add(fd)
            else:
                os.close(fd)

    def hold(self) -> None:
        """Evict nothing until `unhold`, which makes room sparing the entries used
        meanwhile: the caller is about to use their fds (to fsync them, or to pin them)."""
        self._holds += 1

    def unhold(self) -> None:
        self._holds -= 1
        if not self._holds and self._held:
            held, self._held = self._held, set()
            self._make_room(held)

    def pin(self, fds: Iterable[int]) -> None:
        """An fsync of each of `fds` is on its way: keep them open until `unpin`."""
        pins = self._pins
        for fd in fds:
            pins[fd] = pins.get(fd, 0) + 1

    def unpin(self, fds: Iterable[int]) -> None:
        """The fsyncs are done: close what was taken meanwhile, and what a flush kept over budget."""
        pins = self._pins
        for fd in fds:
            count = pins.pop(fd) - 1
            if count:
                pins[fd] = count
            elif fd in self._closing:
                self._closing.discard(fd)
                os.close(fd)
        if not self._holds:
            self._make_room(_NONE_SPARED)

    def _touch(self, files: PooledFiles) -> None:
        entries = self._entries
        entries.pop(files, None)
        entries[files] = None
        self._newest = files
        if self._holds:
            self._held.add(files)

    def _make_room(self, spared: AbstractSet[PooledFiles]) -> None:
        """Evict the least recently used entries down to the budget; the spared ones, the
        most recently used, stay even over it."""
        entries = self._entries
        budget = self.capacity()
        while len(entries) > budget:
            victim = next(iter(entries))
            if victim in spared:
                break
            self.release(victim)


# One per process: the open-file limit is the process's.
OPEN_FILES: Final = OpenFiles()


class PooledDirectory:
    """A directory's descriptor, for the fsync that makes a file created in it durable;
    opened when needed and kept while the pool has room."""

    __slots__ = ("fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def open(self) -> int:
        if self.fd < 0:
            self.fd = open_directory(self.path)
            OPEN_FILES.opened(self)
        else:
            OPEN_FILES.used(self)
        return self.fd

    def take_fds(self) -> list[int]:
        fd, self.fd = self.fd, -1
        return [fd] if fd >= 0 else []

    def close(self) -> None:
        OPEN_FILES.release(self)
