"""Group commit: one fsync round covers every write handed to the OS since the last one.

Writers mark their store dirty; once per loop tick the dirty stores flush their buffers
and the fds they return are fsynced in a worker thread. Waiters registered before a flush
are told, once the fsync that covers their data is done, whether their data was written.

A store whose flush fails (OSError: a full disk, an I/O error, a file size limit) keeps
what it could not write and is tried again at most every RETRY_INTERVAL seconds; until it
writes again, nothing that went into it is confirmed. While some store fails, the group
commit traces which stores each publish marked dirty, so that only the publishes that went
into a failing store are nacked. The round in which a store first fails was not traced:
every publish waiting for that round is nacked.

In a cluster the leader's stores report their writes to the followers as they make them;
a round is settled only once its fsync is done and every in-sync follower has written
what was reported up to its flush (`replication`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from lavin.storage.segments.open_files import OPEN_FILES

log = logging.getLogger(__name__)

RETRY_INTERVAL: Final = 1.0  # seconds between attempts to write a failing store again

# A waiter is asked, at flush time, for the callback to run once the data is on disk; the
# callback gets True when every fd handed over in that round was fsynced. A store whose
# own write failed accounts for it itself (a stream's `written_offset` does not move).
SyncWaiter = Callable[[], Callable[[bool], None]]

# A publisher's callback gets the numbers (as passed to `trace_publish`) of its publishes
# that went into a store that could not write them, or None when it cannot be told which:
# then none of the publishes it waited for may be confirmed.
PublishesSynced = Callable[[Sequence[int] | None], None]


class ReplicationBarrier(Protocol):
    """The followers' side of a round: where the change stream stood, and a call once
    every in-sync follower has written up to there."""

    @property
    def position(self) -> int: ...

    def when_replicated(self, position: int, callback: Callable[[], None]) -> None: ...


class Flushable(Protocol):
    def flush_store(self) -> list[int]: ...


class SyncedPublisher(Protocol):
    """A channel's publisher confirms or its transaction."""

    def prepare_sync(self) -> PublishesSynced:
        """Called at flush time: the callback for the publishes made so far."""
        ...


# A store marked dirty, or a publish after the stores it marked.
TraceEntry = Flushable | tuple[SyncedPublisher, int]


class _Round:
    """One flush: the fds it handed over, the stores that failed, who waits for its fsync."""

    __slots__ = ("failed", "fds", "publishers", "replicated_at", "synced", "trace", "waiters")

    def __init__(
        self,
        failed: set[Flushable],
        fds: dict[int, Flushable],
        synced: bool,
        waiters: list[Callable[[bool], None]],
        publishers: list[tuple[SyncedPublisher, PublishesSynced]],
        trace: list[TraceEntry] | None,
        replicated_at: int,
    ) -> None:
        self.replicated_at = replicated_at  # the change stream's position at the flush (0: no cluster)
        self.failed = failed
        self.fds = fds  # pinned in OPEN_FILES until settled, each with the store that returned it
        self.synced = synced  # False when an fsync made during the flush failed
        self.waiters = waiters
        self.publishers = publishers
        self.trace = trace  # None: this round's publishes were not traced

    def settle(self, failed_fds: set[int]) -> None:
        """The fsync is done, with `failed_fds` failing: tell everyone who waited."""
        if self.fds:
            OPEN_FILES.unpin(self.fds)
        synced = self.synced and failed_fds.isdisjoint(self.fds)
        for callback in self.waiters:
            callback(synced)
        failed = self.failed | {self.fds[fd] for fd in failed_fds.intersection(self.fds)}
        if not failed:
            for _, done in self.publishers:
                done(())
        elif self.trace is None:
            for _, done in self.publishers:
                done(None)
        else:
            unwritten = _publishes_into(self.trace, failed)
            for publisher, done in self.publishers:
                done(unwritten.get(publisher, ()))


