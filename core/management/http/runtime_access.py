"""Who may see and close what runs now, as in RabbitMQ: a `monitoring` user or an
administrator sees every connection and channel, another management user its own; closing
another user's connection takes an administrator. Per-vhost lists (and the aliveness test)
name a vhost that must be running and that the requester may see."""

from __future__ import annotations

from aiohttp import web
from lavin.broker.runtime.stats import ConnectionSnapshot
from lavin.management.http.replies import ObjectNotFound, broker_of
from lavin.management.http.requester import NOT_AUTHORISED_OBJECT, NotAuthorised, Requester, requester


def visible_connections(who: Requester, snapshots: list[ConnectionSnapshot]) -> list[ConnectionSnapshot]:
    """The connections the requester may see: all for a monitor, else its own."""
    return [snapshot for snapshot in snapshots if who.owns(snapshot.user or "")]


def require_owner(request: web.Request, user: str) -> None:
    """401 unless the requester may see (or, for a DELETE, close) what `user` opened."""
    who = requester(request)
    allowed = who.is_administrator if request.method == "DELETE" else who.is_monitor
    if not allowed and who.name != user:
        raise NotAuthorised(NOT_AUTHORISED_OBJECT)


async def running_vhost(request: web.Request) -> str:
    """The vhost the path names: 404 when there is none, 401 when the requester may not see it."""
    name = request.match_info["vhost"]
    if name not in broker_of(request).vhosts:
        raise ObjectNotFound
    await requester(request).require_vhost(name)
    return name
