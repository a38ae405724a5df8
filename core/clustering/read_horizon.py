"""How far a follower may show a stream: only what every in-sync replica has written.

A follower writes the leader's changes as they come, before the other in-sync replicas
have them; a message the follower showed could then be missing on the node elected after
the leader, and its offset handed out again for another message. So each look at a
replica's files is noted with the stream position its files may hold at most (the end of
the batch being written, sampled after the look), and its offsets become visible once the
leader says every in-sync replica has written up to that position (its tick, five times a
second). The leader's own stream consumers wait for the same, through the group commit.
A node keeps one horizon per stream, shared by all its readers: a new reader shows at once
what an earlier look made visible.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple

MAX_PENDING: Final = 1024  # looks waiting for the replication; the newest is overwritten beyond
MAX_STREAMS: Final = 4096  # horizons kept; the least recently used is forgotten beyond


class ReplicationMark(NamedTuple):
    link: object  # the replication connection the positions count on
    applying_to: int  # stream bytes the data dir's files may hold now
    replicated: int  # stream bytes every in-sync replica has written


# The current mark; None while the node follows nobody or its data dir is not whole.
MarkSource = Callable[[], ReplicationMark | None]


class ReadHorizon:
    """The next offset of one stream replica that may be shown (`visible`); its readers
    call it from worker threads."""

    def __init__(self, mark: MarkSource) -> None:
        self._mark = mark
        self._lock = threading.Lock()
        self._link: object | None = None
        self._pending: deque[tuple[int, int]] = deque()  # (position, next offset seen then)
        self.visible = 0

    def before_look(self) -> ReplicationMark | None:
        return self._mark()

    def looked(self, before: ReplicationMark | None, next_offset: int) -> None:
        """A look at the files, begun at mark `before`, found `next_offset`."""
        after = self._mark()
        if before is None or after is None or after.link is not before.link:
            return  # the files may have been changing under another link's full sync
        with self._lock:
            self._note(after, next_offset)

    def _note(self, after: ReplicationMark, next_offset: int) -> None:
        if after.link is not self._link:
            self._link = after.link
            self._pending.clear()  # positions of an earlier link count on another stream
        pending = self._pending
        if not pending or next_offset > pending[-1][1]:
            if len(pending) < MAX_PENDING:
                pending.append((after.applying_to, next_offset))
            else:
                pending[-1] = (after.applying_to, next_offset)
        self._advance(after)

    def advance(self) -> bool:
        """Take the leader's latest word; True when every look so far is visible."""
        mark = self._mark()
        with self._lock:
            if mark is not None and mark.link is self._link:
                self._advance(mark)
            return not self._pending

    def _advance(self, mark: ReplicationMark) -> None:
        pending = self._pending
        while pending and pending[0][0] <= mark.replicated:
            self.visible = max(self.visible, pending.popleft()[1])


class ReadHorizons:
    """The node's horizons, one per stream directory (a stream deleted and declared again
    under the same name has a new directory: a new horizon)."""

    def __init__(self, mark: MarkSource) -> None:
        self._mark = mark
        self._lock = threading.Lock()
        self._horizons: OrderedDict[tuple[Path, int], ReadHorizon] = OrderedDict()

    def of(self, directory: Path) -> ReadHorizon:
        """`directory`'s horizon (blocking: it looks at the directory)."""
        key = (directory, directory.stat().st_ino)
        with self._lock:
            horizon = self._horizons.get(key)
            if horizon is None:
                horizon = self._horizons[key] = ReadHorizon(self._mark)
                if len(self._horizons) > MAX_STREAMS:
                    self._horizons.popitem(last=False)
            else:
                self._horizons.move_to_end(key)
            return horizon
