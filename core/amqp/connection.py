"""One client connection: frame parsing, dispatch to channels, permission waits, closing.

`data_received` parses every complete frame in one loop and dispatches synchronously, so
order on a channel is kept for free and a batch of publishes costs no task switches. The
connection's parts have modules of their own: the handshake and login (`handshake`), the
write side and the reasons reading pauses (`output`), heartbeats (`heartbeats`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import sys
import time
import traceback
from collections.abc import Awaitable
from typing import Any, Final, cast

from lavin.amqp import codec
from lavin.amqp.authorization import Authorization, NeedsAuthorization
from lavin.amqp.channel import Channel
from lavin.amqp.handshake import AUTHENTICATING, AWAIT_HEADER, AWAIT_START_OK, CLOSED, CLOSING, OPEN, Handshake
from lavin.amqp.heartbeats import Heartbeats
from lavin.amqp.output import PAUSED_FOR_ALARM, PAUSED_FOR_AUTHORIZATION, Output
from lavin.api import errors
from lavin.api.auth import User
from lavin.api.printable import printable
from lavin.broker.broker import Broker
from lavin.broker.queues.flow import PublisherFlow
from lavin.broker.runtime.alarms import ResourceAlarms
from lavin.broker.runtime.stats import ConnectionSnapshot
from lavin.broker.vhost import VHost
from lavin.transport.certificates import tls_details
from pamqp import commands

log = logging.getLogger(__name__)

CLOSE_TIMEOUT: Final = 3.0
# A body frame at least this large that a read ends in is received in place (`_fill_sink`).
SINK_MIN: Final = 4096
_NO_SINK: Final = memoryview(b"")


class Connection(asyncio.Protocol):
    """The AMQP side of one TCP connection."""

    def __init__(self, broker: Broker, direct_user: User | None = None) -> None:
        self.broker = broker
        # Set for a shovel's or federation link's connection to this broker: logged in as
        # this user whatever the client sends (lavin.listeners.direct).
        self.direct_user = direct_user
        self.alarms: ResourceAlarms = broker.alarms
        self.loop = broker.loop
        self.output = Output(broker.loop)
        self.output.on_writable = self._resume_deliveries
        self.handshake = Handshake(self)
        self.heartbeats = Heartbeats(self)
        self.state = AWAIT_HEADER
        self.buffer = bytearray()
        self._frame_end = 0  # where the first frame in `buffer` ends, once its header is in
        # A large body frame that a read ended in the middle of: the rest of its payload is
        # copied from each read straight into the message's body (`_sink`, what is left of
        # the frame's place there), not gathered in `buffer` and copied again.
        self._sink_channel: Channel | None = None
        self._sink = _NO_SINK
        self._sink_size = 0  # the frame's payload size
        self._sink_head = b""  # its first octets, for an error that names it
        self.channels: dict[int, Channel] = {}
        # What the handshake sets: the client's properties and mechanism at start-ok, the
        # user and its permission checks at login, the limits at tune-ok, the vhost at open.
        self.client_properties: dict[str, Any] = {}
        self.auth_mechanism = ""
        self.user: User | None = None
        self.authorization: Authorization | None = None
        self.frame_max = broker.config.frame_max
        self.channel_max = broker.config.channel_max
        # The declared sizes of the bodies its channels are receiving, added up, and their
        # bound: the watermark alone would let one connection hold gigabytes in partial bodies.
        self.unfinished_body_bytes = 0
        self.max_unfinished_body_bytes = broker.config.max_unfinished_body_bytes
        self.vhost: VHost | None = None
        self.peer_host = ""
        self.peer = ""
        self.received_since_tick = False  # read since the last heartbeat tick
        self._close_timer: asyncio.TimerHandle | None = None  # from connection.close on: ends the wait for close-ok
        self._authorization_wait: asyncio.Future[object] | None = None  # what PAUSED_FOR_AUTHORIZATION waits for
        self.dirty_channels: set[Channel] = set()
        self.flow: PublisherFlow | None = None
        self._local = ""  # "host:port" of the listener's end, shared between connections
        self.close_reason: str | None = None  # for the log: "" the client closed it, None it just went
        self.connected_at = 0  # ms since the epoch
        self.recv_oct = 0  # bytes read (statistics: one addition per socket read)
        self.recv_cnt = 0  # socket reads
        self.received_at = 0  # ms since the epoch of the last read: the timestamp of what it published

    @property
    def name(self) -> str:
        """RabbitMQ's name for it: "peer host:port -> local host:port"."""
        return f"{self.peer} -> {self._local}"

    # ---- transport callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; uvloop's does not subclass asyncio.Transport, so no isinstance.
        stream = cast(asyncio.Transport, transport)
        self.output.attach(stream)
        peername = stream.get_extra_info("peername") or ("", 0)
        self.peer_host = str(peername[0])
        self.peer = f"{peername[0]}:{peername[1]}"
        local = stream.get_extra_info("sockname") or ("", 0)
        self._local = sys.intern(f"{local[0]}:{local[1]}")  # the same for every connection to a listener
        self.flow = PublisherFlow(self.output.pause_for_flow, self.output.resume_for_flow)
        self.connected_at = int(time.time() * 1000)
        self.broker.connections.add(self)
        self.handshake.begin()

    def connection_lost(self, exc: Exception | None) -> None:
        was_open = self.vhost is not None
        self.state = CLOSED
        self._cancel_timers()
        self._release_channels()
        self.broker.connections.discard(self)
        self.alarms.release(self)
        if self.vhost is not None:
            self.vhost.connection_closed(self)
        if was_open:
            self._log_closed()
            self.broker.registry.hooks.lavin_connection_closed(connection=self)

    def pause_writing(self) -> None:
        self.output.pause_writing()

    def resume_writing(self) -> None:
        self.output.resume_writing()

    def _resume_deliveries(self) -> None:
        for channel in list(self.channels.values()):
            channel.resume_deliveries()

    def data_received(self, data: bytes) -> None:
        if self.state == CLOSED:  # close-ok sent: what the client sent before it saw it is dropped
            return
        self.received_since_tick = True
        self.recv_oct += len(data)
        self.recv_cnt += 1
        self.received_at = int(time.time() * 1000)
        buffer = self.buffer
        if self.output.reading_paused_by & PAUSED_FOR_AUTHORIZATION:
            buffer += data  # what was read already waits behind the frame that waits for an answer
            return
        try:
            start = 0
            if self._sink_channel is not None:
                start = self._fill_sink(data)
                if start == len(data):
                    self._after_batch()
                    return
            elif buffer:  # the tail of a frame from the last read
                buffer += data
                if len(buffer) < self._frame_end:  # a large frame still coming: not parsed again
                    return
                data = bytes(buffer)
                buffer.clear()
                self._frame_end = 0
            if self.state == AWAIT_HEADER:
                if len(data) < 8:
                    buffer += data
                    return
                if not self.handshake.protocol_header(data[:8]):
                    return
                data = data[8:]
            consumed = self._parse_frames(data, start)
            if consumed < len(data):
                buffer += memoryview(data)[consumed:]
                self._frame_end = codec.frame_end(buffer)
            self._after_batch()
        except errors.AMQPError as exc:
            self.close_with_error(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must cost this connection only, never the broker
            log.error("internal error on connection %s: %s", self.peer, _bug(exc))
            self.close_with_error(errors.InternalError("internal error"))

    # ---- parsing -------------------------------------------------------------------------

    def _fill_sink(self, data: bytes) -> int:
        """Put the start of `data` into the body frame being received in place; once its end
        octet is in too, the channel takes the payload. Returns where the next frame starts."""
        sink = self._sink
        taken = min(len(sink), len(data))
        if taken:
            sink[:taken] = memoryview(data)[:taken]
            self._sink = sink[taken:]
        if taken == len(data):
            return taken
        if data[taken] != 0xCE:
            raise _frame_error(codec.FRAME_BODY, self._sink_head, 0, f"{{invalid_frame_end_marker,{data[taken]}}}")
        channel = self._sink_channel
        assert channel is not None
        self._sink_channel = None
        self._sink = _NO_SINK
        channel.body_sink_filled(self._sink_size)
        return taken + 1

    def _start_sink(self, channel: Channel, data: bytes, offset: int, size: int) -> bool:
        """Receive the body frame at `offset`, of which `data` holds only the start, in
        place, when the channel has a place for it; whether it does."""
        sink = channel.body_sink(size)
        if sink is None:
            return False
        arrived = len(data) - offset - 7
        sink[:arrived] = memoryview(data)[offset + 7 :]
        self._sink = sink[arrived:]
        self._sink_channel = channel
        self._sink_size = size
        self._sink_head = data[offset : offset + 16]
        return True

    def _parse_frames(self, data: bytes, offset: int) -> int:
        """Dispatch every complete frame in `data` from `offset` on; return where the
        frames it could not complete begin."""
        end = len(data)
        frame_max = self.frame_max
        channels = self.channels
        frame_type: int
        channel_id: int
        size: int
        content = False  # message content in this read: a resource alarm blocks the connection
        start = 0  # where the frame being handled begins
        try:
            # Frames that arrive while a login is being checked wait in the buffer.
            while end - offset >= 7 and self.state != CLOSED and self.state != AUTHENTICATING:
                start = offset
                frame_type = data[offset]
                channel_id = _u16(data, offset + 1)
                size = _u32(data, offset + 3)
                # RabbitMQ takes a payload of up to frame_max (a frame of frame_max + 8) and so do
                # clients that split bodies that way; its error still names frame_max - 8.
                if size > frame_max:
                    raise _frame_error(frame_type, data, offset, f"{{frame_too_large,{size},{frame_max - 8}}}")
                frame_end = offset + 7 + size
                if frame_end >= end:
                    if (
                        frame_type == 3
                        and size >= SINK_MIN
                        and self.state == OPEN
                        and (channel := channels.get(channel_id)) is not None
                        and self._start_sink(channel, data, offset, size)
                    ):
                        offset = end
                        content = True
                    break
                if data[frame_end] != 0xCE:
                    raise _frame_error(frame_type, data, offset, f"{{invalid_frame_end_marker,{data[frame_end]}}}")
                payload = data[offset + 7 : frame_end]
                offset = frame_end + 1
                # The bulk of all traffic: content and methods on open channels, straight there.
                if self.state == OPEN and (channel := channels.get(channel_id)) is not None:
                    if frame_type == 3:
                        channel.on_body(payload)
                        content = True
                        continue
                    if frame_type == 2:
                        channel.on_header(payload)
                        content = True
                        continue
                    if frame_type == 1 and size >= 4:
                        if (
                            payload[1] == codec.BASIC_CLASS
                            and payload[3] == codec.BASIC_PUBLISH_METHOD
                            and not (payload[0] or payload[2])
                        ):
                            whole = _content_that_follows(data, offset, end, channel_id, frame_max)
                            if whole is not None and channel.publish_whole(payload, whole[0], whole[1]):
                                offset = whole[2]
                                content = True
                                continue
                        channel.on_method(payload)
                        continue
                self._dispatch(frame_type, channel_id, payload)
        except NeedsAuthorization as pending:
            # Nothing of that frame was done yet: it is parsed again once the answer is in.
            offset = start
            self._await_authorization(pending.answer)
        if content and self.alarms.active:
            self._block_publisher()
        return offset

    def _dispatch(self, frame_type: int, channel_id: int, payload: bytes) -> None:
        if self.state == CLOSING:
            self._dispatch_while_closing(frame_type, channel_id, payload)
            return
        if frame_type == codec.FRAME_METHOD:
            if len(payload) < 4:
                raise errors.FrameError(f"type 1, all octets = {payload!r}: method frame too short")
            if channel_id == 0:
                self._connection_method(payload)
                return
            channel = self.channels.get(channel_id)
            if channel is None:
                self._channel_open(channel_id, payload)
                return
            channel.on_method(payload)
        elif frame_type == codec.FRAME_HEADER or frame_type == codec.FRAME_BODY:
            channel = self.channels.get(channel_id)
            if channel is None:
                if channel_id == 0:
                    raise errors.CommandInvalid("content frame on channel 0")
                raise errors.ChannelErrorConn("expected 'channel.open'")
            if frame_type == codec.FRAME_HEADER:
                channel.on_header(payload)
            else:
                channel.on_body(payload)
        elif frame_type == codec.FRAME_HEARTBEAT:
            if channel_id != 0:
                raise errors.UnexpectedFrame(f"type 8, channel {channel_id}: heartbeat frames belong on channel 0")
        else:
            raise errors.FrameError(f"type {frame_type}, all octets = {payload[:16]!r}: unknown_frame")

    def _dispatch_while_closing(self, frame_type: int, channel_id: int, payload: bytes) -> None:
        """After we sent connection.close only close and close-ok matter."""
        if frame_type != codec.FRAME_METHOD or channel_id != 0 or len(payload) < 4:
            return
        index = codec.METHOD_ID.unpack_from(payload, 0)[0]
        if index == commands.Connection.CloseOk.index:
            self.abort()
        elif index == commands.Connection.Close.index:
            self._answer_close()

    def _decode(self, payload: bytes) -> Any:
        class_id, method_id = struct.unpack_from(">HH", payload, 0)
        try:
            return codec.decode_method(payload)
        except KeyError:
            raise errors.CommandInvalid(f"unknown method class {class_id} method {method_id}") from None
        except ValueError as exc:
            # RabbitMQ's wording for arguments that do not decode, naming the method.
            raise errors.FrameError(f"cannot decode {payload[4:36]!r}: {exc}", class_id, method_id) from None

    # ---- connection class ----------------------------------------------------------------

    def _connection_method(self, payload: bytes) -> None:
        method = self._decode(payload)
        if isinstance(method, commands.Connection.Close):
            self._answer_close()
        elif isinstance(method, commands.Connection.CloseOk):
            self.abort()
        else:
            self.handshake.on_method(method)

    def client_can(self, capability: str) -> bool:
        """Whether the client advertised `capability` in connection.start-ok."""
        capabilities = self.client_properties.get("capabilities")
        return isinstance(capabilities, dict) and bool(capabilities.get(capability))

    def tls(self) -> ssl.SSLObject | None:
        """The TLS session the client's bytes arrive through (on AMQPS, or WebSocket over HTTPS)."""
        transport = self.output.transport
        if transport is None:
            return None
        tls: ssl.SSLObject | None = transport.get_extra_info("ssl_object")
        return tls

    # ---- permissions ---------------------------------------------------------------------

    def _await_authorization(self, answer: Awaitable[object]) -> None:
        """A frame waits for `answer`: read nothing until it is in, then parse that frame again."""
        self.output.pause_reading(PAUSED_FOR_AUTHORIZATION)
        wait = asyncio.ensure_future(answer)
        self._authorization_wait = wait
        wait.add_done_callback(self._authorization_answered)

    def _authorization_answered(self, wait: asyncio.Future[object]) -> None:
        if wait is not self._authorization_wait:  # cancelled: the connection is closing
            return
        self._authorization_wait = None
        self.output.resume_reading(PAUSED_FOR_AUTHORIZATION)
        if self.buffer and self.state != CLOSED:
            self.data_received(b"")

    def _stop_awaiting_authorization(self) -> None:
        wait = self._authorization_wait
        self._authorization_wait = None
        if wait is not None:
            wait.cancel()
        self.output.resume_reading(PAUSED_FOR_AUTHORIZATION)

    def permissions_changed(self, user_name: str) -> None:
        """The permissions of `user_name` changed: if that is this connection's user, ask
        the authorizer again from now on (the broker's ClientConnection port)."""
        if self.authorization is not None and self.authorization.user.name == user_name:
            self.forget_permissions()

    def forget_permissions(self) -> None:
        """Ask the authorizer again from now on, on every channel."""
        assert self.authorization is not None
        self.authorization.forget()
        for channel in self.channels.values():
            channel.permissions_changed()

    # ---- channels ------------------------------------------------------------------------

    def _channel_open(self, channel_id: int, payload: bytes) -> None:
        if self.state != OPEN:
            raise errors.CommandInvalid("channel frame before connection.open")
        method = self._decode(payload)
        if not isinstance(method, commands.Channel.Open):
            class_id, method_id = struct.unpack_from(">HH", payload, 0)
            raise errors.ChannelErrorConn("expected 'channel.open'", class_id, method_id)
        if len(self.channels) >= self.channel_max:
            raise errors.NotAllowed(
                f"number of channels opened ({len(self.channels)}) has reached the "
                f"negotiated channel_max ({self.channel_max})",
                20,
                10,
            )
        assert self.vhost is not None and self.authorization is not None
        self.channels[channel_id] = Channel(self, channel_id, self.vhost, self.authorization)
        self.broker.stats.channel_opened()
        self.output.send(codec.channel_open_ok_frame(channel_id))

    def channel_closed(self, channel: Channel) -> None:
        if self.channels.pop(channel.id, None) is not None:
            self.broker.stats.channel_closed(channel.vhost.name, channel.message_counts())
        self.dirty_channels.discard(channel)

    # ---- what the management API reads ---------------------------------------------------

    def snapshot(self) -> ConnectionSnapshot:
        """What it is now, for the statistics and the management API."""
        # A closed transport may no longer know its addresses: such a connection is not listed.
        transport = self.output.transport if self.state != CLOSED else None
        peer = transport.get_extra_info("peername") if transport is not None else None
        local = transport.get_extra_info("sockname") if transport is not None else None
        tls = self.tls() if transport is not None else None
        return ConnectionSnapshot(
            self,
            self.peer_host,
            int(peer[1]) if peer else 0,
            str(local[0]) if local else "",
            int(local[1]) if local else 0,
            self.vhost.name if self.vhost is not None and self.state != CLOSED else None,
            self.user.name if self.user is not None else None,
            "running" if self.state == OPEN else "closing",
            self.client_properties,
            self.auth_mechanism,
            self.connected_at,
            self.heartbeats.interval,
            self.frame_max,
            self.channel_max,
            self.recv_oct,
            self.output.send_oct,
            self.recv_cnt,
            self.output.send_cnt,
            transport.get_write_buffer_size() if transport is not None else 0,
            [channel.snapshot() for channel in self.channels.values()],
            tls_details(tls) if tls is not None else None,
        )

    # ---- the end of a read ---------------------------------------------------------------

    def _after_batch(self) -> None:
        """End of one read: let channels emit what they batch (confirms), and stop reading
        while a queue we publish to has consumers waiting behind a backlog."""
        if self.dirty_channels:
            for channel in list(self.dirty_channels):
                channel.end_of_batch()
            self.dirty_channels.clear()
        flow = self.flow
        if flow is not None and flow.slowed_by:
            flow.end_of_batch()

    # ---- resource alarms -----------------------------------------------------------------

    def _block_publisher(self) -> None:
        """A resource alarm is on and this connection sent message content: stop reading it
        until every alarm has cleared, and say why (RabbitMQ's connection.blocked)."""
        if self.output.reading_paused_by & PAUSED_FOR_ALARM or self.state != OPEN:
            return
        self.output.pause_reading(PAUSED_FOR_ALARM)
        self.alarms.hold(self)
        if self.client_can("connection.blocked"):
            self.output.send(codec.method_frame(0, commands.Connection.Blocked(reason=self.alarms.reason())))

    def unblock(self) -> None:
        """Every alarm has cleared: read again (the ResourceAlarms port)."""
        if self.state == OPEN and self.client_can("connection.blocked"):
            self.output.send(codec.method_frame(0, commands.Connection.Unblocked()))
        self.output.resume_reading(PAUSED_FOR_ALARM)

    # ---- closing -------------------------------------------------------------------------

    def close_with_error(self, exc: errors.AMQPError) -> None:
        """Send connection.close with the error and wait (briefly) for close-ok."""
        if self.state in (CLOSING, CLOSED):
            return
        if self.state == AWAIT_START_OK or self.state == AWAIT_HEADER:
            log.warning("closing connection from %s during handshake: %s", self.peer, printable(exc.reply_text))
        elif self.vhost is None:  # an opened connection logs why when it is gone
            log.info("closing connection %s: %s", self.peer, printable(exc.reply_text))
        self.close(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id)

    def close(self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0) -> None:
        if self.state in (CLOSING, CLOSED):
            return
        self.state = CLOSING
        self.close_reason = reply_text
        self._release_channels()
        self.alarms.release(self)
        self.handshake.stop()
        self._stop_awaiting_authorization()
        self.output.resume_reading(PAUSED_FOR_ALARM)  # for the close-ok; nothing else is taken now
        close = commands.Connection.Close(
            reply_code=reply_code, reply_text=reply_text, class_id=class_id, method_id=method_id
        )
        self.output.send(codec.method_frame(0, close))
        self.output.flush()
        if self._close_timer is not None:
            self._close_timer.cancel()
        self._close_timer = self.loop.call_later(CLOSE_TIMEOUT, self.abort)

    def _answer_close(self) -> None:
        """Answer the client's connection.close and wait for it to close the socket, as
        RabbitMQ does: closing first would make the kernel answer frames still in flight
        with a reset, which the client may see before close-ok."""
        if self.close_reason is None:
            self.close_reason = ""
        self._release_channels()
        if self.vhost is not None:  # exclusive queues go at close, not when the socket does
            self.vhost.connection_closed(self)
        self.output.send(codec.method_frame(0, commands.Connection.CloseOk()))
        self.output.flush()
        self.state = CLOSED
        self.handshake.stop()
        if self._close_timer is not None:
            self._close_timer.cancel()
        self._close_timer = self.loop.call_later(CLOSE_TIMEOUT, self.abort)

    def abort(self) -> None:
        self.output.close()
        self.state = CLOSED

    def _log_closed(self) -> None:
        """RabbitMQ's line for an opened connection that is gone: who, where, how long,
        and why unless the client closed it."""
        assert self.user is not None and self.vhost is not None
        head = "closing AMQP connection (%s, vhost: '%s', user: '%s', duration: '%s')"
        args = (
            self.log_name(),
            printable(self.vhost.name),
            printable(self.user.name),
            _duration(int(time.time() * 1000) - self.connected_at),
        )
        if self.close_reason == "":
            log.info(head, *args)
        elif self.close_reason is None:
            log.warning(head + ": client unexpectedly closed TCP connection", *args)
        else:
            log.warning(head + ": %s", *args, printable(self.close_reason))

    def client_name(self) -> str:
        """The `connection_name` the client gave in its client properties, if any."""
        name = self.client_properties.get("connection_name")
        return printable(str(name)) if name else ""

    def log_name(self) -> str:
        """The connection's name in the log: RabbitMQ's, then the client's name for it."""
        client_name = self.client_name()
        return f"{self.name} - {client_name}" if client_name else self.name

    def _release_channels(self) -> None:
        # The view of a body being received in place would keep that body alive for as
        # long as this object lives.
        self._sink_channel = None
        self._sink = _NO_SINK
        for channel in list(self.channels.values()):
            channel.release()
            self.broker.stats.channel_closed(channel.vhost.name, channel.message_counts())
        self.channels.clear()
        self.dirty_channels.clear()

    def _cancel_timers(self) -> None:
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        self.heartbeats.stop()
        self.handshake.stop()
        self._stop_awaiting_authorization()


def _duration(milliseconds: int) -> str:
    """How long a connection lasted, as RabbitMQ writes it: 850ms, 42s, 3M, 2s, 1H, 0M, 5s..."""
    if milliseconds < 1000:
        return f"{max(milliseconds, 0)}ms"
    minutes, seconds = divmod(milliseconds // 1000, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [(days, "D"), (hours, "H"), (minutes, "M"), (seconds, "s")]
    while parts[0][0] == 0:  # leading zero units are left out; seconds always stay
        parts.pop(0)
    return ", ".join(f"{value}{unit}" for value, unit in parts)


def _content_that_follows(
    data: bytes, offset: int, end: int, channel_id: int, frame_max: int
) -> tuple[bytes, bytes, int] | None:
    """The content header and single body frame right after a basic.publish, when both are
    complete and well formed: (properties, body, offset after them). Anything else, None:
    the frame loop then handles them one by one. Integers are read octet by octet, which
    compiled costs no allocation (struct would build a tuple per field group)."""
    if end - offset < 7 or data[offset] != codec.FRAME_HEADER or _u16(data, offset + 1) != channel_id:
        return None
    size = _u32(data, offset + 3)
    header_end = offset + 7 + size
    if size < 14 or size > frame_max or header_end >= end:
        return None
    if data[header_end] != 0xCE or data[offset + 7] or data[offset + 8] != codec.BASIC_CLASS:
        return None
    properties = data[offset + 19 : header_end]
    body_size_high = _u32(data, offset + 11)  # the body size is a u64; one frame's fits in the low half
    body_size = _u32(data, offset + 15)
    if not body_size_high and not body_size:
        return properties, b"", header_end + 1
    body_start = header_end + 1
    body_end = body_start + 7 + body_size
    if body_size_high or body_size > frame_max or body_end >= end:
        return None
    if data[body_start] != codec.FRAME_BODY or _u16(data, body_start + 1) != channel_id:
        return None
    if _u32(data, body_start + 3) != body_size or data[body_end] != 0xCE:
        return None
    return properties, data[body_start + 7 : body_end], body_end + 1


def _u16(data: bytes, offset: int) -> int:
    return data[offset] << 8 | data[offset + 1]


def _u32(data: bytes, offset: int) -> int:
    return data[offset] << 24 | data[offset + 1] << 16 | data[offset + 2] << 8 | data[offset + 3]


def _frame_error(frame_type: int, data: bytes, offset: int, reason: str) -> errors.FrameError:
    """RabbitMQ's FRAME_ERROR text: the frame type, its first octets, the reason."""
    return errors.FrameError(f"type {frame_type}, first 16 octets = {data[offset : offset + 16]!r}: {reason}")


def _bug(exc: Exception) -> str:
    """An unexpected exception as one log line: what it says and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return printable(f"{exc!r}{where}")
