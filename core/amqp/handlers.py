"""Control-path method handlers: one function per AMQP method a client may send.

Each takes the channel and the decoded pamqp method, does the work through the vhost,
and sends the reply unless the client asked for nowait.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lavin.amqp import codec
from lavin.amqp.confirms import PublisherConfirms
from lavin.amqp.consumer import ChannelConsumer
from lavin.amqp.transaction import Transaction
from lavin.api import errors
from lavin.broker.policy.arguments import parse_consumer_priority
from lavin.broker.queues.queue import MessageQueue, Queue
from lavin.broker.queues.stream_queue import StreamQueue
from lavin.broker.routing.direct_reply import ADDRESS_PREFIX, PSEUDO_QUEUE
from lavin.broker.vhost import check_not_default_exchange, check_queue_name, new_queue_name
from pamqp import commands as c

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel
    from lavin.api.auth import ResourceKind

Handler = Callable[["Channel", Any], None]


def _reply(channel: Channel, method: Any) -> None:
    channel.output.send(codec.method_frame(channel.id, method))


def _args(value: Any) -> dict[str, Any]:
    return dict(value or {})


def _queue_name(channel: Channel, name: str) -> str:
    """An empty queue name means the channel's last declared queue, as in RabbitMQ."""
    if name:
        return name
    if not channel.last_queue_name:
        raise errors.NotFound("no previously declared queue")
    return channel.last_queue_name


def _queue(channel: Channel, name: str) -> Queue:
    return channel.vhost.get_queue(_queue_name(channel, name), channel.connection)


def _authorize_binding(channel: Channel, kind: ResourceKind, destination: str, source: str, routing_key: str) -> None:
    """RabbitMQ's checks before a bind or unbind, in its order: write on the destination,
    read on the source exchange and, when that is a topic exchange, the topic read
    permission on the binding key."""
    authorization = channel.authorization
    authorization.require(kind, destination, "write")
    check_not_default_exchange(source)
    if kind == "exchange":
        check_not_default_exchange(destination)
    authorization.require("exchange", source, "read")
    exchange = channel.vhost.exchanges.get(source)
    if exchange is not None and exchange.type_name == "topic":
        authorization.require_topic(source, "read", routing_key)


def _message_queue(channel: Channel, name: str, operation: str) -> MessageQueue:
    """A queue that hands out and drops messages; 540 for a stream, as in RabbitMQ."""
    queue = _queue(channel, name)
    if not isinstance(queue, MessageQueue):
        raise errors.NotImplemented_(
            f"{operation} not supported by stream queues queue '{queue.name}' in vhost '{channel.vhost.name}'"
        )
    return queue


# ---- channel ---------------------------------------------------------------------------


def channel_open(channel: Channel, method: c.Channel.Open) -> None:
    raise errors.ChannelErrorConn(f"second 'channel.open' seen on channel {channel.id}")


def channel_close(channel: Channel, method: c.Channel.Close) -> None:
    channel.release()
    _reply(channel, c.Channel.CloseOk())
    channel.connection.channel_closed(channel)


def channel_close_ok(channel: Channel, method: c.Channel.CloseOk) -> None:
    """A close-ok for a close we never sent is ignored."""


def channel_flow(channel: Channel, method: c.Channel.Flow) -> None:
    if not method.active:
        raise errors.NotImplemented_("active=false")  # as RabbitMQ: consumers use basic.qos instead
    _reply(channel, c.Channel.FlowOk(active=True))


def channel_flow_ok(channel: Channel, method: c.Channel.FlowOk) -> None:
    """The broker never sends channel.flow, so a flow-ok needs nothing."""


# ---- exchanges -------------------------------------------------------------------------


def exchange_declare(channel: Channel, method: c.Exchange.Declare) -> None:
    name = method.exchange
    arguments = _args(method.arguments)
    if not method.passive:  # a passive declare needs no permission, as in RabbitMQ
        check_not_default_exchange(name)
        authorization = channel.authorization
        authorization.require("exchange", name, "configure")
        alternate = arguments.get("alternate-exchange")
        if isinstance(alternate, str) and name not in channel.vhost.exchanges:
            # A new exchange that sends elsewhere what it cannot route: read on it, write there.
            authorization.require("exchange", name, "read")
            authorization.require("exchange", alternate, "write")
    channel.vhost.declare_exchange(
        name,
        method.exchange_type,
        passive=bool(method.passive),
        durable=bool(method.durable),
        auto_delete=bool(method.auto_delete),
        internal=bool(method.internal),
        arguments=arguments,
    )
    if not method.nowait:
        _reply(channel, c.Exchange.DeclareOk())


