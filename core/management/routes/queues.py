"""The endpoints for queues, with RabbitMQ's paths, JSON and status codes:

- `/api/queues`, `/api/queues/{vhost}`, `/api/queues/{vhost}/{queue}` (GET, PUT, DELETE);
- `/api/queues/{vhost}/{queue}/contents` (DELETE): purge;
- `/api/queues/{vhost}/{queue}/get` (POST): basic.get, then ack or requeue;
- `/api/queues/{vhost}/{queue}/stream` (POST, LavinMQ's stream browser): read a stream
  from an offset without consuming.

Any management user, on the vhosts it may see (an administrator sees all, another user
those it has permissions on; others are 404); declares, deletes, purges and gets also check
its configure and read permissions as the AMQP methods do. Every change goes through the
vhost's own methods, so durability, limits, equivalence and errors are those of AMQP; see
`lavin.management.http.object_access` for how errors are reported. A queue's bindings are
`lavin.management.routes.bindings`'.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from lavin.api import errors
from lavin.api.message import Message
from lavin.broker.broker import Broker
from lavin.broker.queues.queue import MessageQueue, Queue
from lavin.broker.queues.stream_consumer import start_offset, with_offset_header
from lavin.broker.queues.stream_queue import StreamQueue
from lavin.broker.vhost import VHost, check_queue_name
from lavin.management.http.listing import list_reply
from lavin.management.http.object_access import (
    Permissions,
    channel_reply,
    direct_reply,
    queues_by_name,
    visible_vhost,
    visible_vhosts,
)
from lavin.management.http.replies import ObjectNotFound, broker_of, done, error_response, json_body, reply
from lavin.management.shapes import objects as shapes
from lavin.management.shapes.access import BadRequest
from lavin.management.shapes.held_messages import unacked_deliveries
from lavin.management.shapes.history import Histories

routes = web.RouteTableDef()


def _node(request: web.Request) -> str:
    return broker_of(request).alarms.node


def _queue(vhost: VHost, name: str) -> Queue:
    queue = vhost.queues.get(name)
    if queue is None:
        raise ObjectNotFound
    return queue


def _still_there(vhost: VHost, queue: Queue) -> Queue:
    """The queue, after an await: an authorizer that answers later leaves time for it to go."""
    if vhost.queues.get(queue.name) is not queue:
        raise errors.NotFound(f"no queue '{queue.name}' in vhost '{vhost.name}'")
    return queue


def _message_queue(vhost: VHost, queue: Queue, operation: str) -> MessageQueue:
    """A queue that hands out and drops messages; 540 for a stream, as in RabbitMQ."""
    if not isinstance(queue, MessageQueue):
        raise errors.NotImplemented_(
            f"{operation} not supported by stream queues queue '{queue.name}' in vhost '{vhost.name}'"
        )
    return queue


def _unacked_deliveries(request: web.Request) -> dict[Queue, list[int]]:
    return unacked_deliveries(broker_of(request).stats.snapshots())


@routes.get("/api/queues")
async def list_queues(request: web.Request) -> web.Response:
    node = _node(request)
    vhosts = await visible_vhosts(request)
    unacked = _unacked_deliveries(request)
    return await list_reply(
        request,
        [
            shapes.queue_json(vhost, queue, node, unacked.get(queue, []))
            for vhost in vhosts
            for queue in queues_by_name(vhost)
        ],
    )


@routes.get("/api/queues/{vhost}")
async def list_vhost_queues(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    node = _node(request)
    unacked = _unacked_deliveries(request)
    return await list_reply(
        request, [shapes.queue_json(vhost, queue, node, unacked.get(queue, [])) for queue in queues_by_name(vhost)]
    )


@routes.get("/api/queues/{vhost}/{queue}")
async def get_queue(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    queue = _queue(vhost, request.match_info["queue"])
    histories = Histories.asked(request.query, broker_of(request).stats)
    data = shapes.queue_json(vhost, queue, _node(request), _unacked_deliveries(request).get(queue, []))
    data["consumer_details"] = shapes.consumer_details(queue)
    histories.add_msg_rates(data["message_stats"], queue)
    histories.add_lengths(data, queue)
    return reply(data)


@routes.put("/api/queues/{vhost}/{queue}")
@direct_reply
async def put_queue(request: web.Request) -> web.Response:
    """queue.declare's checks, in its order: the reserved amq. prefix, configure on the
    queue and, for a new queue with a dead-letter exchange, read on it and write there."""
    vhost = await visible_vhost(request)
    name = request.match_info["queue"]
    if (size := len(name.encode("utf-8", "surrogateescape"))) > shapes.MAX_SHORT_STRING:
        raise BadRequest(f"queue should be less than 255 bytes, actually was {size}\n")  # RabbitMQ's text
    body = await json_body(request)
    durable, auto_delete = shapes.flag(body, "durable"), shapes.flag(body, "auto_delete")
    arguments = shapes.arguments(body)
    check_queue_name(name)
    permissions = Permissions(request, vhost.name)
    await permissions.require("queue", name, "configure")
    created = name not in vhost.queues
    dead_letter_exchange = arguments.get("x-dead-letter-exchange")
    if isinstance(dead_letter_exchange, str) and created:
        await permissions.require("queue", name, "read")
        await permissions.require("exchange", dead_letter_exchange, "write")
    vhost.declare_queue(
        name, None, passive=False, durable=durable, exclusive=False, auto_delete=auto_delete, arguments=arguments
    )
    return done(created)


@routes.delete("/api/queues/{vhost}/{queue}")
@direct_reply
async def delete_queue(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    queue = _queue(vhost, request.match_info["queue"])
    await Permissions(request, vhost.name).require("queue", queue.name, "configure")
    _still_there(vhost, queue)
    vhost.check_exclusive(queue, None)
    if request.query.get("if-unused") == "true" and queue.consumers:
        raise errors.PreconditionFailed(f"queue '{queue.name}' in vhost '{vhost.name}' in use")
    if request.query.get("if-empty") == "true" and queue.message_count:
        raise errors.PreconditionFailed(f"queue '{queue.name}' in vhost '{vhost.name}' not empty")
    vhost.delete_queue(queue)
    return done()


@routes.delete("/api/queues/{vhost}/{queue}/contents")
@direct_reply
async def purge_queue(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    queue = _queue(vhost, request.match_info["queue"])
    await Permissions(request, vhost.name).require("queue", queue.name, "read")
    _message_queue(vhost, _still_there(vhost, queue), "queue.purge").purge()
    return done()


@routes.post("/api/queues/{vhost}/{queue}/get")
@channel_reply
async def get_messages(request: web.Request) -> web.Response:
    """basic.get `count` times, then settle what was taken as `ackmode` says (a requeue
    after all the gets, as RabbitMQ does, or every get would take the same message)."""
    vhost = await visible_vhost(request)
    queue = vhost.queues.get(request.match_info["queue"])
    if queue is None:
        return error_response(404, "not_found", "queue_not_found")
    get = shapes.GetRequest.parse(await json_body(request))
    await Permissions(request, vhost.name).require("queue", queue.name, "read")
    vhost.check_exclusive(_still_there(vhost, queue), None)
    source = _message_queue(vhost, queue, "basic.get")
    no_ack = get.ack_mode == "ack_requeue_false"
    taken: list[int] = []
    messages: list[dict[str, Any]] = []
    redeliveries = 0
    for _ in range(get.count):
        item = source.get()
        if item is None:
            break
        message_id, message, redelivered = item
        redeliveries += redelivered
        messages.append(shapes.got_message_json(message, redelivered, source.message_count, get.display))
        if no_ack:
            source.ack(message_id)
        else:
            taken.append(message_id)
    if get.requeue:
        source.requeue(taken)
    else:
        for message_id in taken:
            source.reject(message_id)
    _count_gets(broker_of(request), vhost.name, source, len(messages), no_ack, redeliveries)
    return reply(messages)


def _count_gets(broker: Broker, vhost: str, queue: MessageQueue, got: int, no_ack: bool, redeliveries: int) -> None:
    """Count the API's gets as RabbitMQ does, whose API gets on a channel of its own: a
    basic.get without ack for ack_requeue_false, with ack for the other modes, in the
    queue's and (as a channel that closed) the vhost's statistics."""
    if no_ack:
        queue.got_no_ack += got
    else:
        queue.got += got
    queue.redelivered += redeliveries
    counts = {"get_no_ack" if no_ack else "get": got, "redeliver": redeliveries}
    broker.stats.channel_closed(vhost, counts)


@routes.post("/api/queues/{vhost}/{queue}/stream")
@channel_reply
async def read_stream(request: web.Request) -> web.Response:
    """LavinMQ's stream browser: messages of a stream read from an offset, each with its
    `x-stream-offset` header, as a consumer would get them; nothing is consumed."""
    vhost = await visible_vhost(request)
    queue = vhost.queues.get(request.match_info["queue"])
    if queue is None:
        return error_response(404, "not_found", "queue_not_found")
    read = shapes.StreamRead.parse(await json_body(request))
    await Permissions(request, vhost.name).require("queue", queue.name, "read")
    queue = _still_there(vhost, queue)
    if not isinstance(queue, StreamQueue):
        raise BadRequest(f"queue '{queue.name}' in vhost '{vhost.name}' is not a stream")
    end = queue.committed_offset
    cursor = queue.store.cursor(start_offset(queue, read.offset))
    messages: list[dict[str, Any]] = []
    while len(messages) < read.count and (item := cursor.next(end)) is not None:
        offset, stored = item
        message = Message(
            stored.exchange, stored.routing_key, with_offset_header(stored.properties, offset), stored.body
        )
        messages.append(shapes.got_message_json(message, False, end - offset - 1, read.display))
    return reply(messages)
