"""The endpoints for vhosts and their limits, with RabbitMQ's paths, JSON and status codes:

- `/api/vhosts` (GET): any management user, for the vhosts it may see (a `monitoring` user
  or an administrator sees all, another user those it has permissions on), with their
  message counts and statistics;
- `/api/vhosts/{vhost}` (GET, PUT, DELETE): `administrator`, as in RabbitMQ;
- `/api/vhost-limits`, `/api/vhost-limits/{vhost}`, `/api/vhost-limits/{vhost}/{name}`
  (PUT, DELETE): `administrator`.

A vhost's permissions, connections and channels are in the modules of those resources.
Names in paths are percent-encoded (`/api/vhosts/%2F`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from lavin.broker.access.access_control import NotFoundError
from lavin.broker.runtime.stats import vhost_key
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import access_of, broker_of, done, json_body, known_vhost, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import access as shapes
from lavin.management.shapes.history import Histories
from lavin.management.shapes.message_stats import vhost_message_stats

routes = web.RouteTableDef()


@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.Response:
    visible = await requester(request).visible_vhosts(sorted(access_of(request).vhosts()))
    return await list_reply(request, [_vhost_with_counts(request, name) for name in visible])


@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    name = known_vhost(access_of(request), request.match_info["vhost"])
    data = _vhost_with_counts(request, name)
    Histories.asked(request.query, broker_of(request).stats).add_msg_rates(data["message_stats"], vhost_key(name))
    return reply(data)


def _vhost_with_counts(request: web.Request, name: str) -> dict[str, Any]:
    """A vhost's JSON with its message counts and statistics, as RabbitMQ lists it."""
    broker = broker_of(request)
    queues = broker.vhosts[name].queues.values()
    ready = sum(queue.message_count for queue in queues)
    unacked = sum(queue.unacked for queue in queues)
    return {
        **shapes.vhost_json(name),
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "message_stats": vhost_message_stats(broker.stats, name),
    }


@routes.put("/api/vhosts/{vhost}")
async def put_vhost(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    await json_body(request)  # description, tags and tracing have no effect in Lavin
    access, name = access_of(request), request.match_info["vhost"]
    if name in access.vhosts():
        return done()
    # The user who creates a vhost gets full permissions on it, when it is one of ours.
    creator = requester(request).name
    access.add_vhost(name, creator if access.user(creator) is not None else None)
    return done(created=True)


@routes.delete("/api/vhosts/{vhost}")
async def delete_vhost(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access = access_of(request)
    await access.delete_vhost(known_vhost(access, request.match_info["vhost"]))
    return done()


# ---- vhost limits ------------------------------------------------------------------------


@routes.get("/api/vhost-limits")
async def list_limits(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access = access_of(request)
    return reply(
        [shapes.limits_json(name, limits) for name in sorted(access.vhosts()) if (limits := access.vhost_limits(name))]
    )


@routes.get("/api/vhost-limits/{vhost}")
async def get_limits(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access = access_of(request)
    name = known_vhost(access, request.match_info["vhost"])
    limits = access.vhost_limits(name)
    return reply([shapes.limits_json(name, limits)] if limits else [])


def _limited_vhost(request: web.Request) -> str:
    """The path's vhost; RabbitMQ answers 404 `vhost_not_found` for an unknown one."""
    name = request.match_info["vhost"]
    if name not in access_of(request).vhosts():
        raise NotFoundError("vhost_not_found")
    return name


@routes.put("/api/vhost-limits/{vhost}/{name}")
async def put_limit(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, vhost = access_of(request), _limited_vhost(request)
    value = shapes.limit_value(await json_body(request, json_only=True))
    access.set_vhost_limits(vhost, {**access.vhost_limits(vhost), request.match_info["name"]: value})
    return done()


@routes.delete("/api/vhost-limits/{vhost}/{name}")
async def delete_limit(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, vhost = access_of(request), _limited_vhost(request)
    limits = dict(access.vhost_limits(vhost))
    limits.pop(request.match_info["name"], None)
    access.set_vhost_limits(vhost, limits)
    return done()