def exchange_delete(channel: Channel, method: c.Exchange.Delete) -> None:
    channel.vhost.check_exchange_deletable(method.exchange)  # before the permission, as RabbitMQ
    channel.authorization.require("exchange", method.exchange, "configure")
    channel.vhost.delete_exchange(method.exchange, if_unused=bool(method.if_unused))
    if not method.nowait:
        _reply(channel, c.Exchange.DeleteOk())


def exchange_bind(channel: Channel, method: c.Exchange.Bind) -> None:
    _authorize_binding(channel, "exchange", method.destination, method.source, method.routing_key)
    vhost = channel.vhost
    destination = vhost.get_exchange(method.destination)
    source = vhost.get_exchange(method.source)
    vhost.bind(source, destination, method.routing_key, _args(method.arguments))
    if not method.nowait:
        _reply(channel, c.Exchange.BindOk())


def exchange_unbind(channel: Channel, method: c.Exchange.Unbind) -> None:
    vhost = channel.vhost
    _authorize_binding(channel, "exchange", method.destination, method.source, method.routing_key)
    destination = vhost.exchanges.get(method.destination)
    source = vhost.exchanges.get(method.source)
    # RabbitMQ answers unbind-ok when an end is missing: the binding is gone either way.
    if source is not None and destination is not None:
        vhost.unbind(source, destination, method.routing_key, _args(method.arguments))
    if not method.nowait:
        _reply(channel, c.Exchange.UnbindOk())


# ---- queues ----------------------------------------------------------------------------


def _declare_ok(channel: Channel, name: str, message_count: int, consumer_count: int) -> None:
    channel.output.send(codec.declare_ok_frame(channel.id, name, message_count, consumer_count))


def queue_declare(channel: Channel, method: c.Queue.Declare) -> None:
    if method.queue == PSEUDO_QUEUE:
        _declare_ok(channel, PSEUDO_QUEUE, 0, 0)  # the pseudo-queue always exists
        return
    name = method.queue
    if method.passive and name.startswith(ADDRESS_PREFIX):
        # A reply address exists while its requester consumes the pseudo-queue, as in RabbitMQ.
        if not channel.connection.broker.replies.is_live(name):
            raise errors.NotFound(f"no queue '{name}' in vhost '{channel.vhost.name}'")
        if not method.nowait:
            _declare_ok(channel, name, 0, 1)
        return
    arguments = _args(method.arguments)
    # A passive declare needs no permission, as in RabbitMQ.
    name = _queue_name(channel, name) if method.passive else _authorized_queue_name(channel, name, arguments)
    queue = channel.vhost.declare_queue(
        name,
        channel.connection,
        passive=bool(method.passive),
        durable=bool(method.durable),
        exclusive=bool(method.exclusive),
        auto_delete=bool(method.auto_delete),
        arguments=arguments,
    )
    channel.server_named_queue = ""
    channel.last_queue_name = queue.name
    if not method.nowait:
        _declare_ok(channel, queue.name, queue.message_count, queue.consumer_count)


def _authorized_queue_name(channel: Channel, name: str, arguments: dict[str, Any]) -> str:
    """The name a queue.declare declares, once RabbitMQ's checks pass, in its order: the
    reserved amq. prefix, configure on the queue (a server-named one by the name it gets)
    and, for a new queue with a dead-letter exchange, read on the queue and write on that
    exchange."""
    if name:
        check_queue_name(name)
    else:
        # Kept on the channel until the declare is done: parsed again after waiting for an
        # authorizer, the declare names the queue whose name was authorized.
        if not channel.server_named_queue:
            channel.server_named_queue = new_queue_name()
        name = channel.server_named_queue
    authorization = channel.authorization
    authorization.require("queue", name, "configure")
    dead_letter_exchange = arguments.get("x-dead-letter-exchange")
    if isinstance(dead_letter_exchange, str) and name not in channel.vhost.queues:
        authorization.require("queue", name, "read")
        authorization.require("exchange", dead_letter_exchange, "write")
    return name


