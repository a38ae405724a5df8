"""A read session: an AMQP connection a follower serves itself, for a client that asked to
read stream queues here (the client property `read_from_follower`).

The follower's front already sent connection.start and read the start-ok; this takes the
connection from the login on: tune, open, heartbeats, channels (lavin.clustering.
read_channel) and close. Logins and permissions come from the replicated users and vhosts
files (lavin.clustering.read_access). Steps that read files (the login, connection.open,
a consume) run in a worker thread; the socket is not read meanwhile, so frames are taken
in order and nothing piles up."""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
from collections.abc import Coroutine
from typing import Any, Final, cast

from lavin.amqp import codec
from lavin.amqp.handshake import HANDSHAKE_TIMEOUT, LOGIN_REFUSAL_DELAY
from lavin.api import errors
from lavin.api.printable import printable
from lavin.clustering.proxy import ClientSide, LeaderAmqp
from lavin.clustering.read_access import Reader, login, open_vhost
from lavin.clustering.read_channel import ReadChannel
from lavin.clustering.read_horizon import ReadHorizons
from lavin.config import Config
from pamqp import commands

log = logging.getLogger(__name__)

CLOSE_TIMEOUT: Final = 1.0  # seconds to wait for the client's close-ok
HANDSHAKE_FRAME_MAX: Final = 64 * 1024  # until tune-ok sets the frame size

AUTHENTICATING: Final = 0
AWAIT_TUNE_OK: Final = 1
AWAIT_OPEN: Final = 2
OPEN: Final = 3
CLOSING: Final = 4
CLOSED: Final = 5


