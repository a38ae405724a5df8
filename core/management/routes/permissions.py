"""The endpoints for permissions and topic permissions, with RabbitMQ's paths, JSON and
status codes; every one takes an `administrator`:

- `/api/permissions`, `/api/permissions/{vhost}/{user}` (GET, PUT, DELETE);
- `/api/topic-permissions`, `/api/topic-permissions/{vhost}/{user}` (GET, PUT, DELETE),
  `/api/topic-permissions/{vhost}/{user}/{exchange}` (DELETE);
- one user's or one vhost's: `/api/users/{user}/permissions`,
  `/api/users/{user}/topic-permissions`, `/api/vhosts/{vhost}/permissions`,
  `/api/vhosts/{vhost}/topic-permissions`.

Names in paths are percent-encoded.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from lavin.broker.access.access_control import AccessControl
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import ObjectNotFound, access_of, done, json_body, known_vhost, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import access as shapes

routes = web.RouteTableDef()


def _permissions(access: AccessControl, user: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
    entries = sorted(access.permissions(), key=lambda entry: (entry[1], entry[0]))
    return [
        shapes.permission_json(*entry)
        for entry in entries
        if (user is None or entry[0] == user) and (vhost is None or entry[1] == vhost)
    ]


def _topic_permissions(
    access: AccessControl, user: str | None = None, vhost: str | None = None, exchange: str | None = None
) -> list[dict[str, Any]]:
    entries = sorted(access.topic_permissions(), key=lambda entry: (entry[1], entry[0], entry[2]))
    return [
        shapes.topic_permission_json(*entry)
        for entry in entries
        if (user is None or entry[0] == user)
        and (vhost is None or entry[1] == vhost)
        and (exchange is None or entry[2] == exchange)
    ]


def _user_and_vhost(request: web.Request) -> tuple[str, str]:
    """The path's user and vhost for a PUT, which RabbitMQ refuses with 400 when either is unknown."""
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    if access.user(user) is None or vhost not in access.vhosts():
        raise shapes.BadRequest("vhost_or_user_not_found")
    return user, vhost


# ---- one user's and one vhost's ----------------------------------------------------------


@routes.get("/api/users/{user}/permissions")
async def user_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, name = access_of(request), request.match_info["user"]
    if access.user(name) is None:
        raise ObjectNotFound
    return reply(_permissions(access, user=name))


@routes.get("/api/users/{user}/topic-permissions")
async def user_topic_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, name = access_of(request), request.match_info["user"]
    if access.user(name) is None:
        raise ObjectNotFound
    return reply(_topic_permissions(access, user=name))


@routes.get("/api/vhosts/{vhost}/permissions")
async def vhost_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access = access_of(request)
    return reply(_permissions(access, vhost=known_vhost(access, request.match_info["vhost"])))


@routes.get("/api/vhosts/{vhost}/topic-permissions")
async def vhost_topic_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access = access_of(request)
    return reply(_topic_permissions(access, vhost=known_vhost(access, request.match_info["vhost"])))


# ---- permissions -------------------------------------------------------------------------


@routes.get("/api/permissions")
async def list_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return await list_reply(request, _permissions(access_of(request)))


@routes.get("/api/permissions/{vhost}/{user}")
async def get_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    found = _permissions(access_of(request), request.match_info["user"], request.match_info["vhost"])
    if not found:
        raise ObjectNotFound
    return reply(found[0])


@routes.put("/api/permissions/{vhost}/{user}")
async def put_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    user, vhost = _user_and_vhost(request)
    permissions = shapes.vhost_permissions(await json_body(request))
    access = access_of(request)
    created = not _permissions(access, user, vhost)
    access.set_permissions(user, vhost, permissions)
    return done(created)


@routes.delete("/api/permissions/{vhost}/{user}")
async def delete_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    if not _permissions(access, user, vhost):
        raise ObjectNotFound
    access.clear_permissions(user, vhost)
    return done()


# ---- topic permissions -------------------------------------------------------------------


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return await list_reply(request, _topic_permissions(access_of(request)))


@routes.get("/api/topic-permissions/{vhost}/{user}")
async def get_topic_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    found = _topic_permissions(access_of(request), request.match_info["user"], request.match_info["vhost"])
    if not found:
        raise ObjectNotFound
    return reply(found)


@routes.put("/api/topic-permissions/{vhost}/{user}")
async def put_topic_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    user, vhost = _user_and_vhost(request)
    exchange, permissions = shapes.topic_permissions(await json_body(request))
    access = access_of(request)
    created = not _topic_permissions(access, user, vhost, exchange)
    access.set_topic_permissions(user, vhost, exchange, permissions)
    return done(created)


@routes.delete("/api/topic-permissions/{vhost}/{user}")
async def delete_topic_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    if not _topic_permissions(access, user, vhost):
        raise ObjectNotFound
    access.clear_topic_permissions(user, vhost)
    return done()


@routes.delete("/api/topic-permissions/{vhost}/{user}/{exchange}")
async def delete_topic_permission(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    exchange = request.match_info["exchange"]
    if not _topic_permissions(access, user, vhost, exchange):
        raise ObjectNotFound
    access.clear_topic_permissions(user, vhost, exchange)
    return done()
