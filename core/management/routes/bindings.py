"""The endpoints for bindings, with RabbitMQ's paths, JSON and status codes:

- `/api/bindings`, `/api/bindings/{vhost}`: every binding, the default exchange's included;
- `/api/exchanges/{vhost}/{exchange}/bindings/source`,
  `/api/exchanges/{vhost}/{exchange}/bindings/destination`,
  `/api/queues/{vhost}/{queue}/bindings`: one exchange's or queue's (an empty list when it
  does not exist, as RabbitMQ answers);
- `/api/bindings/{vhost}/e/{source}/{e|q}/{destination}` (GET, POST) and
  `.../{props}` (GET, DELETE): the bindings between two ends; a POST answers 201 with the
  new binding's `props` in Location.

Any management user, on the vhosts it may see (an administrator sees all, another user
those it has permissions on; others are 404); binding and unbinding also check its
permissions as queue.bind and exchange.bind do, and report errors as RabbitMQ's direct
methods (`lavin.management.http.object_access`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from aiohttp import web
from lavin.api import errors
from lavin.api.exchange import Binding
from lavin.broker.queues.queue import Queue
from lavin.broker.routing.exchange import Exchange
from lavin.broker.vhost import VHost, check_not_default_exchange
from lavin.management.http.listing import list_reply
from lavin.management.http.object_access import (
    Permissions,
    direct_reply,
    exchanges_by_name,
    queues_by_name,
    visible_vhost,
    visible_vhosts,
)
from lavin.management.http.replies import ObjectNotFound, done, json_body, reply
from lavin.management.shapes import objects as shapes

routes = web.RouteTableDef()


def _bindings_from(vhost: VHost, source: Exchange) -> list[dict[str, Any]]:
    if source.name == "":
        return [shapes.default_binding_json(queue) for queue in queues_by_name(vhost)]
    return [shapes.binding_json(vhost.name, source.name, binding) for binding in source.table.bindings()]


def _bindings_to(vhost: VHost, destination: Queue | Exchange) -> list[dict[str, Any]]:
    found = [shapes.default_binding_json(destination)] if isinstance(destination, Queue) else []
    for source in sorted(vhost.sources_of(destination), key=lambda exchange: exchange.name):
        found += [shapes.binding_json(vhost.name, source.name, binding) for binding in _between(source, destination)]
    return found


def _between(source: Exchange, destination: Queue | Exchange) -> Iterable[Binding]:
    if source.name == "":
        return [Binding(destination, destination.name, {})] if isinstance(destination, Queue) else []
    return [binding for binding in source.table.bindings() if binding.destination is destination]


def _vhost_bindings(vhost: VHost) -> list[dict[str, Any]]:
    return [item for exchange in exchanges_by_name(vhost) for item in _bindings_from(vhost, exchange)]


# ---- one exchange's or queue's ---------------------------------------------------------------


@routes.get("/api/exchanges/{vhost}/{exchange}/bindings/source")
async def exchange_source_bindings(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    source = vhost.exchanges.get(shapes.exchange_name_from_path(request.match_info["exchange"]))
    return await list_reply(request, [] if source is None else _bindings_from(vhost, source))


@routes.get("/api/exchanges/{vhost}/{exchange}/bindings/destination")
async def exchange_destination_bindings(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    destination = vhost.exchanges.get(shapes.exchange_name_from_path(request.match_info["exchange"]))
    return await list_reply(request, [] if destination is None else _bindings_to(vhost, destination))


@routes.get("/api/queues/{vhost}/{queue}/bindings")
async def queue_bindings(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    queue = vhost.queues.get(request.match_info["queue"])
    return await list_reply(request, [] if queue is None else _bindings_to(vhost, queue))


# ---- all, and between two ends ---------------------------------------------------------------


@routes.get("/api/bindings")
async def list_bindings(request: web.Request) -> web.Response:
    vhosts = await visible_vhosts(request)
    return await list_reply(request, [item for vhost in vhosts for item in _vhost_bindings(vhost)])


@routes.get("/api/bindings/{vhost}")
async def list_vhost_bindings(request: web.Request) -> web.Response:
    return await list_reply(request, _vhost_bindings(await visible_vhost(request)))


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
    return await list_reply(request, [shapes.binding_json(vhost.name, ends.source_name, b) for b in ends.bindings()])


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
