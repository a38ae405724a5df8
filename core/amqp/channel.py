"""A channel: publish assembly, deliveries and acks.

Control methods are decoded by pamqp and handled in `lavin.amqp.handlers`; basic.publish
and basic.ack, the two methods on the hot path, are decoded here by hand. Confirms,
transactions, consumers and direct reply-to have modules of their own.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable
from itertools import takewhile
from typing import TYPE_CHECKING, Any, Final

from lavin.amqp import codec
from lavin.amqp.authorization import Authorization
from lavin.amqp.confirms import PublisherConfirms
from lavin.amqp.consumer import ChannelConsumer
from lavin.amqp.consumer_timeout import ConsumerTimeout
from lavin.amqp.handlers import HANDLERS
from lavin.amqp.reply_consumer import ReplyConsumer
from lavin.amqp.transaction import Transaction
from lavin.api import errors
from lavin.api.message import Body, Message, check_properties
from lavin.api.printable import printable
from lavin.broker.queues.consumer import Settles
from lavin.broker.queues.expiry import message_expiration
from lavin.broker.queues.queue import NEEDS_SYNC, MessageQueue, Queue
from lavin.broker.routing.direct_reply import rewrite_reply_to
from lavin.broker.routing.exchange import Exchange
from lavin.broker.runtime.allocator import unfilled_bytearray
from lavin.broker.runtime.stats import ChannelSnapshot, ConsumerSnapshot
from lavin.broker.vhost import UNROUTED
from pamqp import commands

if TYPE_CHECKING:
    from lavin.amqp.connection import Connection
    from lavin.broker.vhost import VHost

log = logging.getLogger(__name__)

_ACK_ARGS: Final = struct.Struct(">QB")
_EXPIRATION_OR_REPLY_TO: Final = 0x03  # flags 0x0100 and 0x0200: the high byte of the flag word
_HEADER_ARGS: Final = struct.Struct(">HHQ")
_USER_ID: Final = 0x10  # flag 0x0010: the low byte of the flag word
_IMMEDIATE: Final = 0x02  # the second bit of basic.publish's flags
# Bodies of several frames allocated whole before their frames are in, across connections.
PREALLOCATED_BODIES_MAX: Final = 256 * 1024 * 1024

# An unacked delivery: where it settles, the store's message id, and the consumer (None
# for basic.get). Statistics ask the store about the message when they need its size.
Unacked = tuple[Settles, int, ChannelConsumer | None]


class Channel:
    def __init__(self, connection: Connection, channel_id: int, vhost: VHost, authorization: Authorization) -> None:
        self.connection = connection
        self.output = connection.output  # deliveries write here directly
        self.frame_max = connection.frame_max  # negotiated before any channel opens
        self.id = channel_id
        self.vhost = vhost
        self.authorization = authorization
        self.closing = False
        self.last_queue_name = ""
        self.server_named_queue = ""  # the name a server-named queue.declare under way gets
        # The exchange the last publish was allowed to write to, the Exchange of that name
        # (None for the default exchange) and, for a topic exchange, the routing key allowed:
        # publishing there again, while that Exchange is not deleted (and so cannot have
        # changed type), skips the checks, or checks only a new routing key.
        self._publish_allowed: str | None = None
        self._publish_allowed_exchange: Exchange | None = None
        self._publish_allowed_key: str | None = None  # None: not a topic exchange
        self.consumers: dict[str, ChannelConsumer] = {}
        # Tags of consumers the broker cancelled while this channel's queue.delete was under
        # way: RabbitMQ sends delete-ok before their basic.cancel. None: cancels go out at once.
        self._held_cancels: list[str] | None = None
        self.unacked: dict[int, Unacked] = {}
        self.consumer_unacked = 0
        self.consumer_prefetch = 0
        self.global_prefetch = 0
        self.reply_consumer: ReplyConsumer | None = None  # of the direct reply-to pseudo-queue
        self.last_delivery_tag = 0
        # publish assembly
        self._publish: tuple[str, str, bool] | None = None
        self._properties = b""
        self._last_publish_method = b""  # the last basic.publish that publish_whole decoded
        self._last_publish = ("", "", False)
        self._body_size = 0
        # A body that comes in several frames is gathered here: one buffer that grows in place
        # (a large one is a memory mapping of its own, given back whole), counted by the alarms.
        self._body: bytearray | None = None
        self._body_received = 0
        self._expect_header = False
        self.confirms: PublisherConfirms | None = None  # after confirm.select
        self.tx: Transaction | None = None  # after tx.select
        # Made by the first consumer or basic.get: a channel that never takes a delivery (an
        # idle connection's) carries none.
        self._consumer_timeout: ConsumerTimeout | None = None
        self.arm_timeout = False  # the next manual-ack delivery starts the consumer timeout's timer
        # Message statistics (lavin.broker.runtime.stats): only ever incremented.
        self.published = 0
        self.returned_unroutable = 0
        self.dropped_unroutable = 0
        self.routed = 0
        self.received_confirm = 0
        self.got_empty = 0
        self.delivered = 0
        self.delivered_no_ack = 0
        self.got = 0
        self.got_no_ack = 0
        self.redelivered = 0
        self.acked = 0
        self.message_sizes = connection.broker.stats.counters.message_sizes  # shared, the broker's

    # ---- frames in -----------------------------------------------------------------------

    def on_method(self, payload: bytes) -> None:
        if self.closing:
            self._method_while_closing(payload)
            return
        if self._expect_header:
            raise errors.UnexpectedFrame(
                "expected content header for class 60, got non content header frame instead", 60, 40
            )
        if self._publish is not None:
            raise errors.UnexpectedFrame("expected content body, got non content body frame instead", 60, 40)
        index: int = codec.METHOD_ID.unpack_from(payload, 0)[0]
        try:
            if index == codec.BASIC_PUBLISH:
                self._start_publish(payload)
            elif index == codec.BASIC_ACK:
                tag: int
                bits: int
                tag, bits = _ACK_ARGS.unpack_from(payload, 4)
                self.ack(tag, bool(bits & 1))
            else:
                method = self._decode(payload)
                handler = HANDLERS.get(type(method))
                if handler is None:
                    raise errors.CommandInvalid(f"method '{method.name}' is not allowed from a client")
                handler(self, method)
        except struct.error as exc:
            raise errors.SyntaxError_(f"malformed method arguments: {exc}") from None
        except errors.AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = index >> 16, index & 0xFFFF
            if exc.connection_level:
                raise
            self.close_with_error(exc)

    def _decode(self, payload: bytes) -> Any:
        """A control method through the connection's decoder. A name or key that is not
        UTF-8 closes only the channel (406), like a name RabbitMQ refuses, instead of
        failing the whole connection as a malformed frame."""
        try:
            return self.connection._decode(payload)
        except errors.FrameError:
            try:
                codec.decode_method(payload)
            except UnicodeDecodeError:
                raise errors.PreconditionFailed("invalid UTF-8 in a name or key") from None
            except ValueError:
                pass  # malformed: the frame error stands
            raise

    def _method_while_closing(self, payload: bytes) -> None:
        index: int = codec.METHOD_ID.unpack_from(payload, 0)[0]
        if index == commands.Channel.CloseOk.index:
            self.connection.channel_closed(self)
        elif index == commands.Channel.Close.index:
            self.output.send(codec.method_frame(self.id, commands.Channel.CloseOk()))
            self.connection.channel_closed(self)

    def _start_publish(self, payload: bytes) -> None:
        try:
            publish = _parse_publish(payload)
        except UnicodeDecodeError:
            raise errors.PreconditionFailed("invalid UTF-8 in a name or key") from None
        if publish is None:
            raise errors.FrameError(f"cannot decode {payload[4:36]!r}", 60, 40)
        self._authorize_publish(publish[0], publish[1])
        self._publish = publish
        self._expect_header = True

    def publish_whole(self, method: bytes, properties: bytes, body: bytes) -> bool:
        """A publish whose three frames arrived together skips the per-frame state machine.

        Returns False, having changed nothing, when anything is unusual: the frames then take
        the ordinary path, which gives every error its proper reply.
        """
        if self.closing or self._expect_header or self._publish is not None:
            return False
        if method == self._last_publish_method:  # publishers repeat themselves: decoded already
            publish = self._last_publish
        else:
            try:
                parsed = _parse_publish(method)
            except UnicodeDecodeError:
                return False  # the ordinary path refuses it
            if parsed is None:
                return False
            publish = self._last_publish = parsed
            self._last_publish_method = method
        if len(body) > self.connection.broker.config.max_message_size:
            return False
        try:
            self._authorize_publish(publish[0], publish[1])
        except errors.ChannelError as exc:  # the header and body that came with it go unread
            exc.class_id, exc.method_id = 60, 40
            self.close_with_error(exc)
            return True
        self._publish = publish
        self._properties = properties
        self._complete_publish(body)
        return True

    def _authorize_publish(self, exchange: str, routing_key: str) -> None:
        """basic.publish's checks (RabbitMQ's): write on the exchange and, on a topic
        exchange, the topic write permission on the routing key. Publishing again where the
        last publish was allowed costs three comparisons."""
        authorization = self.authorization
        if exchange == self._publish_allowed:
            allowed = self._publish_allowed_exchange
            if allowed is None or not allowed.deleted:  # None: the default exchange, which stays
                key = self._publish_allowed_key
                if key is not None and key != routing_key:
                    authorization.require_topic(exchange, "write", routing_key)
                    self._publish_allowed_key = routing_key
                return
        authorization.require("exchange", exchange, "write")
        target = self.vhost.exchanges.get(exchange) if exchange else None
        if target is None and exchange:  # refused when routed
            return
        key = None
        if target is not None and target.type_name == "topic":
            authorization.require_topic(exchange, "write", routing_key)
            key = routing_key
        self._publish_allowed = exchange
        self._publish_allowed_exchange = target
        self._publish_allowed_key = key

    def permissions_changed(self) -> None:
        """The user's permissions changed: the next publish is checked again."""
        self._publish_allowed = None
        self._publish_allowed_exchange = None
        self._publish_allowed_key = None

    def on_header(self, payload: bytes) -> None:
        if self.closing:
            return
        if not self._expect_header:
            raise errors.UnexpectedFrame("expected method frame, got non method frame instead")
        if len(payload) < 14:
            raise errors.FrameError("content header shorter than its fixed fields")
        class_id: int
        body_size: int
        class_id, _weight, body_size = _HEADER_ARGS.unpack_from(payload, 0)
        if class_id != codec.BASIC_CLASS:
            raise errors.UnexpectedFrame(f"content header for class {class_id}, expected 60")
        self._expect_header = False
        self._properties = payload[12:]
        connection = self.connection
        max_size = connection.broker.config.max_message_size
        if body_size > max_size:
            self._refuse_body(f"message size {body_size} is larger than configured max size {max_size}")
            return
        unfinished = connection.unfinished_body_bytes + body_size
        if unfinished > connection.max_unfinished_body_bytes:
            self._refuse_body(
                f"message size {body_size} would take this connection's unfinished message bodies to {unfinished} "
                f"bytes, over max_unfinished_body_bytes {connection.max_unfinished_body_bytes}"
            )
            return
        connection.unfinished_body_bytes = unfinished
        self._body_size = body_size
        self._body_received = 0
        if body_size == 0:
            self._complete_publish(b"")

    def _refuse_body(self, reason: str) -> None:
        """406 for the content header just read: the body that follows goes unread."""
        self._publish = None
        self.close_with_error(errors.PreconditionFailed(reason, 60, 40))

    def on_body(self, payload: bytes) -> None:
        if self.closing:
            return
        if self._expect_header:
            raise errors.UnexpectedFrame(
                "expected content header for class 60, got non content header frame instead", 60, 40
            )
        if self._publish is None:
            raise errors.UnexpectedFrame("expected method frame, got non method frame instead")
        received = self._body_received + len(payload)
        if received > self._body_size:
            raise errors.FrameError("content body frame exceeds remaining content size", 60, 40)
        body = self._body
        if body is None:
            if received == self._body_size:
                self._drop_body()
                self._complete_publish(payload)
                return
            self._body = body = self._new_body(payload)
        elif len(body) == self._body_size:  # allocated whole: filled in place
            body[self._body_received : received] = payload
            self.connection.alarms.unfilled_bodies -= len(payload)
        else:
            body += payload
            self.connection.alarms.body_grew(len(payload))
        self._body_received = received
        if received == self._body_size:
            self._drop_body()
            self._complete_publish(body)

    def body_sink(self, size: int) -> memoryview | None:
        """Where the payload of the body frame arriving now, `size` bytes, can be received
        in place: its slice of the body's buffer. None leaves the frame to `on_body`: any
        error, and a body that grows frame by frame."""
        if self.closing or self._expect_header or self._publish is None:
            return None
        start = self._body_received
        if start + size > self._body_size:
            return None
        body = self._body
        if body is None:
            body = self._body = self._whole_body()
            if body is None:
                return None
        elif len(body) != self._body_size:
            return None
        return memoryview(body)[start : start + size]

    def body_sink_filled(self, size: int) -> None:
        """The frame that `body_sink` gave a place to is in, end octet and all."""
        body = self._body
        if body is None:  # let go meanwhile: the channel closed
            return
        self._body_received += size
        self.connection.alarms.unfilled_bodies -= size
        if self._body_received == self._body_size:
            self._drop_body()
            self._complete_publish(body)

    def _new_body(self, first: bytes) -> bytearray:
        """The buffer a body of several frames is gathered in: allocated whole where
        `_whole_body` can, else grown as frames come."""
        body = self._whole_body()
        if body is None:
            self.connection.alarms.body_grew(len(first))
            return bytearray(first)
        body[: len(first)] = first
        self.connection.alarms.unfilled_bodies -= len(first)
        return body

    def _whole_body(self) -> bytearray | None:
        """A buffer of the whole body size, while that stays within a budget and under the
        memory watermark (growing one frame at a time, a buffer is moved and copied over
        and over); counted by the alarms as held from now on."""
        alarms = self.connection.alarms
        size = self._body_size
        if alarms.partial_bodies + size > PREALLOCATED_BODIES_MAX or not alarms.has_room_for(size):
            return None
        alarms.body_grew(size)
        alarms.unfilled_bodies += size
        return unfilled_bytearray(size)  # filled whole before the message exists

    def _drop_body(self) -> None:
        """Let go of the body being gathered (complete, or never to be), and of its share of
        the connection's unfinished bodies."""
        self.connection.unfinished_body_bytes -= self._body_size
        self._body_size = 0
        if self._body is not None:
            alarms = self.connection.alarms
            alarms.body_released(len(self._body))
            alarms.unfilled_bodies -= len(self._body) - self._body_received  # a body left unfinished
            self._body = None

    def _complete_publish(self, body: Body) -> None:
        publish = self._publish
        assert publish is not None
        self._publish = None
        exchange, routing_key, mandatory = publish
        properties = self._properties
        message = Message(exchange, routing_key, properties, body, self.connection.received_at)
        if len(properties) != 2 or properties[0] or properties[1]:  # not simply "no properties"
            try:
                check_properties(message)
            except ValueError as exc:
                raise errors.SyntaxError_(f"malformed properties in basic.publish: {exc}", 60, 40) from None
        try:
            if len(properties) > 1:
                if properties[0] & _EXPIRATION_OR_REPLY_TO:
                    message_expiration(message)  # 406 for an invalid expiration, before anything is stored
                    reply_consumer = self.reply_consumer
                    rewrite_reply_to(message, reply_consumer.address if reply_consumer is not None else None)
                if properties[1] & _USER_ID:
                    self._check_user_id(message)
            if self.tx is not None:
                self.vhost.publishable_exchange(exchange)  # fail now, as RabbitMQ does; route at commit
                self.tx.add_publish(exchange, mandatory, message)
                return
            self.route(exchange, mandatory, message)
        except errors.ChannelError as exc:
            exc.class_id, exc.method_id = 60, 40
            self.close_with_error(exc)

    def _check_user_id(self, message: Message) -> None:
        """406 when the user-id property names someone other than the authenticated user."""
        user = self.connection.user
        assert user is not None  # channels open only after login
        claimed = message.props.get("user_id")
        if claimed != user.name and "impersonator" not in user.tags:
            raise errors.PreconditionFailed(
                f"user_id property set to '{claimed}' but authenticated user was '{user.name}'"
            )

    def route(self, exchange: str, mandatory: bool, message: Message) -> bool:
        """Publish through the vhost and answer for it (return, confirm); returns True when
        the message must reach the disk before a confirm or commit-ok."""
        connection = self.connection
        status = self.vhost.publish(exchange, message, connection.flow)
        self.published += 1
        self.message_sizes.add(len(message.body))
        if not status & UNROUTED:
            self.routed += 1
        elif mandatory:
            self.returned_unroutable += 1
            self.output.send(
                codec.return_frame(self.id, 312, "NO_ROUTE", exchange, message.routing_key)
                + codec.content_frames(self.id, message.properties, message.body, self.frame_max)
            )
        else:
            self.dropped_unroutable += 1
        confirms = self.confirms
        if confirms is not None:
            self.received_confirm += 1
            confirms.published(status)
            connection.dirty_channels.add(self)
        return bool(status & NEEDS_SYNC)

    def end_of_batch(self) -> None:
        """The end of a socket read: send the confirms that may go out now."""
        if self.confirms is not None and not self.closing:
            self.confirms.send_due()

    # ---- deliveries ----------------------------------------------------------------------

    def next_delivery_tag(self) -> int:
        self.last_delivery_tag += 1
        return self.last_delivery_tag

    def deliver(
        self, consumer: ChannelConsumer, settles: Settles, message_id: int, message: Message, redelivered: bool
    ) -> None:
        self.last_delivery_tag += 1
        tag = self.last_delivery_tag
        queue = consumer.queue
        if redelivered:
            self.redelivered += 1
            queue.redelivered += 1
        if consumer.no_ack:
            self.delivered_no_ack += 1
            queue.delivered_no_ack += 1
            if message_id >= 0:  # -1: handed over without ever being stored
                settles.ack(message_id)
        else:
            self.delivered += 1
            queue.delivered += 1
            self.unacked[tag] = (settles, message_id, consumer)
            consumer.unacked += 1
            queue.unacked += 1
            self.consumer_unacked += 1
            if self.arm_timeout:
                self.consumer_timeout().watch(tag, consumer.queue)
        output = self.output
        frame_max = self.frame_max
        if len(message.body) > frame_max - codec.FRAME_OVERHEAD:
            parts = codec.deliver_parts(self.id, consumer.tag_bytes, tag, redelivered, message, frame_max)
            output.send_parts(parts)
            return
        output.send(consumer.frames.encode(tag, redelivered, message, frame_max))

    def start_reply_consumer(self, tag: str, no_ack: bool) -> None:
        if not no_ack:
            raise errors.PreconditionFailed("reply consumer cannot acknowledge")
        if self.reply_consumer is not None:
            raise errors.PreconditionFailed("reply consumer already set")
        self.reply_consumer = ReplyConsumer(self, tag)

    def stop_reply_consumer(self) -> None:
        if self.reply_consumer is not None:
            self.reply_consumer.stop()
            self.reply_consumer = None

    def get(self, queue: MessageQueue, no_ack: bool) -> None:
        item = queue.get()
        if item is None:
            self.got_empty += 1
            self.output.send(codec.method_frame(self.id, commands.Basic.GetEmpty()))
            return
        message_id, message, redelivered = item
        self.last_delivery_tag += 1
        tag = self.last_delivery_tag
        if redelivered:
            self.redelivered += 1
            queue.redelivered += 1
        if no_ack:
            self.got_no_ack += 1
            queue.got_no_ack += 1
            queue.ack(message_id)
        else:
            self.got += 1
            queue.got += 1
            self.unacked[tag] = (queue, message_id, None)
            queue.unacked += 1
            self.consumer_timeout().watch(tag, queue)  # RabbitMQ times out basic.get deliveries too
        self.output.send(
            codec.get_ok_frame(self.id, tag, redelivered, message.exchange, message.routing_key, queue.message_count)
            + codec.content_frames(self.id, message.properties, message.body, self.frame_max)
        )

    def resume_deliveries(self) -> None:
        for consumer in self.consumers.values():
            consumer.queue.schedule_drain()

    # ---- acks from the client ------------------------------------------------------------

    def ack(self, tag: int, multiple: bool) -> None:
        if self.tx is not None:
            self._take(tag, multiple, remove=False)
            self.tx.add_settlement(tag, multiple, None)
        else:
            self.ack_now(tag, multiple)

    def reject(self, tag: int, multiple: bool, requeue: bool) -> None:
        if self.tx is not None:
            self._take(tag, multiple, remove=False, rejecting=True)
            self.tx.add_settlement(tag, multiple, requeue)
        else:
            self.reject_now(tag, multiple, requeue)

    def ack_now(self, tag: int, multiple: bool) -> None:
        entries = self._take(tag, multiple)
        self.acked += len(entries)
        for settles, message_id, consumer in entries:
            settles.ack(message_id)
            if consumer is not None:
                consumer.queue.acked += 1
            elif isinstance(settles, Queue):  # a basic.get delivery
                settles.acked += 1
        self.resume_deliveries()

    def reject_now(self, tag: int, multiple: bool, requeue: bool) -> None:
        entries = self._take(tag, multiple, rejecting=True)
        if requeue:
            self._requeue(entries)
        else:
            for queue, message_id, _ in entries:
                queue.reject(message_id)
        self.resume_deliveries()

    def _take(self, tag: int, multiple: bool, remove: bool = True, rejecting: bool = False) -> list[Unacked]:
        """The unacked deliveries an ack/nack/reject names; 406 for an unknown tag. A nack or
        reject (`rejecting`) is refused, settling nothing, when a delivery's settle target
        says so (a stream's: 540)."""
        unacked = self.unacked
        if tag not in unacked:
            # Tag 0 with multiple means all; any other tag must itself be outstanding, even
            # when smaller ones are (as RabbitMQ: nothing is settled then).
            if tag or not multiple:
                raise errors.PreconditionFailed(f"unknown delivery tag {tag}")
            tags = list(unacked)
        elif multiple:
            # Tags are handed out in increasing order, so the dict holds them sorted.
            tags = list(takewhile(lambda t: t <= tag, unacked))
        else:
            tags = [tag]
        if rejecting:
            for t in tags:
                unacked[t][0].check_rejectable()
        if not remove:
            return []
        entries = [unacked.pop(t) for t in tags]
        self._forget(entries)
        return entries

    def _forget(self, entries: list[Unacked]) -> None:
        """These deliveries are no longer unacked: settled, or going back to their queues."""
        for settles, _, consumer in entries:
            if consumer is not None:
                consumer.unacked -= 1
                consumer.queue.unacked -= 1
                self.consumer_unacked -= 1
            elif isinstance(settles, Queue):  # a basic.get delivery
                settles.unacked -= 1

    def recover(self) -> None:
        """basic.recover: every unacked delivery goes back to its queue as redelivered."""
        entries = list(self.unacked.values())
        self.unacked.clear()
        self._forget(entries)
        self._requeue(entries)

    @staticmethod
    def _requeue(entries: Iterable[Unacked]) -> None:
        by_queue: dict[Settles, list[int]] = {}
        for queue, message_id, _ in entries:
            by_queue.setdefault(queue, []).append(message_id)
        for queue, message_ids in by_queue.items():
            queue.requeue(message_ids)

    def consumer_timeout(self) -> ConsumerTimeout:
        """The channel's consumer timeout, made on first use."""
        timeout = self._consumer_timeout
        if timeout is None:
            timeout = self._consumer_timeout = ConsumerTimeout(self)
        return timeout

    # ---- consumers -----------------------------------------------------------------------

    def add_consumer(self, consumer: ChannelConsumer) -> None:
        self.consumers[consumer.tag] = consumer
        self.consumer_timeout().consumer_added(consumer)
        consumer.queue.add_consumer(consumer)

    def cancel_consumer(self, tag: str) -> None:
        if self.reply_consumer is not None and self.reply_consumer.tag == tag:
            self.stop_reply_consumer()
            return
        consumer = self.consumers.pop(tag, None)
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)

    def consumer_cancelled_by_broker(self, consumer: ChannelConsumer) -> None:
        """The queue went away: tell the client (consumer_cancel_notify)."""
        if self.consumers.pop(consumer.tag, None) is None or self.closing:
            return
        capabilities = self.connection.client_properties.get("capabilities") or {}
        if not capabilities.get("consumer_cancel_notify"):
            return
        if self._held_cancels is not None:
            self._held_cancels.append(consumer.tag)
        else:
            self._send_cancel(consumer.tag)

    def hold_broker_cancels(self) -> None:
        """Keep the broker's basic.cancel frames back until `send_held_cancels`."""
        self._held_cancels = []

    def send_held_cancels(self) -> None:
        held, self._held_cancels = self._held_cancels, None
        for tag in held or ():
            if not self.closing:
                self._send_cancel(tag)

    def _send_cancel(self, tag: str) -> None:
        self.output.send(codec.method_frame(self.id, commands.Basic.Cancel(consumer_tag=tag, nowait=True)))

    # ---- what the management API reads ---------------------------------------------------

    def message_counts(self) -> dict[str, int]:
        """Its statistics counters under RabbitMQ's `message_stats` names."""
        confirms = self.confirms
        return {
            "publish": self.published,
            "confirm": confirms.confirmed if confirms is not None else 0,
            "return_unroutable": self.returned_unroutable,
            "drop_unroutable": self.dropped_unroutable,
            "deliver": self.delivered,
            "deliver_no_ack": self.delivered_no_ack,
            "get": self.got,
            "get_no_ack": self.got_no_ack,
            "get_empty": self.got_empty,
            "redeliver": self.redelivered,
            "ack": self.acked,
            "routed": self.routed,
            "received_confirm": self.received_confirm,
        }

    def snapshot(self) -> ChannelSnapshot:
        consumers = [
            ConsumerSnapshot(
                consumer.tag,
                consumer.queue.name,
                not consumer.no_ack,
                consumer.prefetch,
                consumer.exclusive,
                consumer.arguments,
                consumer.is_active(),
            )
            for consumer in self.consumers.values()
        ]
        return ChannelSnapshot(
            self,
            self.id,
            "closing" if self.closing else "running",
            self.consumer_prefetch,
            self.global_prefetch,
            len(self.unacked),
            self.confirms is not None,
            self.tx is not None,
            consumers,
            self.message_counts(),
            self.confirms.unconfirmed if self.confirms is not None else 0,
            self.tx.publishes if self.tx is not None else 0,
            self.tx.settlements if self.tx is not None else 0,
        )

    # ---- closing -------------------------------------------------------------------------

    def close_with_error(self, exc: errors.AMQPError) -> None:
        if self.closing:
            return
        self.release()
        self.closing = True
        log.info(
            "channel error on connection %s, vhost '%s', channel %d: %d %s",
            self.connection.peer,
            printable(self.vhost.name),
            self.id,
            exc.reply_code,
            printable(exc.reply_text),
        )
        self.output.send(
            codec.method_frame(
                self.id,
                commands.Channel.Close(
                    reply_code=exc.reply_code, reply_text=exc.reply_text, class_id=exc.class_id, method_id=exc.method_id
                ),
            )
        )

    def release(self) -> None:
        """Cancel consumers and requeue unacked deliveries (channel or connection closed)."""
        self.stop_reply_consumer()
        if self._consumer_timeout is not None:
            self._consumer_timeout.stop()
        for consumer in list(self.consumers.values()):
            self.consumers.pop(consumer.tag, None)
            consumer.queue.remove_consumer(consumer)
        entries = list(self.unacked.values())
        self.unacked.clear()
        self._forget(entries)
        self._requeue(entries)
        if self.tx is not None:
            self.tx.rollback()
        self._publish = None
        self._drop_body()


def _parse_publish(payload: bytes) -> tuple[str, str, bool] | None:
    """(exchange, routing key, mandatory) of a basic.publish payload, None when truncated.
    Raises UnicodeDecodeError for a name that is not UTF-8, and 540 for immediate=true,
    which RabbitMQ does not implement either."""
    try:
        offset = 6  # class, method, ticket
        size = payload[offset]
        exchange = payload[offset + 1 : offset + 1 + size].decode()
        offset += 1 + size
        size = payload[offset]
        routing_key = payload[offset + 1 : offset + 1 + size].decode()
        offset += 1 + size
        flags = payload[offset]
    except IndexError:
        return None
    if flags & _IMMEDIATE:
        raise errors.NotImplemented_("immediate=true", 60, 40)
    return exchange, routing_key, bool(flags & 1)
