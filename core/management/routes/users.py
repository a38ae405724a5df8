"""The endpoints for users, with RabbitMQ's paths, JSON and status codes:

- `/api/users`, `/api/users/without-permissions`, `/api/users/bulk-delete` (POST),
  `/api/users/{user}` (GET, PUT, DELETE): `administrator`;
- `/api/authenticate` (POST, Lavin's own: whether a password logs in): `administrator`;
- `/api/whoami`: any management user, about itself.

A user's permissions are `lavin.management.routes.permissions`'. Names in paths are
percent-encoded.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from lavin.api import errors
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import ObjectNotFound, access_of, broker_of, done, error_response, json_body, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import access as shapes

# The peer a login check is made as: `lavin ctl` runs on this machine.
LOCAL_PEER: Final = "127.0.0.1"

routes = web.RouteTableDef()


@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    users = sorted(access_of(request).users(), key=lambda user: user.name)
    return await list_reply(request, [shapes.user_json(user) for user in users])


# Before /api/users/{user}, which would take these names as a user's.
@routes.get("/api/users/without-permissions")
async def users_without_permissions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    access = access_of(request)
    permitted = {user for user, _, _ in access.permissions()}
    users = sorted((user for user in access.users() if user.name not in permitted), key=lambda user: user.name)
    return await list_reply(request, [shapes.user_json(user) for user in users])


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


@routes.post("/api/authenticate")
async def authenticate(request: web.Request) -> web.Response:
    """Whether a user's password logs in, through the configured auth backends (`lavin ctl
    authenticate_user`): 200 with the user's name and tags, or 403."""
    requester(request).require_administrator()
    username, password = shapes.required(await json_body(request), "username", "password")
    try:
        user = await broker_of(request).authenticate(
            shapes.text(username, "username"), shapes.text(password, "password"), LOCAL_PEER, "PLAIN"
        )
    except errors.ConnectionAccessRefused:
        return error_response(403, "access_refused", f"user '{username}' - invalid credentials")
    return reply({"name": user.name, "tags": list(user.tags)})


@routes.get("/api/whoami")
async def whoami(request: web.Request) -> web.Response:
    who = requester(request)
    return reply({"name": who.name, "tags": sorted(who.tags)})
