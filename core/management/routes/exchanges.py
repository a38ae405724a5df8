"""The endpoints for exchanges, with RabbitMQ's paths, JSON and status codes:

- `/api/exchanges`, `/api/exchanges/{vhost}`, `/api/exchanges/{vhost}/{exchange}` (GET,
  PUT, DELETE);
- `/api/exchanges/{vhost}/{exchange}/publish` (POST): basic.publish with a confirm.

Any management user, on the vhosts it may see (an administrator sees all, another user
those it has permissions on; others are 404); declares, deletes and publishes also check
its configure and write permissions as the AMQP methods do. Every change goes through the
vhost's own methods, so durability, equivalence and errors are those of AMQP; see
`lavin.management.http.object_access` for how errors are reported. An exchange's bindings
are `lavin.management.routes.bindings`'.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Final

from aiohttp import web
from lavin.api import errors
from lavin.api.message import Message
from lavin.broker.queues.expiry import message_expiration
from lavin.broker.queues.queue import NEEDS_SYNC, REJECTED
from lavin.broker.routing.exchange import Exchange
from lavin.broker.runtime.group_commit import PublishesSynced
from lavin.broker.vhost import UNROUTED, VHost, check_not_default_exchange
from lavin.management.http.listing import list_reply
from lavin.management.http.object_access import (
    Permissions,
    channel_reply,
    direct_reply,
    exchanges_by_name,
    visible_vhost,
    visible_vhosts,
)
from lavin.management.http.replies import ObjectNotFound, broker_of, done, error_response, json_body, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import objects as shapes
from lavin.management.shapes.access import required
from lavin.management.shapes.history import Histories

# RabbitMQ's reply when a publish is not confirmed.
PUBLISH_REFUSED: Final = "rejected Unable to publish message. Check queue limits."

routes = web.RouteTableDef()


def _exchange(vhost: VHost, path_name: str) -> Exchange:
    exchange = vhost.exchanges.get(shapes.exchange_name_from_path(path_name))
    if exchange is None:
        raise ObjectNotFound
    return exchange


@routes.get("/api/exchanges")
async def list_exchanges(request: web.Request) -> web.Response:
    vhosts = await visible_vhosts(request)
    return await list_reply(
        request, [shapes.exchange_json(vhost, exchange) for vhost in vhosts for exchange in exchanges_by_name(vhost)]
    )


@routes.get("/api/exchanges/{vhost}")
async def list_vhost_exchanges(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    return await list_reply(request, [shapes.exchange_json(vhost, exchange) for exchange in exchanges_by_name(vhost)])


@routes.get("/api/exchanges/{vhost}/{exchange}")
async def get_exchange(request: web.Request) -> web.Response:
    vhost = await visible_vhost(request)
    exchange = _exchange(vhost, request.match_info["exchange"])
    data = shapes.exchange_json(vhost, exchange)
    Histories.asked(request.query, vhost.broker.stats).add_msg_rates(data["message_stats"], exchange)
    return reply(data)


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


# ---- publish ---------------------------------------------------------------------------------


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
    max_size = broker_of(request).config.max_message_size
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
    group_commit = broker_of(request).group_commit
    publish = _SyncedPublish()
    group_commit.wait_for_publishes(publish)
    if group_commit.tracing:
        group_commit.trace_publish(publish, 1)
    return await publish.written