def queue_bind(channel: Channel, method: c.Queue.Bind) -> None:
    name = _queue_name(channel, method.queue)
    _authorize_binding(channel, "queue", name, method.exchange, method.routing_key)
    queue = _queue(channel, name)
    exchange = channel.vhost.get_exchange(method.exchange)
    channel.vhost.bind(exchange, queue, method.routing_key, _args(method.arguments))
    if not method.nowait:
        _reply(channel, c.Queue.BindOk())


def queue_unbind(channel: Channel, method: c.Queue.Unbind) -> None:
    vhost = channel.vhost
    name = _queue_name(channel, method.queue)
    _authorize_binding(channel, "queue", name, method.exchange, method.routing_key)
    queue = vhost.queues.get(name)
    exchange = vhost.exchanges.get(method.exchange)
    # RabbitMQ answers unbind-ok when an end is missing: the binding is gone either way.
    if queue is not None and exchange is not None:
        vhost.check_exclusive(queue, channel.connection)
        vhost.unbind(exchange, queue, method.routing_key, _args(method.arguments))
    _reply(channel, c.Queue.UnbindOk())


def queue_purge(channel: Channel, method: c.Queue.Purge) -> None:
    name = _queue_name(channel, method.queue)
    channel.authorization.require("queue", name, "read")
    count = _message_queue(channel, name, "queue.purge").purge()
    if not method.nowait:
        _reply(channel, c.Queue.PurgeOk(message_count=count))


def queue_delete(channel: Channel, method: c.Queue.Delete) -> None:
    vhost = channel.vhost
    name = _queue_name(channel, method.queue)
    channel.authorization.require("queue", name, "configure")  # before looking it up, as RabbitMQ
    queue = vhost.queues.get(name)
    if queue is not None:
        vhost.check_exclusive(queue, channel.connection)
        if method.if_unused and queue.consumers:
            raise errors.PreconditionFailed(f"queue '{queue.name}' in vhost '{vhost.name}' in use")
        if method.if_empty and queue.message_count:
            raise errors.PreconditionFailed(f"queue '{queue.name}' in vhost '{vhost.name}' not empty")
    # RabbitMQ answers delete-ok before it cancels this channel's own consumers of the queue.
    channel.hold_broker_cancels()
    try:
        count = vhost.delete_queue(queue) if queue is not None else 0
        if not method.nowait:
            _reply(channel, c.Queue.DeleteOk(message_count=count))
    finally:
        channel.send_held_cancels()


# ---- basic -----------------------------------------------------------------------------


def basic_qos(channel: Channel, method: c.Basic.Qos) -> None:
    if method.prefetch_size:
        raise errors.NotImplemented_(f"prefetch_size!=0 ({method.prefetch_size})")
    if method.global_:
        channel.global_prefetch = method.prefetch_count
    else:
        channel.consumer_prefetch = method.prefetch_count
    _reply(channel, c.Basic.QosOk())
    channel.resume_deliveries()


def basic_consume(channel: Channel, method: c.Basic.Consume) -> None:
    tag = method.consumer_tag or f"amq.ctag-{uuid.uuid4().hex[:22]}"
    if tag in channel.consumers:
        raise errors.NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    if method.queue == PSEUDO_QUEUE:
        channel.start_reply_consumer(tag, bool(method.no_ack))
        if not method.nowait:
            _reply(channel, c.Basic.ConsumeOk(consumer_tag=tag))
        return
    name = _queue_name(channel, method.queue)
    channel.authorization.require("queue", name, "read")
    queue = _queue(channel, name)
    if queue.has_exclusive_consumer() or (method.exclusive and queue.consumers):
        raise errors.AccessRefused(f"queue '{queue.name}' in vhost '{channel.vhost.name}' in exclusive use")
    arguments = _args(method.arguments)
    priority = parse_consumer_priority(queue.name, channel.vhost.name, arguments)
    consumer = ChannelConsumer(channel, queue, tag, bool(method.no_ack), bool(method.exclusive), arguments, priority)
    if isinstance(queue, StreamQueue):
        if "x-priority" in arguments:  # a stream reader has no place in a priority order
            raise errors.PreconditionFailed(
                f"invalid arg 'x-priority' for queue '{queue.name}' in vhost '{channel.vhost.name}' "
                "of queue type stream"
            )
        queue.prepare_reader(consumer)  # a stream's consumer rules, checked before consume-ok
    if not method.nowait:
        _reply(channel, c.Basic.ConsumeOk(consumer_tag=tag))
    channel.add_consumer(consumer)


