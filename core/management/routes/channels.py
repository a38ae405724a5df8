"""The endpoints for channels and their consumers, with RabbitMQ's paths, JSON and status
codes:

- `/api/channels`, `/api/vhosts/{vhost}/channels`, `/api/channels/{channel}`: a
  `monitoring` user or an administrator sees every channel, another management user those
  of its own connections (401 for another's);
- `/api/consumers`, `/api/consumers/{vhost}`: any management user, for the vhosts it may
  see (every vhost for a `monitoring` user or an administrator).

A connection's own channels are listed at `/api/connections/{connection}/channels`
(`lavin.management.routes.connections`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aiohttp import web
from lavin.broker.broker import Broker
from lavin.broker.runtime.stats import ChannelSnapshot, ConnectionSnapshot
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import ObjectNotFound, broker_of, reply
from lavin.management.http.requester import requester
from lavin.management.http.runtime_access import require_owner, running_vhost, visible_connections
from lavin.management.shapes import runtime as shapes

routes = web.RouteTableDef()


def _channels(connections: list[ConnectionSnapshot]) -> Iterator[tuple[ConnectionSnapshot, ChannelSnapshot]]:
    for connection in connections:
        for channel in connection.channels:
            yield connection, channel


@routes.get("/api/channels")
async def list_channels(request: web.Request) -> web.Response:
    broker = broker_of(request)
    connections = visible_connections(requester(request), broker.stats.snapshots())
    return await list_reply(request, [shapes.channel_json(broker, c, ch) for c, ch in _channels(connections)])


@routes.get("/api/vhosts/{vhost}/channels")
async def list_vhost_channels(request: web.Request) -> web.Response:
    vhost, broker = await running_vhost(request), broker_of(request)
    connections = [c for c in visible_connections(requester(request), broker.stats.snapshots()) if c.vhost == vhost]
    return await list_reply(request, [shapes.channel_json(broker, c, ch) for c, ch in _channels(connections)])


@routes.get("/api/channels/{channel}")
async def get_channel(request: web.Request) -> web.Response:
    broker, name = broker_of(request), request.match_info["channel"]
    for connection, channel in _channels(broker.stats.snapshots()):
        if shapes.channel_name(connection, channel) == name:
            require_owner(request, connection.user or "")
            return reply(shapes.channel_json(broker, connection, channel))
    raise ObjectNotFound


# ---- consumers ---------------------------------------------------------------------------


def _consumers(broker: Broker, vhosts: list[str]) -> list[dict[str, Any]]:
    connections = [c for c in broker.stats.snapshots() if c.vhost in vhosts]
    return [
        shapes.consumer_json(broker, connection, channel, consumer)
        for connection, channel in _channels(connections)
        for consumer in channel.consumers
    ]


@routes.get("/api/consumers")
async def list_consumers(request: web.Request) -> web.Response:
    broker = broker_of(request)
    vhosts = await requester(request).visible_vhosts(broker.vhosts)
    return await list_reply(request, _consumers(broker, vhosts))


@routes.get("/api/consumers/{vhost}")
async def list_vhost_consumers(request: web.Request) -> web.Response:
    vhost = await running_vhost(request)
    return await list_reply(request, _consumers(broker_of(request), [vhost]))
