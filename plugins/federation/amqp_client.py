"""A small asyncio AMQP 0-9-1 client: one connection, one channel, what a shovel needs.

It logs in (PLAIN), negotiates limits and heartbeats, declares and binds, consumes into a
buffer bounded by the prefetch count, and publishes with publisher confirms. The methods of
the per-message path (basic.deliver, basic.publish, basic.ack and basic.nack both ways) are
encoded and decoded here, the rest by pamqp; content headers go through `lavin.api`'s
property codec, so that properties keep their AMQP names, and a delivery keeps its encoded
properties too, for a destination that sends them on unchanged. Everything the broker closes, and a lost socket,
becomes `EndpointFailure` on every pending call, confirm and the delivery buffer.

What a misbehaving peer can make it hold is capped: frames by the negotiated frame_max,
bodies by MAX_BODY_SIZE, buffered deliveries by the prefetch count (more is a protocol
error), unconfirmed publishes by MAX_UNCONFIRMED (publish waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from lavin.api import EndpointFailure, LocalBroker
from lavin.api.message import decode_properties
from lavin.plugins.federation.amqp_uri import AmqpUri
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.base import Frame as Method
from pamqp.common import FieldTable
from pamqp.exceptions import UnmarshalingException

M = TypeVar("M", bound=Method)
T = TypeVar("T")

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END: Final = 0xCE
FRAME_END_BYTE: Final = bytes((FRAME_END,))
FRAME_HEAD: Final = struct.Struct(">BHI")
CONTENT_HEAD: Final = struct.Struct(">HHQ")  # class id, weight, body size
FRAME_OVERHEAD: Final = 8
METHOD_ID: Final = struct.Struct(">I")
DELIVERY_TAG: Final = struct.Struct(">Q")
BASIC_DELIVER: Final = 0x003C003C
BASIC_ACK: Final = 0x003C0050
BASIC_NACK: Final = 0x003C0078
BASIC_PUBLISH_HEAD: Final = METHOD_ID.pack(0x003C0028) + b"\x00\x00"  # and the reserved ticket
# A whole basic.ack or basic.nack frame: head, method id, delivery tag, flag bits, frame end.
SETTLE_FRAME: Final = struct.Struct(">BHIIQBB")
SETTLE_SIZE: Final = SETTLE_FRAME.size - FRAME_HEAD.size - 1
READ_SIZE: Final = 65536  # frames are parsed out of reads this large, not read one by one
FRAME_MAX: Final = 131072  # asked for, and the limit before tune and when the broker sets none
MIN_FRAME_MAX: Final = 4096
MAX_BODY_SIZE: Final = 512 * 1024 * 1024  # RabbitMQ's own ceiling for a message
MAX_UNCONFIRMED: Final = 10_000
UNLIMITED_BUFFER: Final = 1000  # buffered deliveries when no prefetch limits them (no-ack)
CHANNEL: Final = 1
CLOSE_TIMEOUT: Final = 2.0
CAPABILITIES: Final[FieldTable] = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
}


# pamqp refuses queue and exchange names outside a narrow pattern (no `>`, no accents), both
# when a method is built and when it is encoded; brokers take any UTF-8 name of up to 255
# bytes, and a shovel must reach the queues that exist. Each method that carries a name is
# built as a subclass of pamqp's that skips that check.
_UNCHECKED: dict[type[Method], type[Method]] = {}


def unchecked(method_class: type[M], **fields: Any) -> M:
    subclass = _UNCHECKED.get(method_class)
    if subclass is None:
        # No `__slots__` of its own: pamqp encodes the fields its class lists there.
        subclass = type(method_class.__name__, (method_class,), {"validate": _no_check})
        _UNCHECKED[method_class] = subclass
    return cast(M, subclass(**fields))


def _no_check(_method: Method) -> None:
    return None


class AmqpClosed(EndpointFailure):
    """The broker closed the connection or the channel: `<code> <text>`."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        super().__init__(f"{reply_code} {reply_text}")
        self.reply_code = reply_code


@dataclass(frozen=True, slots=True)
class Delivery:
    delivery_tag: int
    exchange: str
    routing_key: str
    redelivered: bool
    properties: dict[str, Any]
    body: bytes
    raw_properties: bytes  # `properties` as the content header carried them


