"""Group commit: one fsync round covers every write handed to the OS since the last one.

Writers mark their queue dirty; once per loop tick the dirty stores flush their buffers
and the fds that need it are fsynced in a worker thread. Waiters registered before a
flush are told when the fsync that covers their data is done.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

# A waiter is asked, at flush time, for the callback to run once the data is on disk;
# the callback gets True on success and False when the fsync failed.
SyncWaiter = Callable[[], Callable[[bool], None]]


class Flushable(Protocol):
    def flush_store(self) -> list[int]: ...


class GroupCommit:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._dirty: set[Flushable] = set()
        self._waiters: list[SyncWaiter] = []
        self._scheduled = False
        self._syncing = False
        self._pending_fds: set[int] = set()
        self._pending_callbacks: list[Callable[[bool], None]] = []

    def mark_dirty(self, store: Flushable) -> None:
        self._dirty.add(store)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)

    def wait_for_sync(self, waiter: SyncWaiter) -> None:
        """Call `waiter` at the next flush; its callback runs after the covering fsync."""
        self._waiters.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, set()
        for store in dirty:
            try:
                self._pending_fds.update(store.flush_store())
            except OSError:
                log.exception("could not write queue data")
        waiters, self._waiters = self._waiters, []
        self._pending_callbacks.extend(waiter() for waiter in waiters)
        self._start_sync()

    def _start_sync(self) -> None:
        if self._syncing or not (self._pending_fds or self._pending_callbacks):
            return
        fds, self._pending_fds = self._pending_fds, set()
        callbacks, self._pending_callbacks = self._pending_callbacks, []
        if not fds:
            for callback in callbacks:
                callback(True)
            return
        self._syncing = True
        future = self.loop.run_in_executor(None, _fsync_all, fds)
        future.add_done_callback(lambda f: self._synced(f, callbacks))

    def _synced(self, future: asyncio.Future[bool], callbacks: list[Callable[[bool], None]]) -> None:
        self._syncing = False
        ok = not future.cancelled() and future.exception() is None and future.result()
        for callback in callbacks:
            callback(ok)
        self._start_sync()

    async def drain(self) -> None:
        """Flush and fsync everything now (shutdown)."""
        self._flush()
        while self._syncing or self._pending_fds or self._pending_callbacks or self._dirty:
            if not self._syncing:
                self._flush()
            await asyncio.sleep(0.005)


def _fsync_all(fds: set[int]) -> bool:
    ok = True
    for fd in fds:
        try:
            os.fsync(fd)
        except OSError as exc:
            # A store closed while its fsync was queued has nothing left to lose.
            if exc.errno != 9:  # EBADF
                log.error("fsync failed: %s", exc)
                ok = False
    return ok
