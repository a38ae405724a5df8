"""What the policy and parameter endpoints share, as RabbitMQ answers them: the vhost a
path names (404 for a read, 404 `vhost_not_found` for a change), the vhosts a list covers,
and reasons escaped the way RabbitMQ reports them. Who may ask is
`Requester.require_policymaker`."""

from __future__ import annotations

from aiohttp import web
from lavin.broker.access.access_control import NotFoundError
from lavin.broker.vhost import VHost
from lavin.management.http.replies import ObjectNotFound, broker_of
from lavin.management.http.requester import requester


def path_vhost(request: web.Request) -> VHost:
    """The path's vhost; 404 when there is none of that name."""
    vhost = broker_of(request).vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise ObjectNotFound
    return vhost


def vhost_to_change(request: web.Request) -> VHost:
    """The path's vhost for a PUT: RabbitMQ answers 404 `vhost_not_found`."""
    vhost = broker_of(request).vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise NotFoundError("vhost_not_found")
    return vhost


async def listed_vhosts(request: web.Request) -> list[VHost]:
    """The vhosts a list covers: those the requester may see, by name."""
    vhosts = broker_of(request).vhosts
    names = await requester(request).visible_vhosts(sorted(vhosts))
    return [vhosts[name] for name in names]


def escaped(reason: str) -> str:
    """RabbitMQ escapes the angle brackets of a reason it reports for policies and parameters."""
    return reason.replace("<", "&lt;").replace(">", "&gt;")
