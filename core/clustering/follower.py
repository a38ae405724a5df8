"""A follower's replication client: log in to the leader, make the data dir the leader's
(the files that differ), then apply the stream, fsync, and acknowledge.

While a full sync runs the data dir is a mix of old and new files: a marker file says so,
and a node whose data dir has it does not stand for election (`Follower.consistent`).
It goes once the files and the changes made while they were read are written: before the
acknowledgement that lets the leader name this follower in etcd's ISR.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from lavin.clustering import wire
from lavin.clustering.leader import proof
from lavin.storage.change_applier import ChangeApplier
from lavin.storage.data_dir_index import FileEntry, index_data_dir
from lavin.storage.disk import fsync_directory

log = logging.getLogger(__name__)

SYNC_MARKER: Final = ".clustering_syncing"  # not replicated (lavin.storage.data_dir_index)
CONNECT_TIMEOUT: Final = 5.0
IDLE_TIMEOUT: Final = 10.0  # seconds without a frame (the leader ticks 5 times a second)
READ_SIZE: Final = 256 * 1024
SYNC_POINT: Final = wire.Change(wire.SYNCED, "")  # where the full sync's files end, among the changes
MAX_UNAPPLIED: Final = 64 * 1024 * 1024  # received, not yet written: reading waits beyond it


@dataclass(frozen=True)
class LeaderAddress:
    host: str
    port: int


class Follower:
    """One connection to one leader; `run` returns or raises when it ends."""

    def __init__(self, root: Path, node: str, secret: str, on_progress: Callable[[int, int, bool], None]) -> None:
        self.root = root
        self.node = node
        self.secret = secret
        self.on_progress = on_progress  # (bytes written, bytes the leader says it sent, in sync)
        self._applier = ChangeApplier(root)
        self._pending: list[wire.Change] = []
        self._pending_bytes = 0
        self._streaming = False
        self._written = 0  # stream bytes written and fsynced
        self._received = 0  # stream bytes received
        self._leader_sent = 0
        self._in_sync = False
        # The stream bytes the data dir's files may hold (the end of the batch being written)
        # and how many of them every in-sync replica has: what reads on this node may show.
        self.applying_to = 0
        self.replicated = 0
        self._writer: asyncio.StreamWriter | None = None
        self._applying: asyncio.Task[None] | None = None
        self._failure: Exception | None = None  # a batch that could not be written
        self._files_written = False  # every file of the full sync is written
        self._whole_at: int | None = None  # stream bytes written once the data dir is whole

    @property
    def whole(self) -> bool:
        """The data dir is the leader's (at some point of the stream): written past `_whole_at`."""
        return self._whole_at is not None and self._written >= self._whole_at

    @staticmethod
    def consistent(root: Path) -> bool:
        return not (root / SYNC_MARKER).exists()

    async def run(self, leader: LeaderAddress) -> None:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(leader.host, leader.port), CONNECT_TIMEOUT)
        self._writer = writer
        try:
            await self._follow(reader, writer)
        finally:
            if self._applying is not None:
                await asyncio.gather(self._applying, return_exceptions=True)
            writer.close()
            await asyncio.to_thread(self._applier.close)

    async def _follow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = wire.FrameReader()
        while True:
            data = await asyncio.wait_for(reader.read(READ_SIZE), IDLE_TIMEOUT)
            if self._failure is not None:
                raise self._failure
            if not data:
                raise ConnectionError("the leader closed the connection")
            for kind, payload in frames.feed(data):
                await self._handle(kind, payload, writer)
            if self._pending and (self._applying is None or self._applying.done()):
                self._start_applying()
            if self._pending_bytes > MAX_UNAPPLIED and self._applying is not None:
                await self._applying  # let the disk catch up before reading more

    async def _handle(self, kind: int, payload: bytes, writer: asyncio.StreamWriter) -> None:
        if kind in wire.CHANGE_KINDS:
            self._pending.append(wire.decode_change(kind, payload))
            self._pending_bytes += wire.HEADER.size + len(payload)
            if self._streaming:
                self._received += wire.HEADER.size + len(payload)
        elif kind == wire.CHALLENGE:
            writer.write(wire.json_frame(wire.AUTH, {"node": self.node, "proof": proof(self.secret, payload)}))
        elif kind == wire.INDEX:
            wanted = await self._compare(wire.decode_json(payload))
            writer.write(wire.json_frame(wire.WANT, wanted))
        elif kind == wire.SYNCED:
            self._whole_at = wire.decode_u64(payload)
            self._streaming = True
            self._pending.append(SYNC_POINT)  # a batch ends here, even with no file to write
        elif kind == wire.TICK:
            tick = wire.decode_tick(payload)
            self._leader_sent, self._in_sync, self.replicated = tick.sent, tick.in_sync, tick.replicated
            if self._applying is None or self._applying.done():
                self._acknowledge()
        else:
            raise wire.ProtocolError(f"unexpected frame {kind!r}")

    async def _compare(self, listed: object) -> list[str]:
        """Mark the data dir inconsistent, remove what the leader does not have, and name
        what it must send."""
        if not isinstance(listed, list):
            raise wire.ProtocolError("INDEX must be a list")
        theirs = {}
        for item in listed:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
                raise wire.ProtocolError("malformed INDEX entry")
            theirs[item[0]] = FileEntry(item[0], int(item[1]), str(item[2]))
        await asyncio.to_thread(self._mark_inconsistent)
        ours = {entry.path: entry for entry in await asyncio.to_thread(index_data_dir, self.root)}
        for path in ours.keys() - theirs.keys():
            await asyncio.to_thread(self._applier.remove, path)
        wanted = sorted(path for path, entry in theirs.items() if ours.get(path) != entry)
        log.info(
            "Full sync: %d of %d files to fetch, %d removed", len(wanted), len(theirs), len(ours.keys() - theirs.keys())
        )
        return wanted

    def _mark_inconsistent(self) -> None:
        """Durably, before the first file changes: a crash in the sync must not leave a
        mixed data dir that could stand for election."""
        marker = self.root / SYNC_MARKER
        marker.touch()
        descriptor = os.open(marker, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        fsync_directory(self.root)

    def _start_applying(self) -> None:
        self._applying = asyncio.ensure_future(self._apply())

    async def _apply(self) -> None:
        """Write what came in, batch after batch, in a worker thread; acknowledge each batch
        once it is on disk. A batch that cannot be written ends the connection (`run`
        raises): nothing after it may be acknowledged."""
        while self._pending:
            changes, self._pending = self._pending, []
            self._pending_bytes = 0
            received, sync_point = self._received, SYNC_POINT in changes
            whole = self._whole_at is not None and received >= self._whole_at
            self.applying_to = received
            try:
                await asyncio.to_thread(self._write_all, changes, whole)
            except (ValueError, OSError) as exc:  # UnsafePath is a ValueError
                log.error("Could not apply the leader's changes: %s", exc)
                self._failure = exc
                if self._writer is not None:
                    self._writer.close()
                return
            self._written = received
            # The files of the full sync all came before SYNCED: once the batch that holds it
            # is written, so are they, and from then on an acknowledgement means the data dir
            # is whole.
            self._files_written = self._files_written or sync_point
            self._acknowledge()

    def _write_all(self, changes: list[wire.Change], whole: bool) -> None:
        applier = self._applier
        for change in changes:
            kind = change.kind
            if change is SYNC_POINT:
                continue
            if kind == wire.WRITE:
                applier.write(change.path, change.offset, change.data)
            elif kind == wire.TRUNCATE:
                applier.truncate(change.path, change.offset)
            elif kind == wire.REPLACE:
                applier.replace(change.path, change.data)
            elif kind == wire.REMOVE:
                applier.remove(change.path)
            else:
                applier.rename(change.path, change.target)
        applier.sync()
        marker = self.root / SYNC_MARKER
        if whole and marker.exists():
            marker.unlink()
            fsync_directory(self.root)

    def _acknowledge(self) -> None:
        if not self._files_written or self._writer is None or self._writer.is_closing():
            return
        self._writer.write(wire.u64_frame(wire.ACK, self._written))
        self.on_progress(self._written, self._leader_sent, self._in_sync)