class GroupCommit:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.tracing = False  # some store's last write failed: `trace_publish` is wanted
        self._dirty: set[Flushable] = set()
        self._trace: list[TraceEntry] = []  # since the last flush, while tracing
        self._waiters: list[SyncWaiter] = []
        self._publishers: list[SyncedPublisher] = []
        self._failing: dict[Flushable, float] = {}  # store -> loop time of its next attempt
        self._retry: asyncio.TimerHandle | None = None
        self._scheduled = False
        self._syncing = False
        self._rounds: list[_Round] = []  # flushed, waiting for the worker thread
        self.replication: ReplicationBarrier | None = None  # set on a cluster's leader

    def mark_dirty(self, store: Flushable) -> None:
        self._dirty.add(store)
        if self.tracing:
            self._trace.append(store)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)

    def wait_for_sync(self, waiter: SyncWaiter) -> None:
        """Call `waiter` at the next flush; its callback runs after the covering fsync."""
        self._waiters.append(waiter)
        self._schedule()

    def wait_for_publishes(self, publisher: SyncedPublisher) -> None:
        """Call `publisher.prepare_sync` at the next flush; its callback runs after the covering fsync."""
        self._publishers.append(publisher)
        self._schedule()

    def trace_publish(self, publisher: SyncedPublisher, number: int) -> None:
        """While `tracing`: publish `number` of `publisher` went into the stores marked
        dirty since the previous traced publish."""
        self._trace.append((publisher, number))

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        now = self.loop.time() if self._failing else 0.0
        dirty, self._dirty = self._dirty, set()
        fds: dict[int, Flushable] = {}
        failed: set[Flushable] = set()
        synced = True
        for store in dirty:
            retry_at = self._failing.get(store)
            if retry_at is not None and now < retry_at:
                failed.add(store)  # not tried again yet: what went into it waits in memory
                continue
            written = self._flush_store(store, fds)
            if written is None:
                failed.add(store)
                continue
            for fd in written:
                fds[fd] = store
            if retry_at is not None:
                del self._failing[store]
                log.info("%r writes again", store)
            if len(fds) >= OPEN_FILES.capacity():
                # Too many files to keep them all open until the worker thread syncs them
                # (thousands of queues written in one tick): sync these now.
                failed_fds = _fsync_all(set(fds))
                failed.update(fds[fd] for fd in failed_fds)
                synced = synced and not failed_fds
                OPEN_FILES.unpin(fds)
                fds = {}
        trace: list[TraceEntry] | None = None
        if self.tracing:
            trace, self._trace = self._trace, []
        self.tracing = bool(self._failing)
        if not (fds or failed or self._waiters or self._publishers):
            return  # nothing written that needs an fsync, and nobody waits for one
        waiters, self._waiters = self._waiters, []
        publishers, self._publishers = self._publishers, []
        self._rounds.append(
            _Round(
                failed,
                fds,
                synced,
                [waiter() for waiter in waiters],
                [(publisher, publisher.prepare_sync()) for publisher in publishers],
                trace,
                0 if self.replication is None else self.replication.position,
            )
        )
        self._start_sync()

    def _flush_store(self, store: Flushable, collected: dict[int, Flushable]) -> set[int] | None:
        """The fds `store` returns that this round has not collected yet, pinned; None
        when its write failed."""
        OPEN_FILES.hold()  # what the store returns stays open until pinned
        try:
            returned = store.flush_store()
            written = set(returned).difference(collected) if returned else set()
            if written:
                OPEN_FILES.pin(written)
        except OSError as exc:
            self._failed(store, exc)
            return None
        finally:
            OPEN_FILES.unhold()
        return written

    def _failed(self, store: Flushable, exc: OSError) -> None:
        if store not in self._failing:
            log.error("could not write %r: %s; what goes into it is nacked until it writes again", store, exc)
        self._failing[store] = self.loop.time() + RETRY_INTERVAL
        if self._retry is None:
            self._retry = self.loop.call_later(RETRY_INTERVAL, self._retry_failing)

    def _retry_failing(self) -> None:
        self._retry = None
        for store in self._failing:
            self._failing[store] = 0.0
            self._dirty.add(store)
        if self._failing:
            self._schedule()

    def _start_sync(self) -> None:
        if self._syncing or not self._rounds:
            return
        rounds, self._rounds = self._rounds, []
        fds = {fd for round_ in rounds for fd in round_.fds}
        if not fds:
            self._settle(rounds, set())
            return
        self._syncing = True
        future = self.loop.run_in_executor(None, _fsync_all, fds)
        future.add_done_callback(lambda f: self._synced(f, rounds, fds))

    def _synced(self, future: asyncio.Future[set[int]], rounds: list[_Round], fds: set[int]) -> None:
        self._syncing = False
        failed_fds = fds if future.cancelled() or future.exception() is not None else future.result()
        self._settle(rounds, failed_fds)
        self._start_sync()

    def _settle(self, rounds: list[_Round], failed_fds: set[int]) -> None:
        replication = self.replication
        if replication is not None:
            position = max(round_.replicated_at for round_ in rounds)
            replication.when_replicated(position, lambda: self._settle_now(rounds, failed_fds))
            return
        self._settle_now(rounds, failed_fds)

    @staticmethod
    def _settle_now(rounds: list[_Round], failed_fds: set[int]) -> None:
        for round_ in rounds:
            round_.settle(failed_fds)

    async def drain(self) -> None:
        """Flush and fsync everything now (shutdown). A failing store is not waited for:
        closing it tries once more."""
        self._flush()
        while self._syncing or self._rounds or self._dirty:
            if not self._syncing:
                self._flush()
            await asyncio.sleep(0.005)
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None


def _publishes_into(trace: list[TraceEntry], failed: set[Flushable]) -> dict[SyncedPublisher, list[int]]:
    """The traced publishes that marked a failed store dirty, by publisher."""
    unwritten: dict[SyncedPublisher, list[int]] = {}
    into_failed = False
    for entry in trace:
        if isinstance(entry, tuple):
            if into_failed:
                unwritten.setdefault(entry[0], []).append(entry[1])
                into_failed = False
        elif entry in failed:
            into_failed = True
    return unwritten


def _fsync_all(fds: set[int]) -> set[int]:
    """The fds whose fsync failed."""
    failed = set()
    for fd in fds:
        try:
            os.fsync(fd)
        except OSError as exc:
            # A store deleted while its fsync was queued has nothing left to lose.
            if exc.errno != errno.EBADF:
                log.error("fsync failed: %s", exc)
                failed.add(fd)
    return failed