class Deliveries:
    """Deliveries waiting to be taken, at most `limit`; `next` raises once the connection failed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: deque[Delivery] = deque()
        self._changed = asyncio.Event()
        self._failure: EndpointFailure | None = None

    def full(self) -> bool:
        return len(self._items) >= self.limit

    def push(self, delivery: Delivery) -> None:
        self._items.append(delivery)
        self._changed.set()

    def fail(self, failure: EndpointFailure, *, keep: bool = False) -> None:
        """End the buffer with `failure`: at once, or after what it holds when `keep` (those
        can still be acknowledged: only the consumer is gone, not the channel)."""
        if self._failure is None:
            self._failure = failure
        if not keep:
            self._items.clear()
        self._changed.set()

    async def next(self) -> Delivery:
        while not self._items:
            if self._failure is not None:
                raise self._failure
            self._changed.clear()
            await self._changed.wait()
        delivery = self._items.popleft()
        self._changed.set()  # room for a reader waiting on `room`
        return delivery

    async def room(self) -> None:
        while self.full() and self._failure is None:
            self._changed.clear()
            await self._changed.wait()


@dataclass(frozen=True, slots=True)
class _Deliver:
    """basic.deliver's fields, less the consumer tag (one consumer per connection)."""

    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str


@dataclass(slots=True)
class _Incoming:
    """A delivery whose content frames are still arriving (`deliver` None: a basic.return, dropped)."""

    deliver: _Deliver | None
    properties: dict[str, Any] | None = None
    raw_properties: bytes = b""
    size: int = 0
    received: int = 0
    chunks: list[bytes] | None = None  # None until the content header came


async def connect(uri: AmqpUri, local: LocalBroker | None = None) -> AmqpConnection:
    """An open connection with channel 1 open; raises EndpointFailure if it cannot be made."""
    try:
        async with asyncio.timeout(uri.connection_timeout):
            if uri.is_local:
                if local is None:
                    raise EndpointFailure("a URI with no host means this broker, and there is none here")
                reader, writer = await local.open_connection(uri.vhost)
            else:
                tls = uri.tls_context()
                server_name = (uri.server_name or uri.host) if tls is not None else None
                reader, writer = await asyncio.open_connection(
                    uri.host, uri.port, ssl=tls, server_hostname=server_name, limit=FRAME_MAX * 2
                )
            connection = AmqpConnection(reader, writer)
            try:
                await connection.handshake(uri)
                await connection.open_channel()
            except Exception:
                await connection.close()
                raise
            except BaseException:  # cancelled (the link stops): no time for a close handshake
                connection.abort()
                raise
            return connection
    except TimeoutError:
        raise EndpointFailure(f"timed out connecting to {uri.redacted()}") from None
    except (OSError, ValueError) as error:  # refused, unreachable, TLS failure, a bad certificate file
        raise EndpointFailure(f"cannot connect to {uri.redacted()}: {error}") from None


class AmqpConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.frame_max = FRAME_MAX
        self.heartbeat = 0
        self._failure: EndpointFailure | None = None
        self._loop = asyncio.get_running_loop()
        self._failed: asyncio.Future[None] = self._loop.create_future()
        self._channel_failure: EndpointFailure | None = None
        self._rpc_lock = asyncio.Lock()
        self._reply: asyncio.Future[Method] | None = None
        self._incoming: _Incoming | None = None
        self.deliveries = Deliveries(UNLIMITED_BUFFER)
        self._consumer_tag = ""
        self._wait_for_room = False  # no prefetch bounds the deliveries: stop reading when the buffer is full
        self._confirming = False
        self._publish_tag = 0
        self._last_route: tuple[str, str] | None = None
        self._publish_method = b""  # basic.publish's payload for `_last_route`
        self._confirms: dict[int, asyncio.Future[None]] = {}  # delivery tag -> its confirm, in order
        self._confirm_room = asyncio.Event()  # set when a confirm came, for a publish waiting on MAX_UNCONFIRMED
        self._unblocked = asyncio.Event()
        self._unblocked.set()
        self._last_received = self._last_sent = time.monotonic()
        self._outgoing = bytearray()  # written at the end of this turn of the event loop
        self._flush_scheduled = False
        self._received = b""  # read from the socket; frames are parsed from `_parsed` on
        self._parsed = 0
        self._settlements = SettledTags()
        self._tasks: list[asyncio.Task[None]] = []

    # -- the handshake, before the reader task runs ---------------------------------

    async def handshake(self, uri: AmqpUri) -> None:
        self._write(PROTOCOL_HEADER)
        await self._expect_handshake(commands.Connection.Start)
        response = f"\0{uri.username}\0{uri.password}"
        properties: FieldTable = {"product": "Lavin shovel", "capabilities": CAPABILITIES}
        self._send(0, commands.Connection.StartOk(client_properties=properties, mechanism="PLAIN", response=response))
        tune = await self._expect_handshake(commands.Connection.Tune)
        self.frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        # As RabbitMQ's clients negotiate: the smaller value, unless one side says 0 (none).
        wanted, offered = uri.heartbeat, tune.heartbeat or 0
        self.heartbeat = min(wanted, offered) if wanted and offered else max(wanted, offered)
        channel_max = min(tune.channel_max, CHANNEL) if tune.channel_max else CHANNEL
        self._send(0, commands.Connection.TuneOk(channel_max, self.frame_max, self.heartbeat))
        self._send(0, commands.Connection.Open(virtual_host=uri.vhost))
        await self._expect_handshake(commands.Connection.OpenOk)
        self._tasks.append(asyncio.create_task(self._read_loop()))
        if self.heartbeat:
            self._tasks.append(asyncio.create_task(self._heartbeat_loop()))

    async def _expect_handshake(self, kind: type[M]) -> M:
        while True:
            frame_type, channel, payload = await self._read_frame()
            if frame_type == FRAME_HEARTBEAT:
                continue
            method = _decode_method(payload) if frame_type == FRAME_METHOD else None
            if isinstance(method, commands.Connection.Close):
                self._send(0, commands.Connection.CloseOk())
                raise _closed(method)
            if not isinstance(method, kind) or channel != 0:
                raise EndpointFailure(f"the broker sent {_name(method)} instead of {kind.name}")
            return method

    # -- the channel ------------------------------------------------------------------

    async def open_channel(self) -> None:
        """Open channel 1, again after the broker closed it (a passive declare's 404)."""
        self._channel_failure = None
        self._confirming = False
        self._publish_tag = 0
        self._settlements = SettledTags()  # delivery tags start again at 1 on a new channel
        await self._call(commands.Channel.Open(), commands.Channel.OpenOk)

    async def confirm_select(self) -> None:
        await self._call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        self._confirming = True

    async def qos(self, prefetch_count: int) -> None:
        await self._call(commands.Basic.Qos(prefetch_count=prefetch_count), commands.Basic.QosOk)

    async def queue_declare(
        self,
        queue: str,
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: FieldTable | None = None,
    ) -> commands.Queue.DeclareOk:
        declare = unchecked(
            commands.Queue.Declare,
            queue=queue,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        return await self._call(declare, commands.Queue.DeclareOk)

    async def exchange_exists(self, exchange: str) -> None:
        """A passive exchange.declare: raises AmqpClosed 404 when there is no such exchange."""
        await self._call(
            unchecked(commands.Exchange.Declare, exchange=exchange, passive=True), commands.Exchange.DeclareOk
        )

    async def queue_bind(
        self, queue: str, exchange: str, routing_key: str, arguments: FieldTable | None = None, *, unbind: bool = False
    ) -> None:
        """queue.bind, or queue.unbind with `unbind`."""
        method, reply = (
            (commands.Queue.Unbind, commands.Queue.UnbindOk) if unbind else (commands.Queue.Bind, commands.Queue.BindOk)
        )
        fields = {"queue": queue, "exchange": exchange, "routing_key": routing_key, "arguments": arguments}
        await self._call(unchecked(method, **fields), reply)

    async def consume(self, queue: str, *, prefetch_count: int, no_ack: bool = False) -> Deliveries:
        """Start consuming `queue`; deliveries go to the returned buffer, `prefetch_count` at most."""
        self._wait_for_room = no_ack or not prefetch_count
        self.deliveries = Deliveries(UNLIMITED_BUFFER if self._wait_for_room else prefetch_count)
        await self.consume_again(queue, no_ack=no_ack)
        return self.deliveries

    @property
    def consuming_started(self) -> bool:
        """Whether `consume` was called: `consume_again` then fills the same buffer."""
        return bool(self._consumer_tag)

    async def consume_again(self, queue: str, *, no_ack: bool = False) -> None:
        """Consume `queue` into the same buffer (after `cancel`): unsettled deliveries stay."""
        consumed = await self._call(
            unchecked(commands.Basic.Consume, queue=queue, no_ack=no_ack), commands.Basic.ConsumeOk
        )
        self._consumer_tag = consumed.consumer_tag or ""

    async def cancel(self) -> None:
        """Stop the consumer; what it delivered stays to be settled."""
        await self._call(commands.Basic.Cancel(consumer_tag=self._consumer_tag), commands.Basic.CancelOk)

    # Settling after the channel closed would be a channel error: the broker requeued those already.
    def ack(self, delivery_tag: int) -> None:
        """Acknowledge a delivery at the end of this turn of the event loop, with the others
        acknowledged in it: one `multiple` ack where they are contiguous."""
        if self._channel_failure is None and self._failure is None:
            self._settlements.ack_later(delivery_tag)
            self._schedule_flush()

    def nack(self, delivery_tag: int, *, requeue: bool = True) -> None:
        if self._channel_failure is None:
            self._write(
                SETTLE_FRAME.pack(FRAME_METHOD, CHANNEL, SETTLE_SIZE, BASIC_NACK, delivery_tag, requeue << 1, FRAME_END)
            )
            self._settlements.settled(delivery_tag)  # after the write: no multiple ack before it may cover it

    async def publish(self, exchange: str, routing_key: str, body: bytes, properties: bytes) -> asyncio.Future[None]:
        """Publish one message with its encoded `properties`, waiting while the broker blocks
        publishers or too many are unconfirmed. The future completes on the broker's ack (at
        once without confirms) and fails on a nack or when the connection or channel
        closes. Raises ValueError for a name longer than a short string holds."""
        route = (exchange, routing_key)
        if route != self._last_route:  # a shovel mostly publishes to one place: encode it once
            method = b"".join((BASIC_PUBLISH_HEAD, _shortstr(exchange), _shortstr(routing_key), b"\x00"))
            self._last_route, self._publish_method = route, method
        method = self._publish_method
        if not self._unblocked.is_set():
            await self.watch(self._unblocked.wait())
        while self._confirming and len(self._confirms) >= MAX_UNCONFIRMED:
            self._confirm_room.clear()
            await self.watch(self._confirm_room.wait())
        self._raise_if_failed()
        confirmed: asyncio.Future[None] = self._loop.create_future()
        step = self.frame_max - FRAME_OVERHEAD
        frames = [
            FRAME_HEAD.pack(FRAME_METHOD, CHANNEL, len(method)),
            method,
            FRAME_END_BYTE,
            FRAME_HEAD.pack(FRAME_HEADER, CHANNEL, CONTENT_HEAD.size + len(properties)),
            CONTENT_HEAD.pack(60, 0, len(body)),
            properties,
            FRAME_END_BYTE,
        ]
        if len(body) <= step:
            if body:
                frames += (FRAME_HEAD.pack(FRAME_BODY, CHANNEL, len(body)), body, FRAME_END_BYTE)
        else:
            frames += (_frame(FRAME_BODY, CHANNEL, body[start : start + step]) for start in range(0, len(body), step))
        self._write(b"".join(frames))
        if len(self._outgoing) >= FRAME_MAX:  # a burst of publishes: hand it to the transport, which pushes back
            self._flush()
        if self._confirming:
            self._publish_tag += 1
            self._confirms[self._publish_tag] = confirmed
        else:
            confirmed.set_result(None)
        try:
            await self._writer.drain()
        except ConnectionError as error:
            self._fail(EndpointFailure(f"connection lost: {error}"))
        if not confirmed.done():
            return confirmed  # the confirm, or the failure, comes with it
        self._raise_if_failed()
        return confirmed

    # -- waiting and failing -----------------------------------------------------------

    async def watch(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, or raise the connection's failure if that comes first."""
        task = asyncio.ensure_future(awaitable)
        if self._failure is not None or self._channel_failure is not None:
            task.cancel()
            self._raise_if_failed()
        try:
            await asyncio.wait((task, self._failed), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # a timeout: what we waited for is not wanted any more
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            self._raise_if_failed()
        return task.result()

    def _raise_if_failed(self) -> None:
        failure = self._failure or self._channel_failure
        if failure is not None:
            raise failure

    def _fail_channel(self, failure: EndpointFailure) -> None:
        """Fail what waits on the channel: the pending call, the confirms, the deliveries."""
        if self._channel_failure is None:
            self._channel_failure = failure
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(failure)
        confirms, self._confirms = self._confirms, {}
        self._confirm_room.set()
        for confirmed in confirms.values():
            if not confirmed.done():
                confirmed.set_exception(failure)
        self.deliveries.fail(failure)

    def _fail(self, failure: EndpointFailure) -> None:
        """The connection is gone: fail everything and drop the socket."""
        if self._failure is not None:
            return
        self._failure = failure
        self._fail_channel(failure)
        self._failed.set_exception(failure)
        self._failed.exception()  # retrieved: a failure nobody waits for is not an error
        self._unblocked.set()
        self.abort()

    def abort(self) -> None:
        self._flush()  # a close-ok still waiting to go
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._writer.transport.close()  # sends what is buffered (a close-ok) first

    async def close(self) -> None:
        """Close politely if the connection still works, within CLOSE_TIMEOUT; never raises."""
        if self._failure is None and self._tasks:  # logged in, and the reader takes the close-ok
            with contextlib.suppress(EndpointFailure, TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    close = commands.Connection.Close(reply_code=200, reply_text="OK", class_id=0, method_id=0)
                    await self._call(close, commands.Connection.CloseOk, 0)
                    self._writer.transport.abort()  # nothing left to say, and no TLS close_notify to wait for
        self._fail(EndpointFailure("connection closed"))
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self._writer.wait_closed()
        except (OSError, TimeoutError):  # gone already, or a peer that never finishes TLS shutdown
            self._writer.transport.abort()

    # -- frames -------------------------------------------------------------------------

    async def _call(self, method: Method, reply: type[M], channel: int = CHANNEL) -> M:
        """Send a synchronous method and wait for its reply."""
        async with self._rpc_lock:
            self._raise_if_failed()
            self._reply = self._loop.create_future()
            self._send(channel, method)
            answer = await self.watch(self._reply)
            if not isinstance(answer, reply):
                failure = EndpointFailure(f"the broker sent {_name(answer)} instead of {reply.name}")
                self._fail(failure)
                raise failure
            return answer

    def _send(self, channel: int, method: Method) -> None:
        self._write(pamqp_frame.marshal(method, channel))

    def _write(self, data: bytes) -> None:
        """Queue `data` for the socket: what one turn of the event loop writes goes out in one
        send (acks and publishes come in bursts; a syscall each would cost more than they do)."""
        if self._failure is None:
            self._schedule_flush()
            self._put_acks()  # acks settled earlier go first: none may come after a close
            self._outgoing += data

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _put_acks(self) -> None:
        if self._channel_failure is None and self._failure is None:
            for tag, multiple in self._settlements.take_acks():
                self._outgoing += SETTLE_FRAME.pack(
                    FRAME_METHOD, CHANNEL, SETTLE_SIZE, BASIC_ACK, tag, multiple, FRAME_END
                )

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._put_acks()
        if self._outgoing:
            self._last_sent = time.monotonic()
            if not self._writer.transport.is_closing():
                self._writer.write(bytes(self._outgoing))
        self._outgoing.clear()

    async def _read_frame(self) -> tuple[int, int, bytes]:
        while (frame := self._next_frame()) is None:
            await self._receive()
        return frame

    def _next_frame(self) -> tuple[int, int, bytes] | None:
        """The next whole frame among the bytes received, or None until more come."""
        data, start = self._received, self._parsed
        if len(data) - start < FRAME_HEAD.size:
            return None
        frame_type, channel, size = FRAME_HEAD.unpack_from(data, start)
        if size > self.frame_max - FRAME_OVERHEAD:
            raise EndpointFailure(f"the broker sent a frame of {size} bytes, over frame_max {self.frame_max}")
        end = start + FRAME_HEAD.size + size
        if len(data) <= end:
            return None
        if data[end] != FRAME_END:
            raise EndpointFailure("the broker sent a frame without its end octet")
        self._parsed = end + 1
        return frame_type, channel, data[start + FRAME_HEAD.size : end]

    async def _receive(self) -> None:
        """Read what the socket has, up to READ_SIZE, after the part of a frame still unparsed."""
        try:
            chunk = await self._reader.read(READ_SIZE)
        except OSError as error:
            raise EndpointFailure(f"connection lost: {error}") from None
        if not chunk:
            raise EndpointFailure("connection lost: closed by the broker")
        self._received = self._received[self._parsed :] + chunk
        self._parsed = 0
        self._last_received = time.monotonic()

    async def _read_loop(self) -> None:
        try:
            while True:
                frame = self._next_frame()
                if frame is None:
                    await self._receive()
                    continue
                frame_type, channel, payload = frame
                if frame_type == FRAME_METHOD:
                    method_id = METHOD_ID.unpack_from(payload)[0]
                    if method_id == BASIC_DELIVER:
                        self._incoming = _Incoming(_decode_deliver(payload))
                    elif method_id in (BASIC_ACK, BASIC_NACK):
                        tag = DELIVERY_TAG.unpack_from(payload, METHOD_ID.size)[0]
                        bits = payload[METHOD_ID.size + DELIVERY_TAG.size]
                        self._on_confirm(method_id == BASIC_ACK, tag, multiple=bool(bits & 1))
                    else:
                        self._on_method(channel, _decode_method(payload))
                elif frame_type in (FRAME_HEADER, FRAME_BODY):
                    self._on_content(frame_type, payload)
                elif frame_type != FRAME_HEARTBEAT:
                    raise EndpointFailure(f"the broker sent a frame of unknown type {frame_type}")
                if self._incoming is None and self._wait_for_room and self.deliveries.full():
                    await self.deliveries.room()  # no prefetch holds the broker back: TCP does
        except EndpointFailure as failure:
            self._fail(failure)
        except (ValueError, IndexError, struct.error, UnmarshalingException) as error:  # an undecodable frame
            self._fail(EndpointFailure(f"the broker sent a malformed frame: {error}"))

    def _on_method(self, channel: int, method: Method) -> None:
        if isinstance(method, commands.Connection.Close):
            self._send(0, commands.Connection.CloseOk())
            raise _closed(method)
        if isinstance(method, commands.Channel.Close):
            self._send(CHANNEL, commands.Channel.CloseOk())
            self._fail_channel(_closed(method))
        elif isinstance(method, commands.Basic.Return):
            self._incoming = _Incoming(None)
        elif isinstance(method, commands.Basic.Cancel):
            self.deliveries.fail(
                EndpointFailure("the broker cancelled the consumer (the queue was deleted?)"), keep=True
            )
        elif isinstance(method, commands.Connection.Blocked):
            self._unblocked.clear()
        elif isinstance(method, commands.Connection.Unblocked):
            self._unblocked.set()
        elif self._reply is not None and not self._reply.done():
            self._reply.set_result(method)
        else:
            raise EndpointFailure(f"the broker sent an unexpected {_name(method)} on channel {channel}")

    def _on_confirm(self, acked: bool, last: int, *, multiple: bool) -> None:
        if multiple:  # tags were added in increasing order: stop at the first one past `last`
            tags = list(itertools.takewhile(lambda tag: tag <= last, self._confirms))
        else:
            tags = [last] if last in self._confirms else []
        if tags:
            self._confirm_room.set()
        for tag in tags:
            confirmed = self._confirms.pop(tag)
            if confirmed.done():
                continue
            if acked:
                confirmed.set_result(None)
            else:
                confirmed.set_exception(EndpointFailure("the broker refused the message (basic.nack)"))

    def _on_content(self, frame_type: int, payload: bytes) -> None:
        incoming = self._incoming
        if incoming is None:
            raise EndpointFailure("the broker sent content without a delivery")
        if frame_type == FRAME_HEADER:
            if incoming.chunks is not None:
                raise EndpointFailure("the broker sent a second content header")
            _, _, incoming.size = CONTENT_HEAD.unpack_from(payload)
            if incoming.size > MAX_BODY_SIZE:
                raise EndpointFailure(f"the broker sent a body of {incoming.size} bytes, over {MAX_BODY_SIZE}")
            incoming.raw_properties = payload[CONTENT_HEAD.size :]
            incoming.properties = decode_properties(incoming.raw_properties)
            incoming.chunks = []
        elif incoming.chunks is None or incoming.received + len(payload) > incoming.size:
            raise EndpointFailure("the broker sent a body frame beyond the content header's size")
        else:
            incoming.chunks.append(payload)
            incoming.received += len(payload)
        if incoming.received == incoming.size:
            self._incoming = None
            if incoming.deliver is not None:
                self._deliver(incoming)

    def _deliver(self, incoming: _Incoming) -> None:
        if self.deliveries.full() and not self._wait_for_room:
            raise EndpointFailure("the broker sent more unacknowledged deliveries than the prefetch count")
        deliver = incoming.deliver
        assert deliver is not None  # a basic.return's content is dropped before this
        delivery = Delivery(
            deliver.delivery_tag,
            deliver.exchange,
            deliver.routing_key,
            deliver.redelivered,
            incoming.properties or {},
            b"".join(incoming.chunks or ()),
            incoming.raw_properties,
        )
        self.deliveries.push(delivery)

    async def _heartbeat_loop(self) -> None:
        """Send a heartbeat when idle for half the interval; two intervals of silence from
        the broker mean it is gone."""
        interval = self.heartbeat
        while True:
            await asyncio.sleep(interval / 2)
            now = time.monotonic()
            if now - self._last_received > 2 * interval:
                self._fail(EndpointFailure(f"missed heartbeats from the broker ({2 * interval}s of silence)"))
                return
            if now - self._last_sent >= interval / 2:
                self._write(_frame(FRAME_HEARTBEAT, 0, b""))


def _frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + bytes((FRAME_END,))


class SettledTags:
    """The channel's delivery tags as the consumer settles them, to send acks that are settled
    in one turn of the event loop as one `multiple` ack where that acks nothing else: up to a
    tag, every tag must be settled already or in this batch. The rest go one by one."""

    def __init__(self) -> None:
        self._floor = 0  # every tag up to this one is settled
        self._above: set[int] = set()  # settled tags past the floor
        self._acks: list[int] = []  # to send at the end of this turn

    def ack_later(self, tag: int) -> None:
        self._acks.append(tag)

    def settled(self, tag: int) -> None:
        """`tag` was settled by other means (a nack), sent already."""
        self._above.add(tag)
        self._raise_floor()

    def take_acks(self) -> list[tuple[int, bool]]:
        """The acks to send now: (tag, multiple) each."""
        if not self._acks:
            return []
        acks, self._acks = sorted(self._acks), []
        self._raise_floor()
        covered = 0  # how many of `acks` one multiple ack sends
        while covered < len(acks) and acks[covered] == self._floor + 1:
            self._floor = acks[covered]
            covered += 1
            self._raise_floor()
        rest = acks[covered:]
        self._above.update(rest)
        self._raise_floor()
        first = [(acks[covered - 1], covered > 1)] if covered else []
        return first + [(tag, False) for tag in rest]

    def _raise_floor(self) -> None:
        while self._floor + 1 in self._above:
            self._floor += 1
            self._above.discard(self._floor)


def _shortstr(text: str) -> bytes:
    data = text.encode()
    if len(data) > 255:
        raise ValueError(f"{text[:40]!r}... is longer than the 255 bytes of a short string")
    return bytes((len(data),)) + data


def _read_shortstr(payload: bytes, offset: int) -> tuple[str, int]:
    end = offset + 1 + payload[offset]
    if end > len(payload):
        raise ValueError("a short string runs past the end of its frame")
    return payload[offset + 1 : end].decode(), end


def _decode_deliver(payload: bytes) -> _Deliver:
    offset = METHOD_ID.size + 1 + payload[METHOD_ID.size]  # past the consumer tag
    delivery_tag = DELIVERY_TAG.unpack_from(payload, offset)[0]
    offset += DELIVERY_TAG.size
    redelivered = bool(payload[offset] & 1)
    exchange, offset = _read_shortstr(payload, offset + 1)
    routing_key, _ = _read_shortstr(payload, offset)
    return _Deliver(delivery_tag, redelivered, exchange, routing_key)


def _decode_method(payload: bytes) -> Method:
    index = METHOD_ID.unpack_from(payload)[0]
    method_class = commands.INDEX_MAPPING.get(index)
    if method_class is None:
        raise EndpointFailure(f"the broker sent unknown method {index >> 16}.{index & 0xFFFF}")
    method: Method = method_class()
    method.unmarshal(payload[METHOD_ID.size :])
    return method


def _closed(method: commands.Connection.Close | commands.Channel.Close) -> AmqpClosed:
    return AmqpClosed(method.reply_code or 0, method.reply_text or "")


def _name(method: Method | None) -> str:
    return "content" if method is None else method.name
