"""The HTTP endpoints of the management API for users, vhosts, permissions, topic
permissions, vhost limits and definitions, with RabbitMQ's paths, JSON, status codes and
errors: 201 for a PUT that creates, 204 for one that updates and for a DELETE, 400
`{"error": "bad_request", "reason": ...}`, 404 `{"error": "Object Not Found", ...}`.

Names in paths are percent-encoded (`/api/vhosts/%2F`). The application does not check
who asks: whoever serves it does (the control socket trusts local root).
"""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from lavin.api import errors
from lavin.api.printable import printable
from lavin.broker.access_control import AccessControl, AccessControlError, NotFoundError
from lavin.broker.broker import Broker
from lavin.management import shapes
from lavin.management.definitions import DefinitionsError, export_definitions, import_definitions

log = logging.getLogger(__name__)

BROKER: Final = web.AppKey("broker", Broker)
# RabbitMQ's default max_http_body_size: a definitions document can be large.
MAX_BODY_SIZE: Final = 20 * 1024 * 1024
NOT_FOUND: Final = {"error": "Object Not Found", "reason": "Not Found"}
# The peer a local login check is made as: the control socket is on this machine.
LOCAL_PEER: Final = "127.0.0.1"

routes = web.RouteTableDef()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(broker: Broker) -> web.Application:
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_SIZE)
    app[BROKER] = broker
    app.add_routes(routes)
    return app


class _NotFound(Exception):
    """The object a path names does not exist: 404, as RabbitMQ answers."""


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except shapes.BadRequest as exc:
        return error_response(400, "bad_request", str(exc))
    except NotFoundError as exc:
        return error_response(404, "not_found", str(exc))
    except AccessControlError as exc:
        return error_response(400, "bad_request", str(exc))
    except _NotFound:
        return reply(NOT_FOUND, status=404)
    except web.HTTPNotFound:  # no such path
        return reply(NOT_FOUND, status=404)
    except web.HTTPMethodNotAllowed as exc:
        return error_response(405, "method_not_allowed", f"{exc.method} is not allowed here")
    except web.HTTPRequestEntityTooLarge:
        return error_response(400, "bad_request", "Exceeded HTTP request body size limit")
    except OSError as exc:  # users.json, vhosts.json or a vhost's files could not be written
        log.error("%s %s failed: %s", request.method, printable(request.path), exc)
        return error_response(500, "internal_server_error", str(exc))


def error_response(status: int, error: str, reason: str) -> web.Response:
    return reply({"error": error, "reason": reason}, status=status)


def _json_default(value: Any) -> Any:
    """AMQP argument values JSON lacks: byte strings, decimals, timestamps."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_dumps = functools.partial(json.dumps, default=_json_default)


def reply(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def done(created: bool = False) -> web.Response:
    return web.Response(status=201 if created else 204)


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, read as RabbitMQ reads it (an empty body is `{}`)."""
    body = (await request.read()).strip()
    if body in (b"", b"null", b"undefined"):
        return {}
    try:
        decoded = json.loads(body)
    except ValueError:
        raise shapes.BadRequest("not_json") from None
    if isinstance(decoded, str):
        raise shapes.BadRequest(
            "invalid payload: the request body JSON-decoded to a string. Is the input doubly-JSON-encoded?"
        )
    if not isinstance(decoded, dict):
        raise shapes.BadRequest("not_json")
    return decoded


def access_of(request: web.Request) -> AccessControl:
    return request.app[BROKER].access


def known_vhost(access: AccessControl, name: str) -> str:
    if name not in access.vhosts():
        raise _NotFound
    return name


# ---- users -------------------------------------------------------------------------------


@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    users = sorted(access_of(request).users(), key=lambda user: user.name)
    return reply([shapes.user_json(user) for user in users])


