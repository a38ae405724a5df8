"""The endpoints for exchanges, queues and bindings, with RabbitMQ's paths, JSON and status
codes. Every change goes through the vhost's own methods, so durability, limits,
equivalence and errors are those of the AMQP methods; see `object_access` for who may do
what and how errors are reported."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final

from aiohttp import web
from lavin.api import errors
from lavin.api.exchange import Binding
from lavin.api.message import Message
from lavin.broker.queues.expiry import message_expiration
from lavin.broker.queues.queue import NEEDS_SYNC, REJECTED, MessageQueue, Queue
from lavin.broker.queues.stream_consumer import start_offset, with_offset_header
from lavin.broker.queues.stream_queue import StreamQueue
from lavin.broker.routing.exchange import Exchange
from lavin.broker.runtime.group_commit import PublishesSynced
from lavin.broker.vhost import UNROUTED, VHost, check_not_default_exchange, check_queue_name
from lavin.management.http.listing import list_reply
from lavin.management.http.object_access import Permissions, channel_reply, direct_reply, visible_vhost, visible_vhosts
from lavin.management.http.replies import BROKER, ObjectNotFound, done, error_response, json_body, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import objects as shapes
from lavin.management.shapes.access import BadRequest, required

# RabbitMQ's reply when a publish is not confirmed.
PUBLISH_REFUSED: Final = "rejected Unable to publish message. Check queue limits."

routes = web.RouteTableDef()


def _node(request: web.Request) -> str:
    return request.app[BROKER].alarms.node


def _exchange(vhost: VHost, path_name: str) -> Exchange:
    exchange = vhost.exchanges.get(shapes.exchange_name_from_path(path_name))
    if exchange is None:
        raise ObjectNotFound
    return exchange


def _queue(vhost: VHost, name: str) -> Queue:
    queue = vhost.queues.get(name)
    if queue is None:
        raise ObjectNotFound
    return queue


# ---- exchanges -------------------------------------------------------------------------------


@routes.get("/api/exchanges")
async def list_exchanges(request: web.Request) -> web.Response:
    vhosts = await visible_vhosts(request)
    return list_reply(request, [_exchange_json(vhost, exchange) for vhost in vhosts for exchange in _by_name(vhost)])


@routes.get("/api/exchanges/{vhost}")
async def list_vhost_exchanges(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    return list_reply(request, [_exchange_json(vhost, exchange) for exchange in _by_name(vhost)])


def _by_name(vhost: VHost) -> list[Exchange]:
    return [vhost.exchanges[name] for name in sorted(vhost.exchanges)]


def _exchange_json(vhost: VHost, exchange: Exchange) -> dict[str, Any]:
    return shapes.exchange_json(vhost.name, exchange)


@routes.get("/api/exchanges/{vhost}/{exchange}")
async def get_exchange(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    return reply(_exchange_json(vhost, _exchange(vhost, request.match_info["exchange"])))


@routes.put("/api/exchanges/{vhost}/{exchange}")
@direct_reply
async def put_exchange(request: web.Request) -> web.Response:
    """exchange.declare's checks, in its order: the default exchange is no one's, configure
    on the exchange and, for a new one with an alternate exchange, read on it and write
    there."""
    vhost = await visible_vhost(request)
    body = await json_body(request)
    name = shapes.short_string(shapes.exchange_name_from_path(request.match_info["exchange"]), "exchange name")
    type_name = shapes.text_field(body, "type", "direct")
    durable, auto_delete, internal = (shapes.flag(body, key) for key in ("durable", "auto_delete", "internal"))
    arguments = shapes.arguments(body)
    check_not_default_exchange(name)
    permissions = Permissions(request, vhost.name)
    await permissions.require("exchange", name, "configure")
    created = name not in vhost.exchanges
    alternate = arguments.get("alternate-exchange")
    if isinstance(alternate, str) and created:
        await permissions.require("exchange", name, "read")
        await permissions.require("exchange", alternate, "write")
    vhost.declare_exchange(
        name,
        type_name,
        passive=False,
        durable=durable,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments,
    )
    return done(created)


@routes.delete("/api/exchanges/{vhost}/{exchange}")
@direct_reply
async def delete_exchange(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    exchange = _exchange(vhost, request.match_info["exchange"])
    vhost.check_exchange_deletable(exchange.name)  # before the permission, as RabbitMQ
    await Permissions(request, vhost.name).require("exchange", exchange.name, "configure")
    vhost.delete_exchange(exchange.name, if_unused=request.query.get("if-unused") == "true")
    return done()


@routes.get("/api/exchanges/{vhost}/{exchange}/bindings/source")
async def exchange_source_bindings(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    source = vhost.exchanges.get(shapes.exchange_name_from_path(request.match_info["exchange"]))
    return list_reply(request, [] if source is None else _bindings_from(vhost, source))


@routes.get("/api/exchanges/{vhost}/{exchange}/bindings/destination")
async def exchange_destination_bindings(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    destination = vhost.exchanges.get(shapes.exchange_name_from_path(request.match_info["exchange"]))
    return list_reply(request, [] if destination is None else _bindings_to(vhost, destination))


@routes.post("/api/exchanges/{vhost}/{exchange}/publish")
@channel_reply
async def publish(request: web.Request) -> web.Response:
    """basic.publish with a confirm, as RabbitMQ's endpoint does it: `{"routed": bool}`
    once the message is stored (and, when persistent in a durable queue, on disk)."""
    vhost = await visible_vhost(request)
    name = shapes.exchange_name_from_path(request.match_info["exchange"])
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        return error_response(404, "not_found", "exchange_not_found")
    body = await json_body(request)
    routing_key, properties, payload, encoding = required(
        body, "routing_key", "properties", "payload", "payload_encoding"
    )
    routing_key = shapes.short_string(routing_key, "routing_key")
    message = Message(
        name,
        routing_key,
        shapes.basic_properties(properties),
        shapes.payload(payload, encoding),
        int(time.time() * 1000),
    )
    permissions = Permissions(request, vhost.name)
    await permissions.require("exchange", name, "write")
    if exchange.type_name == "topic":
        await permissions.require_topic(name, "write", routing_key)
    _check_publishable(request, message)
    status = vhost.publish(name, message, None)
    if status & REJECTED or (status & NEEDS_SYNC and not await _synced(request)):
        return error_response(400, "bad_request", PUBLISH_REFUSED)
    return reply({"routed": not status & UNROUTED})


def _check_publishable(request: web.Request, message: Message) -> None:
    """What basic.publish refuses before routing: an oversized body, an invalid
    expiration, a user_id that is not the user's."""
    max_size = request.app[BROKER].config.max_message_size
    if len(message.body) > max_size:
        raise errors.PreconditionFailed(
            f"message size {len(message.body)} is larger than configured max size {max_size}"
        )
    message_expiration(message)
    claimed = message.props.get("user_id")
    user = requester(request).user
    if claimed is not None and user is not None and claimed != user.name and "impersonator" not in user.tags:
        raise errors.PreconditionFailed(f"user_id property set to '{claimed}' but authenticated user was '{user.name}'")


