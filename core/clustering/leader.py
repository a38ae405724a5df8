"""The leader's replication listener: each follower logs in with the cluster's secret, gets
a full sync of the data dir (the index, then the files it asks for), then the stream."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Final, cast

from lavin.clustering import wire
from lavin.clustering.replicas import InSyncReplicas
from lavin.clustering.stream import ChangeStream
from lavin.listeners.prebound import Attachment, PreboundSockets
from lavin.storage.data_dir_index import index_data_dir, is_replicated

log = logging.getLogger(__name__)

MAX_BACKLOG: Final = 256 * 1024 * 1024  # stream bytes buffered for one follower before it is dropped
SYNC_HIGH_WATER: Final = 8 * 1024 * 1024  # file bytes queued on a follower's socket before the sync waits
TICK_INTERVAL: Final = 0.2  # how soon a follower serving reads learns what every ISR member has
IDLE_TIMEOUT: Final = 10.0  # seconds without a word from a follower before it is dropped
LOGIN_TIMEOUT: Final = 5.0
MAX_LOGIN_FRAME: Final = 4096


def proof(secret: str, challenge: bytes) -> str:
    return hmac.new(secret.encode(), challenge, hashlib.sha256).hexdigest()


class FollowerLink(asyncio.Protocol):
    """One follower's connection, as a `Replica` of the ISR and a reader of the stream."""

    def __init__(self, server: ReplicationServer) -> None:
        self.server = server
        self.node = ""
        self.acknowledged = 0
        self.streaming = False  # synced: its files are written, it follows the stream
        self._files_sent = False
        self.connected = False
        self.in_sync = False
        self._start = 0  # the stream position this follower's stream begins at
        self._sent = 0  # stream bytes sent to it
        self._backlog: list[bytes] | None = None  # the stream, held back while files are sent
        self._backlog_bytes = 0
        self._reader = wire.FrameReader(MAX_LOGIN_FRAME)
        self._challenge = secrets.token_bytes(32)
        self._transport: asyncio.Transport | None = None
        self._writable: asyncio.Event = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_heard = 0.0

    # --- the connection --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses
        self._transport.set_write_buffer_limits(high=SYNC_HIGH_WATER)
        self.connected = True
        self._writable.set()
        self._last_heard = asyncio.get_running_loop().time()
        self._transport.write(wire.frame(wire.CHALLENGE, self._challenge))
        self._spawn(self._keep_alive())

    def connection_lost(self, exc: Exception | None) -> None:
        self.connected = False
        self.server.stream.readers.discard(self)
        self.server.links.discard(self)
        for task in self._tasks:
            task.cancel()
        self._writable.set()
        if self.node:
            log.info("Follower %s disconnected", self.node)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def close(self, why: str) -> None:
        if self._transport is not None and not self._transport.is_closing():
            log.warning("Dropping follower %s: %s", self.node or self._peer(), why)
            self._transport.close()

    def _peer(self) -> str:
        return str(self._transport.get_extra_info("peername")) if self._transport else "?"

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def data_received(self, data: bytes) -> None:
        self._last_heard = asyncio.get_running_loop().time()
        try:
            for kind, payload in self._reader.feed(data):
                self._handle(kind, payload)
        except wire.ProtocolError as exc:
            self.close(str(exc))

    def _handle(self, kind: int, payload: bytes) -> None:
        if kind == wire.ACK and self._files_sent:
            # The follower acknowledges only once every file of its sync is written.
            self.acknowledged = self._start + wire.decode_u64(payload)
            self.streaming = True
            self.server.replicas.release()
        elif kind == wire.AUTH and not self.node:
            self._login(wire.decode_json(payload))
        elif kind == wire.WANT and self.node and self._backlog is not None:
            wanted = wire.decode_json(payload)
            if not isinstance(wanted, list) or not all(isinstance(path, str) for path in wanted):
                raise wire.ProtocolError("WANT must list paths")
            self._spawn(self._send_files(wanted))
        elif kind != wire.ACK:
            raise wire.ProtocolError(f"unexpected frame {kind!r}")

    # --- login and full sync ---------------------------------------------------------------
    def _login(self, hello: object) -> None:
        if not isinstance(hello, dict) or not isinstance(hello.get("node"), str) or not hello["node"]:
            raise wire.ProtocolError("AUTH must name the node")
        expected = proof(self.server.secret, self._challenge)
        if not hmac.compare_digest(str(hello.get("proof", "")), expected):
            raise wire.ProtocolError("wrong clustering secret")
        self.node = hello["node"]
        self._reader.max_frame = wire.MAX_FRAME
        # From here on every change is kept for it: the files read later may hold some of them
        # already, and applying one twice changes nothing.
        self._start = self.server.stream.position
        self._backlog = []
        self.server.stream.readers.add(self)
        self.server.replicas.connected(self)
        log.info("Follower %s logged in; full sync", self.node)
        self._spawn(self._send_index())

    async def _send_index(self) -> None:
        index = await asyncio.to_thread(index_data_dir, self.server.root)
        self._write(wire.json_frame(wire.INDEX, [[entry.path, entry.size, entry.checksum] for entry in index]))

    async def _send_files(self, wanted: list[str]) -> None:
        root = self.server.root
        for path in wanted:
            if not is_replicated(path) or ".." in Path(path).parts or os.path.isabs(path):
                raise wire.ProtocolError(f"asked for {path!r}")
            await self._send_file(root, path)
        backlog, self._backlog = self._backlog or [], None
        # The files were read while the stream went on: the data dir is the leader's once the
        # changes held back meanwhile are written too.
        self._write(wire.u64_frame(wire.SYNCED, self._backlog_bytes))
        for data in backlog:
            self._write(data)
        self._sent += self._backlog_bytes
        self._backlog_bytes = 0
        self._files_sent = True
        log.info("Follower %s synced %d files; streaming", self.node, len(wanted))

    async def _send_file(self, root: Path, path: str) -> None:
        try:
            descriptor = os.open(root / path, os.O_RDONLY)
        except FileNotFoundError:
            return  # removed since the index: the stream says so
        try:
            size = os.fstat(descriptor).st_size
            if size <= wire.CHUNK:
                data = await asyncio.to_thread(os.pread, descriptor, size, 0)
                self._write(wire.replace_frame(path, data))
                return
            self._write(wire.truncate_frame(path, size))
            for offset in range(0, size, wire.CHUNK):
                await self._writable.wait()  # paused above SYNC_HIGH_WATER queued bytes
                data = await asyncio.to_thread(os.pread, descriptor, wire.CHUNK, offset)
                for piece in wire.write_frames(path, offset, data):
                    self._write(piece)
        finally:
            os.close(descriptor)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    # --- the stream ------------------------------------------------------------------------
    def send_change(self, data: bytes) -> None:
        backlog = self._backlog
        if backlog is not None:
            backlog.append(data)
            self._backlog_bytes += len(data)
            if self._backlog_bytes > MAX_BACKLOG:
                self.close(f"more than {MAX_BACKLOG} bytes of changes waiting for its full sync")
            return
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        self._sent += len(data)
        if transport.get_write_buffer_size() > MAX_BACKLOG:
            self.close(f"more than {MAX_BACKLOG} bytes of changes unsent")

    async def _keep_alive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(TICK_INTERVAL)
            if loop.time() - self._last_heard > (IDLE_TIMEOUT if self.node else LOGIN_TIMEOUT):
                self.close("silent for too long")
                return
            if self._files_sent:
                replicated = min(self._sent, max(0, self.server.replicas.replicated() - self._start))
                self._write(wire.tick_frame(wire.Tick(self._sent, replicated, self.in_sync)))


class ReplicationServer:
    """Serves followers on the clustering listener while this node leads."""

    def __init__(self, root: Path, secret: str, stream: ChangeStream, replicas: InSyncReplicas) -> None:
        self.root = root
        self.secret = secret
        self.stream = stream
        self.replicas = replicas
        self.links: set[FollowerLink] = set()
        self._attachment: Attachment | None = None

    def start(self, listeners: PreboundSockets) -> None:
        self._attachment = listeners.attach("clustering", self._link)

    def _link(self) -> FollowerLink:
        link = FollowerLink(self)
        self.links.add(link)
        return link

    def stop(self) -> None:
        if self._attachment is not None:
            self._attachment.close()
            self._attachment = None
        for link in list(self.links):
            link.close("the leader steps down")
