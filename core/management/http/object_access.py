"""Who may reach a vhost's exchanges, queues and bindings through the API, and how AMQP
errors become HTTP replies, as in RabbitMQ.

- A vhost's objects are reached by an administrator, and by another management user when
  it has permissions there; anyone else gets 401 "User not authorised to access virtual
  host", as RabbitMQ 3.13 answers (`is_authorized_vhost`); a vhost that does not exist is
  404.
- Declares, deletes, bindings, purges, publishes and gets check the user's configure,
  write and read permissions as the AMQP methods do; over the control socket everything
  is allowed.
- Errors: RabbitMQ runs declares, deletes, binds and purges as direct AMQP methods, and a
  publish or get on a channel of its own, and reports each its own way (`direct_reply` and
  `channel_reply` below).
- Lists show a vhost's exchanges and queues by name.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from aiohttp import web
from lavin.api import errors
from lavin.api.auth import Access, Permission, ResourceKind
from lavin.broker.queues.queue import Queue
from lavin.broker.routing.exchange import Exchange
from lavin.broker.vhost import VHost
from lavin.management.http.replies import BROKER, ObjectNotFound, error_response
from lavin.management.http.requester import NOT_AUTHORISED_VHOST, NotAuthorised, Requester, requester
from lavin.management.shapes.objects import DEFAULT_EXCHANGE_PATH_NAME

Handler = Callable[[web.Request], Awaitable[web.Response]]


async def visible_vhost(request: web.Request) -> VHost:
    """The vhost the path names; 404 when it does not exist, 401 when the requester may not
    reach it."""
    name = request.match_info["vhost"]
    vhost = request.app[BROKER].vhosts.get(name)
    if vhost is None:
        raise ObjectNotFound
    if not await _sees(requester(request), name):
        raise NotAuthorised(NOT_AUTHORISED_VHOST)
    return vhost


async def visible_vhosts(request: web.Request) -> list[VHost]:
    """Every vhost the requester may see, by name."""
    who = requester(request)
    vhosts = request.app[BROKER].vhosts
    return [vhosts[name] for name in sorted(vhosts) if await _sees(who, name)]


async def _sees(who: Requester, vhost: str) -> bool:
    return who.is_administrator or await who.may_access_vhost(vhost)


def exchanges_by_name(vhost: VHost) -> list[Exchange]:
    return [vhost.exchanges[name] for name in sorted(vhost.exchanges)]


def queues_by_name(vhost: VHost) -> list[Queue]:
    return [vhost.queues[name] for name in sorted(vhost.queues)]


class Permissions:
    """The requester's permissions on one vhost, asked of its authorizer each time (an API
    request is short-lived: nothing to cache)."""

    def __init__(self, request: web.Request, vhost: str) -> None:
        self.requester = requester(request)
        self.vhost = vhost

    async def require(self, kind: ResourceKind, name: str, permission: Permission) -> None:
        """AccessRefused (RabbitMQ's text) unless the user may `permission` the queue or exchange."""
        if kind == "exchange" and not name:
            name = DEFAULT_EXCHANGE_PATH_NAME  # its name in permission checks too, as in RabbitMQ
        if not await self.requester.allows(Access(self.vhost, kind, name, permission)):
            raise errors.AccessRefused(
                f"access to {kind} '{name}' in vhost '{self.vhost}' refused for user '{self.requester.name}'"
            )

    async def require_topic(self, exchange: str, permission: Permission, routing_key: str) -> None:
        if not await self.requester.allows(Access(self.vhost, "topic", exchange, permission, routing_key)):
            raise errors.AccessRefused(
                f"access to topic '{routing_key}' in exchange '{exchange}' in vhost '{self.vhost}' "
                f"refused for user '{self.requester.name}'"
            )


def direct_reply(handler: Handler) -> Handler:
    """RabbitMQ's replies to a failed direct method: 404 for NOT_FOUND, 401 "Access
    refused." for ACCESS_REFUSED and NOT_ALLOWED, else 400 with the error's text."""

    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except errors.NotFound as exc:
            return error_response(404, "not_found", exc.text)
        except (errors.AccessRefused, errors.NotAllowed):
            return error_response(401, "not_authorised", "Access refused.")
        except errors.AMQPError as exc:
            return error_response(400, "bad_request", exc.text)

    return answer


def channel_reply(handler: Handler) -> Handler:
    """RabbitMQ's replies to a channel closed by an error: 404 for NOT_FOUND and 401 for
    ACCESS_REFUSED with the close's reply text, else 400 with the code and the text."""

    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except errors.NotFound as exc:
            return error_response(404, "not_found", exc.reply_text)
        except errors.AccessRefused as exc:
            return error_response(401, "not_authorised", exc.reply_text)
        except errors.AMQPError as exc:
            return error_response(400, "bad_request", f"{exc.reply_code} {exc.reply_text}")

    return answer