class ReadSession(asyncio.Protocol):
    def __init__(
        self,
        config: Config,
        leader: LeaderAmqp,
        clients: set[ClientSide],
        start_ok: commands.Connection.StartOk,
        horizons: ReadHorizons,
    ) -> None:
        self.config = config
        self.horizons = horizons
        self._leader = leader
        self._clients = clients
        self._start_ok = start_ok
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.state = AUTHENTICATING
        self.frame_max = HANDSHAKE_FRAME_MAX
        self.reader: Reader | None = None
        self.vhost = ""
        self.channels: dict[int, ReadChannel] = {}
        self._channel_max = config.channel_max or 65535
        self._buffer = bytearray()
        self._step: asyncio.Task[None] | None = None  # a step in a worker thread; frames wait meanwhile
        self._timer: asyncio.TimerHandle | None = None  # the handshake's deadline, then close-ok's
        self._heartbeats: asyncio.Task[None] | None = None
        self._received = 0.0

    # ---- the socket ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._clients.add(self)
        loop = asyncio.get_running_loop()
        self._received = loop.time()
        self._timer = loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_timed_out)
        self.later(0, 0, self._login())

    def data_received(self, data: bytes) -> None:
        self._received = asyncio.get_running_loop().time()
        self._buffer += data
        if len(self._buffer) > 2 * self.frame_max + HANDSHAKE_FRAME_MAX:  # a step runs: one read too many
            self._abort("sent more than a frame while a step ran")
            return
        self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = CLOSED
        self._clients.discard(self)
        self._release()
        for task in (self._step, self._heartbeats):
            if task is not None:
                task.cancel()

    def close(self) -> None:
        """The node stops serving as a follower."""
        self.close_with(errors.ConnectionForced("this node stopped serving as a cluster follower"))

    def send(self, data: bytes) -> None:
        if self.transport is not None and self.state != CLOSED:
            self.transport.write(data)

    def leader_text(self) -> str:
        leader = self._leader()
        where = "no leader is known now" if leader is None else f"publish through the leader at {leader[0]}:{leader[1]}"
        return f"this node is a follower and serves stream reads only; {where}"

    # ---- steps that run in a worker thread -----------------------------------------------

    def later(self, channel: int, method_index: int, step: Coroutine[Any, Any, None]) -> None:
        """Run `step`; frames after the one that asked for it wait until it is done."""
        if self.transport is not None:
            self.transport.pause_reading()
        self._step = asyncio.ensure_future(step)
        self._step.add_done_callback(functools.partial(self._step_done, channel, method_index))

    def _step_done(self, channel: int, method_index: int, task: asyncio.Task[None]) -> None:
        self._step = None
        if task.cancelled() or self.state == CLOSED:
            return
        exc = task.exception()
        if isinstance(exc, errors.AMQPError):
            self._fail(channel, method_index, exc)
        elif exc is not None:
            log.error("read session %s: %s failed", self.peer, method_index, exc_info=exc)
            self._fail(channel, method_index, errors.InternalError("the follower could not read that"))
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        self._process()

    async def _login(self) -> None:
        start_ok = self._start_ok
        host = self.peer.rpartition(":")[0].strip("[]")
        try:
            reader = await asyncio.to_thread(login, self.config, start_ok.mechanism, start_ok.response or "", host)
        except errors.ConnectionAccessRefused as exc:
            log.warning("login from %s on this follower refused: %s", self.peer, printable(exc.text))
            await asyncio.sleep(LOGIN_REFUSAL_DELAY)
            raise
        self.reader = reader
        config = self.config
        tune = commands.Connection.Tune(config.channel_max, config.frame_max, config.heartbeat)
        self.send(codec.method_frame(0, tune))
        self.state = AWAIT_TUNE_OK

    async def _open(self, vhost: str) -> None:
        assert self.reader is not None
        self.reader = await asyncio.to_thread(open_vhost, self.config, self.reader, vhost)
        self.vhost = vhost
        self.state = OPEN
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.send(codec.method_frame(0, commands.Connection.OpenOk()))
        log.info(
            "read session %s: user '%s' reads vhost '%s'", self.peer, printable(self.reader.name), printable(vhost)
        )

    # ---- frames --------------------------------------------------------------------------

    def _process(self) -> None:
        buffer = self._buffer
        while self._step is None and self.state != CLOSED:
            end = codec.frame_end(buffer)
            if end > self.frame_max:
                self._fail(0, 0, errors.FrameError(f"frame of {end} bytes, over frame_max {self.frame_max}"))
                return
            if end == 0 or len(buffer) < end:
                return
            frame = bytes(buffer[:end])
            del buffer[:end]
            channel = codec.U16.unpack_from(frame, 1)[0]
            try:
                self._frame(frame, channel)
            except errors.AMQPError as exc:
                self._fail(channel, 0, exc)

    def _frame(self, frame: bytes, channel: int) -> None:
        kind = frame[0]
        if frame[-1] != codec.FRAME_END_BYTE:
            raise errors.FrameError("a frame without its frame-end octet")
        if kind == codec.FRAME_HEARTBEAT:
            return
        if kind == codec.FRAME_METHOD:
            try:
                method = codec.decode_method(frame[7:-1])
            except (KeyError, ValueError, UnicodeDecodeError, struct.error) as exc:
                raise errors.FrameError(f"malformed method frame: {exc!r}") from None
            try:
                if channel == 0:
                    self._connection_method(method)
                else:
                    self._channel_method(channel, method)
            except errors.AMQPError as exc:
                self._fail(channel, method.index, exc)
        elif kind in (codec.FRAME_HEADER, codec.FRAME_BODY) and self.state == OPEN:
            read_channel = self.channels.get(channel)
            if read_channel is None:
                raise errors.ChannelErrorConn("expected 'channel.open'")
            read_channel.content(kind, frame[7:-1])
        elif self.state != CLOSING:
            raise errors.UnexpectedFrame(f"frame of type {kind} here")

    def _connection_method(self, method: Any) -> None:
        if isinstance(method, commands.Connection.Close):
            self.send(codec.method_frame(0, commands.Connection.CloseOk()))
            self._shut()
        elif isinstance(method, commands.Connection.CloseOk):
            if self.state == CLOSING:
                self._shut()
        elif self.state == CLOSING or isinstance(method, (commands.Connection.Blocked, commands.Connection.Unblocked)):
            return
        elif self.state == AWAIT_TUNE_OK and isinstance(method, commands.Connection.TuneOk):
            self._tuned(method)
        elif self.state == AWAIT_OPEN and isinstance(method, commands.Connection.Open):
            self.later(0, method.index, self._open(method.virtual_host))
        elif self.state == OPEN:
            raise errors.NotImplemented_(self.leader_text())
        else:
            raise errors.CommandInvalid(f"unexpected '{method.name}' during the handshake")

    def _tuned(self, tune_ok: commands.Connection.TuneOk) -> None:
        limit = self.config.frame_max
        self.frame_max = min(tune_ok.frame_max or limit, limit) if limit else tune_ok.frame_max or HANDSHAKE_FRAME_MAX
        self.frame_max = max(self.frame_max, 4096)
        if tune_ok.channel_max:
            self._channel_max = min(self._channel_max, tune_ok.channel_max)
        if tune_ok.heartbeat:
            self._heartbeats = asyncio.ensure_future(self._beat(tune_ok.heartbeat))
        self.state = AWAIT_OPEN

    def _channel_method(self, number: int, method: Any) -> None:
        if self.state == CLOSING:
            return
        if self.state != OPEN:
            raise errors.CommandInvalid(f"unexpected '{method.name}' during the handshake")
        channel = self.channels.get(number)
        if isinstance(method, commands.Channel.Open):
            if channel is not None:
                raise errors.ChannelErrorConn(f"second 'channel.open' seen on channel {number}")
            if number > self._channel_max:
                raise errors.ChannelErrorConn(f"channel {number} is over channel_max {self._channel_max}")
            self.channels[number] = ReadChannel(self, number)
            self.send(codec.channel_open_ok_frame(number))
        elif channel is None:
            raise errors.ChannelErrorConn("expected 'channel.open'")
        elif channel.closing:
            if isinstance(method, (commands.Channel.Close, commands.Channel.CloseOk)):
                del self.channels[number]
        elif isinstance(method, commands.Channel.Close):
            channel.stop()
            del self.channels[number]
            self.send(codec.method_frame(number, commands.Channel.CloseOk()))
        else:
            channel.method(method)

    # ---- errors and closing --------------------------------------------------------------

    def _fail(self, channel: int, method_index: int, exc: errors.AMQPError) -> None:
        if not exc.class_id and method_index:
            exc.class_id, exc.method_id = method_index >> 16, method_index & 0xFFFF
        read_channel = self.channels.get(channel)
        if exc.connection_level or read_channel is None:
            self.close_with(exc)
            return
        read_channel.stop()
        read_channel.closing = True
        close = commands.Channel.Close(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id)
        self.send(codec.method_frame(channel, close))

    def close_with(self, exc: errors.AMQPError) -> None:
        if self.state in (CLOSING, CLOSED):
            return
        log.info("closing read session %s: %s", self.peer, printable(exc.reply_text))
        self.state = CLOSING
        self._release()
        close = commands.Connection.Close(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id)
        self.send(codec.method_frame(0, close))
        self._timer = asyncio.get_running_loop().call_later(CLOSE_TIMEOUT, self._shut)

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if self.state != OPEN:
            self._abort("did not finish the handshake in time")

    def _abort(self, why: str) -> None:
        log.warning("read session %s %s: closed", self.peer, why)
        self._shut()

    def _shut(self) -> None:
        self._release()
        self.state = CLOSED
        if self.transport is not None:
            self.transport.close()

    def _release(self) -> None:
        for channel in self.channels.values():
            channel.stop()
        self.channels.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _beat(self, interval: int) -> None:
        """Send heartbeats; close when the client has sent nothing for two intervals."""
        loop = asyncio.get_running_loop()
        while self.state != CLOSED:
            await asyncio.sleep(interval / 2)
            if loop.time() - self._received > 2 * interval:
                self._abort(f"sent no heartbeat for {2 * interval} s")
                return
            self.send(codec.HEARTBEAT_FRAME)
