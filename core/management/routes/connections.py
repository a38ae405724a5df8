"""The endpoints for client connections, with RabbitMQ's paths, JSON and status codes:

- `/api/connections`, `/api/vhosts/{vhost}/connections`,
  `/api/connections/username/{username}`, `/api/connections/{connection}`,
  `/api/connections/{connection}/channels` (GET): a `monitoring` user or an administrator
  sees every connection, another management user its own (401 for another's);
- `/api/connections/{connection}`, `/api/connections/username/{username}` (DELETE): close
  with connection.close 320 and the `X-Reason` header's text; an administrator may close
  any, another management user its own.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from lavin.api import errors
from lavin.broker.runtime.stats import ConnectionSnapshot
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import ObjectNotFound, broker_of, done, reply
from lavin.management.http.requester import requester
from lavin.management.http.runtime_access import require_owner, running_vhost, visible_connections
from lavin.management.shapes import runtime as shapes

# RabbitMQ's reply text when the management API closes a connection without an X-Reason.
DEFAULT_CLOSE_REASON: Final = "Closed via management plugin"

routes = web.RouteTableDef()


@routes.get("/api/connections")
async def list_connections(request: web.Request) -> web.Response:
    broker = broker_of(request)
    connections = visible_connections(requester(request), broker.stats.snapshots())
    return await list_reply(request, [shapes.connection_json(broker, c) for c in connections])


@routes.get("/api/vhosts/{vhost}/connections")
async def list_vhost_connections(request: web.Request) -> web.Response:
    vhost, broker = await running_vhost(request), broker_of(request)
    connections = [c for c in visible_connections(requester(request), broker.stats.snapshots()) if c.vhost == vhost]
    return await list_reply(request, [shapes.connection_json(broker, c) for c in connections])


def _connection(request: web.Request) -> ConnectionSnapshot:
    """The connection the path names, if the requester may see it (401 if not, 404 if none);
    closing one takes an administrator or its own user, as in RabbitMQ."""
    name = request.match_info["connection"]
    found = next((c for c in broker_of(request).stats.snapshots() if c.name == name), None)
    if found is None:
        raise ObjectNotFound
    require_owner(request, found.user or "")
    return found


@routes.get("/api/connections/{connection}")
async def get_connection(request: web.Request) -> web.Response:
    return reply(shapes.connection_json(broker_of(request), _connection(request)))


@routes.delete("/api/connections/{connection}")
async def close_connection(request: web.Request) -> web.Response:
    _close(request, [_connection(request)])
    return done()


@routes.get("/api/connections/{connection}/channels")
async def list_connection_channels(request: web.Request) -> web.Response:
    connection, broker = _connection(request), broker_of(request)
    channels = [shapes.channel_json(broker, connection, channel) for channel in connection.channels]
    return await list_reply(request, channels)


def _connections_of(request: web.Request) -> list[ConnectionSnapshot]:
    user = request.match_info["username"]
    require_owner(request, user)
    return [c for c in broker_of(request).stats.snapshots() if c.user == user]


@routes.get("/api/connections/username/{username}")
async def list_user_connections(request: web.Request) -> web.Response:
    broker = broker_of(request)
    return await list_reply(request, [shapes.connection_json(broker, c) for c in _connections_of(request)])


@routes.delete("/api/connections/username/{username}")
async def close_user_connections(request: web.Request) -> web.Response:
    _close(request, _connections_of(request))
    return done()


def _close(request: web.Request, snapshots: list[ConnectionSnapshot]) -> None:
    """connection.close 320 with the X-Reason header's text, RabbitMQ's default without one;
    a text over a short string's 255 bytes is cut, as RabbitMQ cuts it."""
    forced = errors.ConnectionForced(request.headers.get("X-Reason") or DEFAULT_CLOSE_REASON)
    chosen = {id(snapshot.key) for snapshot in snapshots}
    for connection in list(broker_of(request).connections):
        if id(connection) in chosen:
            connection.close(forced.reply_code, forced.reply_text)
