"""Who asks the management API, and what its tags let it do, as in RabbitMQ:

- no tag of the four below: no management access at all (401);
- `management`: the vhosts it has permissions on, and its own connections and channels;
- `policymaker`: `management`, plus policies and parameters on those vhosts;
- `monitoring`: `management`, plus every vhost, connection and channel, and node data;
- `administrator`: everything.

Over TCP a user logs in with HTTP Basic on every request (the broker's auth backends
decide, as for AMQP). Over the control socket every request is trusted.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from lavin.api import errors
from lavin.api.auth import Access, User
from lavin.api.printable import printable
from lavin.management.http.replies import BROKER, Handler, reply
from lavin.transport.unix import UNIX_CLIENT

log = logging.getLogger(__name__)

MANAGEMENT_TAGS: Final = frozenset({"management", "policymaker", "monitoring", "administrator"})
# RabbitMQ's realm: tools that match on it keep working.
REALM: Final = 'Basic realm="RabbitMQ Management"'
# Paths only a logged-in user may read; the web UI's pages and files are public (they
# hold no data, and log in to the API from the browser).
PROTECTED_PREFIXES: Final = ("/api/", "/metrics")
# RabbitMQ's reason when a user's tags allow the endpoint but not this object.
NOT_AUTHORISED_OBJECT: Final = "User not authorised to access object"
# RabbitMQ's reason when the path names a vhost the user has no permissions on.
NOT_AUTHORISED_VHOST: Final = "User not authorised to access virtual host"


class NotAuthorised(Exception):
    """A logged-in user may not do this: 401 with RabbitMQ's body, `{"error":
    "not_authorised", "reason": ...}` (a failed login is `not_authorized`, as RabbitMQ spells
    the two)."""


@dataclass(frozen=True)
class Requester:
    """The user behind a request; `user` is None for a trusted request (control socket)."""

    name: str
    tags: frozenset[str]
    user: User | None

    @property
    def is_administrator(self) -> bool:
        return self.user is None or "administrator" in self.tags

    @property
    def is_monitor(self) -> bool:
        """Sees every vhost, connection and channel (monitoring or administrator)."""
        return self.is_administrator or "monitoring" in self.tags

    @property
    def is_policymaker(self) -> bool:
        return self.is_administrator or "policymaker" in self.tags

    def require_administrator(self) -> None:
        if not self.is_administrator:
            raise NotAuthorised("Not administrator user")

    def require_monitor(self) -> None:
        if not self.is_monitor:
            raise NotAuthorised("Not monitor user")

    async def require_policymaker(self, vhost: str | None = None) -> None:
        """RabbitMQ's rule for policies and parameters: an administrator, or a policymaker
        with access to `vhost` when the path names one."""
        if self.is_administrator:
            return
        if not self.is_policymaker or (vhost is not None and not await self.may_access_vhost(vhost)):
            raise NotAuthorised(NOT_AUTHORISED_OBJECT)

    async def allows(self, access: Access) -> bool:
        """The user's authorizer's answer (awaited when it comes later); a trusted request
        may do anything, and an authorizer that fails refuses, as on the AMQP side."""
        if self.user is None:
            return True
        authorizer = self.user.authorizer
        assert authorizer is not None  # User.__post_init__ sets one
        try:
            answer: object = authorizer.check(access)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:  # one broken check must not answer 500
            log.exception("authorizer of user '%s' failed on %s", printable(self.user.name), printable(repr(access)))
            return False
        return bool(answer)

    async def may_access_vhost(self, vhost: str) -> bool:
        """Whether the user has permissions on `vhost` (its authorizer decides)."""
        return await self.allows(Access(vhost, "vhost"))

    async def require_vhost(self, vhost: str) -> None:
        """401 unless the user may see `vhost`: any vhost for a monitor, else one it has
        permissions on."""
        if not self.is_monitor and not await self.may_access_vhost(vhost):
            raise NotAuthorised(NOT_AUTHORISED_VHOST)

    async def visible_vhosts(self, vhosts: Iterable[str]) -> list[str]:
        """Those of `vhosts` the user may see, in their order."""
        if self.is_monitor:
            return list(vhosts)
        return [vhost for vhost in vhosts if await self.may_access_vhost(vhost)]

    def owns(self, user_name: str) -> bool:
        """Whether a connection or channel of `user_name` is the requester's to see (all
        are a monitor's)."""
        return self.is_monitor or user_name == self.name


REQUESTER: Final = web.RequestKey("requester", Requester)
TRUSTED: Final = Requester("", frozenset({"administrator"}), None)


def requester(request: web.Request) -> Requester:
    return request[REQUESTER]


@web.middleware
async def trust_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    request[REQUESTER] = TRUSTED
    return await answer_as(request, handler)


@web.middleware
async def authenticate_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith(PROTECTED_PREFIXES):
        return await handler(request)
    credentials = basic_credentials(request.headers.get("Authorization", ""))
    if credentials is None:
        return not_authenticated("Not_Authorized")
    username, password = credentials
    peer = request.remote or UNIX_CLIENT[0]  # only a unix socket's client has no address
    try:
        user = await request.app[BROKER].authenticate(username, password, peer, "PLAIN")
    except errors.ConnectionAccessRefused:
        return not_authenticated("Not_Authorized")
    tags = frozenset(user.tags)
    if not tags & MANAGEMENT_TAGS:
        return not_authorised("Not management user")
    request[REQUESTER] = Requester(user.name, tags, user)
    return await answer_as(request, handler)


async def answer_as(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's answer for the requester set on `request`; 401 where its tags fall short."""
    try:
        return await handler(request)
    except NotAuthorised as exc:
        return not_authorised(str(exc))


def not_authenticated(reason: str) -> web.Response:
    """A login that failed or was not given."""
    return _unauthorised("not_authorized", reason)


def not_authorised(reason: str) -> web.Response:
    """A user who logged in and may not do this."""
    return _unauthorised("not_authorised", reason)


def _unauthorised(error: str, reason: str) -> web.Response:
    response = reply({"error": error, "reason": reason}, status=401)
    response.headers["WWW-Authenticate"] = REALM
    return response


def basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    username, colon, password = decoded.partition(":")
    return (username, password) if colon else None