class _SyncedPublish:
    """One publish waiting for the group commit, as a channel's confirms wait."""

    def __init__(self) -> None:
        self.written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def prepare_sync(self) -> PublishesSynced:
        return self._settle

    def _settle(self, unwritten: Sequence[int] | None) -> None:
        if not self.written.done():
            self.written.set_result(unwritten is not None and not unwritten)


async def _synced(request: web.Request) -> bool:
    group_commit = request.app[BROKER].group_commit
    publish = _SyncedPublish()
    group_commit.wait_for_publishes(publish)
    if group_commit.tracing:
        group_commit.trace_publish(publish, 1)
    return await publish.written


# ---- queues ----------------------------------------------------------------------------------


@routes.get("/api/queues")
async def list_queues(request: web.Request) -> web.Response:
    node = _node(request)
    vhosts = await visible_vhosts(request)
    return list_reply(request, [shapes.queue_json(queue, node) for vhost in vhosts for queue in _queues_of(vhost)])


@routes.get("/api/queues/{vhost}")
async def list_vhost_queues(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    node = _node(request)
    return list_reply(request, [shapes.queue_json(queue, node) for queue in _queues_of(vhost)])


def _queues_of(vhost: VHost) -> list[Queue]:
    return [vhost.queues[name] for name in sorted(vhost.queues)]


@routes.get("/api/queues/{vhost}/{queue}")
async def get_queue(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    queue = _queue(vhost, request.match_info["queue"])
    data = shapes.queue_json(queue, _node(request))
    data["consumer_details"] = shapes.consumer_details(queue)
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


@routes.get("/api/queues/{vhost}/{queue}/bindings")
async def queue_bindings(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    queue = vhost.queues.get(request.match_info["queue"])
    return list_reply(request, [] if queue is None else _bindings_to(vhost, queue))


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
    taken: list[int] = []
    messages: list[dict[str, Any]] = []
    for _ in range(get.count):
        item = source.get()
        if item is None:
            break
        message_id, message, redelivered = item
        messages.append(shapes.got_message_json(message, redelivered, source.message_count, get.display))
        if get.ack_mode == "ack_requeue_false":
            source.ack(message_id)
        else:
            taken.append(message_id)
    if get.requeue:
        source.requeue(taken)
    else:
        for message_id in taken:
            source.reject(message_id)
    return reply(messages)


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


# ---- bindings --------------------------------------------------------------------------------


def _bindings_from(vhost: VHost, source: Exchange) -> list[dict[str, Any]]:
    if source.name == "":
        return [shapes.default_binding_json(queue) for queue in _queues_of(vhost)]
    return [shapes.binding_json(vhost.name, source.name, binding) for binding in source.table.bindings()]


def _bindings_to(vhost: VHost, destination: Queue | Exchange) -> list[dict[str, Any]]:
    found = [shapes.default_binding_json(destination)] if isinstance(destination, Queue) else []
    for source in sorted(destination.bound_from, key=lambda exchange: exchange.name):
        found += [shapes.binding_json(vhost.name, source.name, binding) for binding in _between(source, destination)]
    return found


def _between(source: Exchange, destination: Queue | Exchange) -> Iterable[Binding]:
    if source.name == "":
        return [Binding(destination, destination.name, {})] if isinstance(destination, Queue) else []
    return [binding for binding in source.table.bindings() if binding.destination is destination]


@routes.get("/api/bindings")
async def list_bindings(request: web.Request) -> web.Response:
    vhosts = await visible_vhosts(request)
    return list_reply(request, [item for vhost in vhosts for item in _vhost_bindings(vhost)])


@routes.get("/api/bindings/{vhost}")
async def list_vhost_bindings(request: web.Request) -> web.Response:
    return list_reply(request, _vhost_bindings(await visible_vhost(request)))


def _vhost_bindings(vhost: VHost) -> list[dict[str, Any]]:
    return [item for exchange in _by_name(vhost) for item in _bindings_from(vhost, exchange)]


class _Ends:
    """The source and destination a binding path names (either may be missing), looked up
    at each use: an authorizer that answers later leaves time for either to go."""

    def __init__(self, request: web.Request, vhost: VHost) -> None:
        info = request.match_info
        self.vhost = vhost
        self.kind = "queue" if info["kind"] == "q" else "exchange"
        self.source_name = shapes.exchange_name_from_path(info["source"])
        self.destination_name = (
            info["destination"] if self.kind == "queue" else shapes.exchange_name_from_path(info["destination"])
        )

    @property
    def source(self) -> Exchange | None:
        return self.vhost.exchanges.get(self.source_name)

    @property
    def destination(self) -> Queue | Exchange | None:
        if self.kind == "queue":
            return self.vhost.queues.get(self.destination_name)
        return self.vhost.exchanges.get(self.destination_name)

    def bindings(self) -> Iterable[Binding]:
        source, destination = self.source, self.destination
        if source is None or destination is None:
            return []
        return _between(source, destination)

    async def authorize(self, request: web.Request, routing_key: str) -> None:
        """queue.bind's and exchange.bind's checks, in their order: write on the
        destination, the default exchange is no one's, read on the source and, on a topic
        exchange, the topic read permission on the key."""
        permissions = Permissions(request, self.vhost.name)
        await permissions.require("queue" if self.kind == "queue" else "exchange", self.destination_name, "write")
        check_not_default_exchange(self.source_name)
        check_not_default_exchange(self.destination_name)
        await permissions.require("exchange", self.source_name, "read")
        source = self.source
        if source is not None and source.type_name == "topic":
            await permissions.require_topic(self.source_name, "read", routing_key)

    def ends(self) -> tuple[Exchange, Queue | Exchange]:
        """Both ends, or NOT_FOUND naming the first missing one (the destination first, as
        queue.bind looks them up)."""
        source, destination = self.source, self.destination
        if destination is None:
            raise errors.NotFound(f"no {self.kind} '{self.destination_name}' in vhost '{self.vhost.name}'")
        if source is None:
            raise errors.NotFound(f"no exchange '{self.source_name}' in vhost '{self.vhost.name}'")
        return source, destination


BINDINGS_PATH: Final = "/api/bindings/{vhost}/e/{source}/{kind:[eq]}/{destination}"


@routes.get(BINDINGS_PATH)
async def list_pair_bindings(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    ends = _Ends(request, vhost)
    return list_reply(request, [shapes.binding_json(vhost.name, ends.source_name, b) for b in ends.bindings()])


@routes.post(BINDINGS_PATH)
@direct_reply
async def post_binding(request: web.Request) -> web.Response:
    """201, with the new binding's path relative to this one in Location, as RabbitMQ."""
    vhost = await visible_vhost(request)
    body = await json_body(request)
    routing_key = shapes.text_field(body, "routing_key", "")
    arguments = shapes.arguments(body)
    ends = _Ends(request, vhost)
    await ends.authorize(request, routing_key)
    source, destination = ends.ends()
    if isinstance(destination, Queue):
        vhost.check_exclusive(destination, None)
    vhost.bind(source, destination, routing_key, arguments)
    last_segment = request.rel_url.raw_path.rstrip("/").rsplit("/", 1)[-1]
    location = f"{last_segment}/{shapes.properties_key(routing_key, arguments)}"
    return web.Response(status=201, headers={"Location": location})


def _binding(request: web.Request, ends: _Ends) -> Binding:
    binding = shapes.find_binding(ends.bindings(), request.match_info["props"])
    if binding is None:
        raise ObjectNotFound
    return binding


@routes.get(BINDINGS_PATH + "/{props}")
async def get_binding(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    ends = _Ends(request, vhost)
    return reply(shapes.binding_json(vhost.name, ends.source_name, _binding(request, ends)))


@routes.delete(BINDINGS_PATH + "/{props}")
@direct_reply
async def delete_binding(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    ends = _Ends(request, vhost)
    binding = _binding(request, ends)
    await ends.authorize(request, binding.routing_key)
    source, destination = ends.ends()
    if isinstance(destination, Queue):
        vhost.check_exclusive(destination, None)
    vhost.unbind(source, destination, binding.routing_key, dict(binding.arguments))
    return done()