def basic_cancel(channel: Channel, method: c.Basic.Cancel) -> None:
    channel.cancel_consumer(method.consumer_tag or "")
    if not method.nowait:
        _reply(channel, c.Basic.CancelOk(consumer_tag=method.consumer_tag))


def basic_get(channel: Channel, method: c.Basic.Get) -> None:
    name = _queue_name(channel, method.queue)
    channel.authorization.require("queue", name, "read")
    channel.get(_message_queue(channel, name, "basic.get"), bool(method.no_ack))


def basic_reject(channel: Channel, method: c.Basic.Reject) -> None:
    channel.reject(method.delivery_tag or 0, False, bool(method.requeue))


def basic_nack(channel: Channel, method: c.Basic.Nack) -> None:
    channel.reject(method.delivery_tag, bool(method.multiple), bool(method.requeue))


def basic_recover(channel: Channel, method: c.Basic.Recover) -> None:
    if not method.requeue:
        raise errors.NotImplemented_("requeue=false")
    channel.recover()
    _reply(channel, c.Basic.RecoverOk())


def basic_recover_async(channel: Channel, method: c.Basic.RecoverAsync) -> None:
    if not method.requeue:
        raise errors.NotImplemented_("requeue=false")
    channel.recover()


# ---- confirms and transactions -------------------------------------------------------


def confirm_select(channel: Channel, method: c.Confirm.Select) -> None:
    if channel.tx is not None:
        raise errors.PreconditionFailed("cannot switch from tx to confirm mode")
    if channel.confirms is None:
        channel.confirms = PublisherConfirms(channel)
    if not method.nowait:
        _reply(channel, c.Confirm.SelectOk())


def tx_select(channel: Channel, method: c.Tx.Select) -> None:
    if channel.confirms is not None:
        raise errors.PreconditionFailed("cannot switch from confirm to tx mode")
    if channel.tx is None:
        channel.tx = Transaction(channel)
    _reply(channel, c.Tx.SelectOk())


def tx_commit(channel: Channel, method: c.Tx.Commit) -> None:
    if channel.tx is None:
        raise errors.PreconditionFailed("channel is not transactional")
    channel.tx.commit()


def tx_rollback(channel: Channel, method: c.Tx.Rollback) -> None:
    if channel.tx is None:
        raise errors.PreconditionFailed("channel is not transactional")
    channel.tx.rollback()
    _reply(channel, c.Tx.RollbackOk())


def basic_ack(channel: Channel, method: c.Basic.Ack) -> None:
    channel.ack(method.delivery_tag, bool(method.multiple))


HANDLERS: dict[type, Handler] = {
    c.Channel.Open: channel_open,
    c.Channel.Close: channel_close,
    c.Channel.CloseOk: channel_close_ok,
    c.Channel.Flow: channel_flow,
    c.Channel.FlowOk: channel_flow_ok,
    c.Exchange.Declare: exchange_declare,
    c.Exchange.Delete: exchange_delete,
    c.Exchange.Bind: exchange_bind,
    c.Exchange.Unbind: exchange_unbind,
    c.Queue.Declare: queue_declare,
    c.Queue.Bind: queue_bind,
    c.Queue.Unbind: queue_unbind,
    c.Queue.Purge: queue_purge,
    c.Queue.Delete: queue_delete,
    c.Basic.Qos: basic_qos,
    c.Basic.Consume: basic_consume,
    c.Basic.Cancel: basic_cancel,
    c.Basic.Get: basic_get,
    c.Basic.Ack: basic_ack,
    c.Basic.Reject: basic_reject,
    c.Basic.Nack: basic_nack,
    c.Basic.Recover: basic_recover,
    c.Basic.RecoverAsync: basic_recover_async,
    c.Confirm.Select: confirm_select,
    c.Tx.Select: tx_select,
    c.Tx.Commit: tx_commit,
    c.Tx.Rollback: tx_rollback,
}