@routes.get("/api/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    user = access_of(request).user(request.match_info["user"])
    if user is None:
        raise _NotFound
    return reply(shapes.user_json(user))


@routes.put("/api/users/{user}")
async def put_user(request: web.Request) -> web.Response:
    return done(shapes.put_user(access_of(request), request.match_info["user"], await json_body(request)))


@routes.delete("/api/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    access, name = access_of(request), request.match_info["user"]
    if access.user(name) is None:
        raise _NotFound
    access.delete_user(name)
    return done()


@routes.get("/api/users/{user}/permissions")
async def user_permissions(request: web.Request) -> web.Response:
    access, name = access_of(request), request.match_info["user"]
    if access.user(name) is None:
        raise _NotFound
    return reply(_permissions(access, user=name))


@routes.get("/api/users/{user}/topic-permissions")
async def user_topic_permissions(request: web.Request) -> web.Response:
    access, name = access_of(request), request.match_info["user"]
    if access.user(name) is None:
        raise _NotFound
    return reply(_topic_permissions(access, user=name))


# ---- vhosts ------------------------------------------------------------------------------


@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.Response:
    return reply([shapes.vhost_json(name) for name in sorted(access_of(request).vhosts())])


@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    return reply(shapes.vhost_json(known_vhost(access_of(request), request.match_info["vhost"])))


@routes.put("/api/vhosts/{vhost}")
async def put_vhost(request: web.Request) -> web.Response:
    await json_body(request)  # description, tags and tracing have no effect in Lavin
    access, name = access_of(request), request.match_info["vhost"]
    if name in access.vhosts():
        return done()
    access.add_vhost(name)
    return done(created=True)


@routes.delete("/api/vhosts/{vhost}")
async def delete_vhost(request: web.Request) -> web.Response:
    access = access_of(request)
    await access.delete_vhost(known_vhost(access, request.match_info["vhost"]))
    return done()


@routes.get("/api/vhosts/{vhost}/permissions")
async def vhost_permissions(request: web.Request) -> web.Response:
    access = access_of(request)
    return reply(_permissions(access, vhost=known_vhost(access, request.match_info["vhost"])))


@routes.get("/api/vhosts/{vhost}/topic-permissions")
async def vhost_topic_permissions(request: web.Request) -> web.Response:
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
    return reply(_permissions(access_of(request)))


@routes.get("/api/permissions/{vhost}/{user}")
async def get_permissions(request: web.Request) -> web.Response:
    found = _permissions(access_of(request), request.match_info["user"], request.match_info["vhost"])
    if not found:
        raise _NotFound
    return reply(found[0])


@routes.put("/api/permissions/{vhost}/{user}")
async def put_permissions(request: web.Request) -> web.Response:
    user, vhost = user_and_vhost(request)
    permissions = shapes.vhost_permissions(await json_body(request))
    access = access_of(request)
    created = not _permissions(access, user, vhost)
    access.set_permissions(user, vhost, permissions)
    return done(created)


@routes.delete("/api/permissions/{vhost}/{user}")
async def delete_permissions(request: web.Request) -> web.Response:
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    if not _permissions(access, user, vhost):
        raise _NotFound
    access.clear_permissions(user, vhost)
    return done()


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    return reply(_topic_permissions(access_of(request)))


@routes.get("/api/topic-permissions/{vhost}/{user}")
async def get_topic_permissions(request: web.Request) -> web.Response:
    found = _topic_permissions(access_of(request), request.match_info["user"], request.match_info["vhost"])
    if not found:
        raise _NotFound
    return reply(found)


@routes.put("/api/topic-permissions/{vhost}/{user}")
async def put_topic_permissions(request: web.Request) -> web.Response:
    user, vhost = user_and_vhost(request)
    exchange, permissions = shapes.topic_permissions(await json_body(request))
    access = access_of(request)
    created = not _topic_permissions(access, user, vhost, exchange)
    access.set_topic_permissions(user, vhost, exchange, permissions)
    return done(created)


@routes.delete("/api/topic-permissions/{vhost}/{user}")
async def delete_topic_permissions(request: web.Request) -> web.Response:
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    if not _topic_permissions(access, user, vhost):
        raise _NotFound
    access.clear_topic_permissions(user, vhost)
    return done()


@routes.delete("/api/topic-permissions/{vhost}/{user}/{exchange}")
async def delete_topic_permission(request: web.Request) -> web.Response:
    access, user, vhost = access_of(request), request.match_info["user"], request.match_info["vhost"]
    exchange = request.match_info["exchange"]
    if not _topic_permissions(access, user, vhost, exchange):
        raise _NotFound
    access.clear_topic_permissions(user, vhost, exchange)
    return done()


# ---- vhost limits ------------------------------------------------------------------------


@routes.get("/api/vhost-limits")
async def list_limits(request: web.Request) -> web.Response:
    access = access_of(request)
    return reply(
        [shapes.limits_json(name, limits) for name in sorted(access.vhosts()) if (limits := access.vhost_limits(name))]
    )


@routes.get("/api/vhost-limits/{vhost}")
async def get_limits(request: web.Request) -> web.Response:
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
    access, vhost = access_of(request), limited_vhost(request)
    value = shapes.limit_value(await json_body(request))
    access.set_vhost_limits(vhost, {**access.vhost_limits(vhost), request.match_info["name"]: value})
    return done()


@routes.delete("/api/vhost-limits/{vhost}/{name}")
async def delete_limit(request: web.Request) -> web.Response:
    access, vhost = access_of(request), limited_vhost(request)
    limits = dict(access.vhost_limits(vhost))
    limits.pop(request.match_info["name"], None)
    access.set_vhost_limits(vhost, limits)
    return done()


# ---- definitions -------------------------------------------------------------------------


@routes.get("/api/definitions")
async def get_definitions(request: web.Request) -> web.Response:
    return reply(export_definitions(request.app[BROKER]))


@routes.post("/api/definitions")
async def post_definitions(request: web.Request) -> web.Response:
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
    username, password = shapes.required(await json_body(request), "username", "password")
    try:
        user = await request.app[BROKER].authenticate(
            shapes.text(username, "username"), shapes.text(password, "password"), LOCAL_PEER, "PLAIN"
        )
    except errors.ConnectionAccessRefused:
        return error_response(403, "access_refused", f"user '{username}' - invalid credentials")
    return reply({"name": user.name, "tags": list(user.tags)})
