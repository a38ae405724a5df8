"""A channel of a follower's read session: basic.qos, basic.consume of a stream queue
(and of direct reply-to), basic.cancel, the settling methods (they return prefetch credit:
a stream keeps its messages), queue.declare passive, and the stream-info request. Anything
else is refused with 540 and the leader's address: the follower is read-only."""

from __future__ import annotations

import asyncio
import secrets
import struct
from typing import TYPE_CHECKING, Any, Final

from lavin.amqp import codec
from lavin.api import Message, errors
from lavin.broker.queues.stream_consumer import OFFSET_ARGUMENT, offset_in
from lavin.broker.queues.stream_info import STREAM_INFO_ADDRESS, stream_info_answer
from lavin.clustering.replica_consumer import ReplicaConsumer, ReplicaStream
from pamqp import commands

if TYPE_CHECKING:
    from lavin.clustering.read_session import ReadSession

DIRECT_REPLY_TO: Final = "amq.rabbitmq.reply-to"
MAX_REQUEST_BODY: Final = 64 * 1024  # a stream-info request's body: a queue name
_BODY_SIZE: Final = struct.Struct(">Q")


class ReadChannel:
    def __init__(self, session: ReadSession, number: int) -> None:
        self.session = session
        self.number = number
        self.closing = False  # channel.close sent, close-ok awaited
        self._prefetch = 0
        self._global_prefetch = 0
        self._consumers: dict[str, ReplicaConsumer] = {}
        self._reply_tag: str | None = None
        self._next_tag = 1
        self._unsettled: dict[int, ReplicaConsumer] = {}  # delivery tag -> its consumer, ascending
        self._request: tuple[str, int, bytearray | None, bytes] | None = None  # routing key, size, body, properties

    def stop(self) -> None:
        for consumer in self._consumers.values():
            consumer.stop()
        self._consumers.clear()
        self._unsettled.clear()

    def method(self, method: Any) -> None:
        if isinstance(method, commands.Basic.Qos):
            if method.global_:
                self._global_prefetch = method.prefetch_count
            else:
                self._prefetch = method.prefetch_count
            self._send(commands.Basic.QosOk())
        elif isinstance(method, commands.Basic.Consume):
            self._consume(method)
        elif isinstance(method, commands.Basic.Cancel):
            self._cancel(method)
        elif isinstance(method, commands.Basic.Ack | commands.Basic.Nack):
            self._settle(method.delivery_tag, method.multiple)
        elif isinstance(method, commands.Basic.Reject):
            self._settle(method.delivery_tag or 0, False)
        elif isinstance(method, commands.Queue.Declare) and method.passive:
            self.session.later(self.number, method.index, self._declare(method.queue))
        elif (
            isinstance(method, commands.Basic.Publish)
            and not method.exchange
            and method.routing_key == STREAM_INFO_ADDRESS
        ):
            self._request = (method.routing_key, -1, None, b"")
        else:
            raise errors.NotImplemented_(self.session.leader_text())

    # ---- consumers -----------------------------------------------------------------------

    def _consume(self, method: commands.Basic.Consume) -> None:
        tag = method.consumer_tag or f"amq.ctag-{secrets.token_urlsafe(16)}"
        if tag in self._consumers or tag == self._reply_tag:
            raise errors.NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        if method.queue == DIRECT_REPLY_TO:
            if not method.no_ack:
                raise errors.PreconditionFailed("reply consumer cannot acknowledge")
            if self._reply_tag is not None:
                raise errors.PreconditionFailed("reply consumer already set")
            self._reply_tag = tag
            if not method.nowait:
                self._send(commands.Basic.ConsumeOk(tag))
            return
        reader = self.session.reader
        assert reader is not None
        reader.require_read(self.session.vhost, method.queue)
        self.session.later(self.number, method.index, self._start_consumer(method, tag))

    async def _start_consumer(self, method: commands.Basic.Consume, tag: str) -> None:
        stream = await self._open(method.queue)
        try:
            resource = stream.resource()
            if not self._prefetch:
                raise errors.PreconditionFailed(f"consumer prefetch count is not set for stream {resource}")
            if method.no_ack:
                raise errors.NotImplemented_(f"automatic acknowledgement not supported by stream {resource}")
            if self._global_prefetch:
                raise errors.NotImplemented_(f"{resource} does not support global qos")
            start = offset_in(stream, (method.arguments or {}).get(OFFSET_ARGUMENT))
        except BaseException:
            stream.replica.close()
            raise
        if self.closing or self.session.channels.get(self.number) is not self:
            stream.replica.close()
            return
        if not method.nowait:
            self._send(commands.Basic.ConsumeOk(tag))
        self._consumers[tag] = ReplicaConsumer(tag, stream, start, self._prefetch, self._deliver, self._unreadable)

    def _deliver(self, consumer: ReplicaConsumer, offset: int, message: Message) -> None:
        tag = self._next_tag
        self._next_tag += 1
        self._unsettled[tag] = consumer
        self._send_message(consumer.encoded_tag, tag, message)

    def _unreadable(self) -> None:
        self.session.close_with(errors.InternalError("the stream could not be read on this follower"))

    def _cancel(self, method: commands.Basic.Cancel) -> None:
        tag = method.consumer_tag or ""
        consumer = self._consumers.pop(tag, None)
        if consumer is not None:
            consumer.stop()
        elif tag == self._reply_tag:
            self._reply_tag = None
        if not method.nowait:
            self._send(commands.Basic.CancelOk(tag))

    def _settle(self, delivery_tag: int, multiple: bool) -> None:
        unsettled = self._unsettled
        if multiple:
            tags = [tag for tag in unsettled if delivery_tag == 0 or tag <= delivery_tag]
        elif delivery_tag in unsettled:
            tags = [delivery_tag]
        else:
            raise errors.PreconditionFailed(f"unknown delivery tag {delivery_tag}")
        for tag in tags:
            unsettled.pop(tag).settled(1)

    # ---- queue.declare passive and stream-info -------------------------------------------

    async def _open(self, queue: str) -> ReplicaStream:
        session = self.session
        stream = await ReplicaStream.open(session.config.data_dir, session.vhost, queue, session.horizons)
        if stream is None:
            raise errors.NotFound(f"no queue '{queue}' in vhost '{session.vhost}'")
        return stream

    async def _declare(self, queue: str) -> None:
        stream = await self._open(queue)
        count = stream.next_offset - stream.first_offset
        stream.replica.close()
        self.session.send(codec.declare_ok_frame(self.number, queue, count, 0))

    def content(self, kind: int, payload: bytes) -> None:
        """A content header or body frame: only a stream-info request has content here."""
        if self._request is None:
            raise errors.UnexpectedFrame("content without basic.publish")
        routing_key, size, body, properties = self._request
        if kind == codec.FRAME_HEADER and body is None:
            size = _BODY_SIZE.unpack_from(payload, 4)[0]
            if size > MAX_REQUEST_BODY:
                self._request = None
                raise errors.PreconditionFailed(f"a stream-info request of {size} bytes; a queue name is its body")
            body, properties = bytearray(), payload[12:]
        elif kind == codec.FRAME_BODY and body is not None:
            body += payload
        else:
            raise errors.UnexpectedFrame("content header and body out of order")
        self._request = (routing_key, size, body, properties)
        if len(body) >= size:
            self._request = None
            self._answer(Message("", routing_key, properties, bytes(body[:size]), 0))

    def _answer(self, request: Message) -> None:
        try:
            reply_to = request.props.get("reply_to")
        except ValueError:
            return  # properties nobody could decode: as the leader, it stays unroutable
        if not reply_to:
            return
        if not reply_to.startswith(DIRECT_REPLY_TO):
            raise errors.NotImplemented_(self.session.leader_text())
        if self._reply_tag is None:
            raise errors.PreconditionFailed("fast reply consumer does not exist")
        self.session.later(self.number, commands.Basic.Publish.index, self._reply(request))

    async def _reply(self, request: Message) -> None:
        session = self.session
        name = request.body.decode("utf-8", errors="replace")
        stream = await ReplicaStream.open(session.config.data_dir, session.vhost, name, session.horizons)
        info: Any = "does not exist"
        if stream is not None:
            try:
                info = await asyncio.to_thread(stream.info)
            finally:
                stream.replica.close()
        reply = stream_info_answer(session.vhost, request, lambda _: info)
        if reply is not None and self._reply_tag is not None:
            tag = self._next_tag
            self._next_tag += 1
            self._send_message(codec.shortstr(self._reply_tag), tag, reply)

    # ---- writing -------------------------------------------------------------------------

    def _send(self, method: Any) -> None:
        self.session.send(codec.method_frame(self.number, method))

    def _send_message(self, consumer_tag: bytes, delivery_tag: int, message: Message) -> None:
        frames = codec.deliver_frames(
            self.number, consumer_tag, delivery_tag, False, message.exchange, message.routing_key,
            message.properties, message.body, self.session.frame_max,
        )  # fmt: skip
        self.session.send(frames)


def _stream_info_request(publish: commands.Basic.Publish) -> bool:
    return not publish.exchange and publish.routing_key == STREAM_INFO_ADDRESS
