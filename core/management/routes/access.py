"""The endpoints for users, vhosts, permissions, topic permissions, vhost limits and
definitions, with RabbitMQ's paths, JSON and status codes. Names in paths are
percent-encoded (`/api/vhosts/%2F`)."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from lavin.api import errors
from lavin.broker.access.access_control import AccessControl, NotFoundError
from lavin.management.definitions.exporter import export_definitions
from lavin.management.definitions.importer import DefinitionsError, import_definitions
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import (
    BROKER,
    ObjectNotFound,
    access_of,
    done,
    error_response,
    json_body,
    known_vhost,
    reply,
)
from lavin.management.http.requester import requester
from lavin.management.shapes import access as shapes
from lavin.management.shapes.message_stats import vhost_message_stats

# The peer a login check is made as: `lavin ctl` runs on this machine.
LOCAL_PEER: Final = "127.0.0.1"

routes = web.RouteTableDef()


# ---- users -------------------------------------------------------------------------------


@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    users = sorted(access_of(request).users(), key=lambda user: user.name)
    return list_reply(request, [shapes.user_json(user) for user in users])


# Before /api/users/{user}, which would take these names as a user's.
@routes.get("/api/users/without-permissions")
async def users_without_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access = access_of(request)
    permitted = {user for user, _, _ in access.permissions()}
    users = sorted((user for user in access.users() if user.name not in permitted), key=lambda user: user.name)
    return list_reply(request, [shapes.user_json(user) for user in users])


@routes.post("/api/users/bulk-delete")
async def bulk_delete_users(request: web.Request) -> web.Response:
    """`{"users": [names]}`: delete those users; names that are not users are skipped, as
    RabbitMQ does."""
    requester(request).require_administrator()
    (names,) = shapes.required(await json_body(request), "users")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise shapes.BadRequest("users must be a list of user names")
    access = access_of(request)
    for name in names:
        if access.user(name) is not None:
            access.delete_user(name)
    return done()


@routes.get("/api/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    user = access_of(request).user(request.match_info["user"])
    if user is None:
        raise ObjectNotFound
    return reply(shapes.user_json(user))


@routes.put("/api/users/{user}")
async def put_user(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return done(shapes.put_user(access_of(request), request.match_info["user"], await json_body(request)))


@routes.delete("/api/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, name = access_of(request), request.match_info["user"]
    if access.user(name) is None:
        raise ObjectNotFound
    access.delete_user(name)
    return done()


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


# ---- vhosts ------------------------------------------------------------------------------


@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.Response:
    visible = await requester(request).visible_vhosts(sorted(access_of(request).vhosts()))
    return list_reply(request, [_vhost_with_counts(request, name) for name in visible])


@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    name = known_vhost(access_of(request), request.match_info["vhost"])
    await requester(request).require_vhost(name)
    return reply(_vhost_with_counts(request, name))


def _vhost_with_counts(request: web.Request, name: str) -> dict[str, Any]:
    """A vhost's JSON with its message counts and statistics, as RabbitMQ lists it."""
    broker = request.app[BROKER]
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


def user_and_vhost(request: web.Request) -> tuple[str, str]:
    """The path's user and vhost for a PUT, which RabbitMQ refuses with 400 when either is unknown."""
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    if access.user(user) is None or vhost not in access.vhosts():
        raise shapes.BadRequest("vhost_or_user_not_found")
    return user, vhost


@routes.get("/api/permissions")
async def list_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return list_reply(request, _permissions(access_of(request)))


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
    user, vhost = user_and_vhost(request)
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


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return list_reply(request, _topic_permissions(access_of(request)))


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
    user, vhost = user_and_vhost(request)
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


def limited_vhost(request: web.Request) -> str:
    """The path's vhost; RabbitMQ answers 404 `vhost_not_found` for an unknown one."""
    name = request.match_info["vhost"]
    if name not in access_of(request).vhosts():
        raise NotFoundError("vhost_not_found")
    return name


@routes.put("/api/vhost-limits/{vhost}/{name}")
async def put_limit(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, vhost = access_of(request), limited_vhost(request)
    value = shapes.limit_value(await json_body(request))
    access.set_vhost_limits(vhost, {**access.vhost_limits(vhost), request.match_info["name"]: value})
    return done()


@routes.delete("/api/vhost-limits/{vhost}/{name}")
async def delete_limit(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access, vhost = access_of(request), limited_vhost(request)
    limits = dict(access.vhost_limits(vhost))
    limits.pop(request.match_info["name"], None)
    access.set_vhost_limits(vhost, limits)
    return done()


# ---- definitions -------------------------------------------------------------------------


@routes.get("/api/definitions")
async def get_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return reply(export_definitions(request.app[BROKER]))


@routes.post("/api/definitions")
async def post_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    try:
        report = import_definitions(request.app[BROKER], await json_body(request))
    except DefinitionsError as exc:
        raise shapes.BadRequest(str(exc)) from None
    if report.failures:
        raise shapes.BadRequest("; ".join(report.failures))
    return done()


# ---- Lavin's own -------------------------------------------------------------------------


@routes.post("/api/authenticate")
async def authenticate(request: web.Request) -> web.Response:
    """Whether a user's password logs in, through the configured auth backends (`lavin ctl
    authenticate_user`): 200 with the user's name and tags, or 403."""
    requester(request).require_administrator()
    username, password = shapes.required(await json_body(request), "username", "password")
    try:
        user = await request.app[BROKER].authenticate(
            shapes.text(username, "username"), shapes.text(password, "password"), LOCAL_PEER, "PLAIN"
        )
    except errors.ConnectionAccessRefused:
        return error_response(403, "access_refused", f"user '{username}' - invalid credentials")
    return reply({"name": user.name, "tags": list(user.tags)})
