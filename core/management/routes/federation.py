"""Federation link status, with RabbitMQ's paths and shapes (rabbitmq_federation_management):
`GET /api/federation-links` and `/api/federation-links/{vhost}`, for any management user,
over the vhosts it may see. A row: `node`, `exchange` or `queue`, `upstream_exchange` or
`upstream_queue`, `type`, `vhost`, `upstream`, `id`, `status` (`starting`, `running`,
`error` with `error`), `uri` without its password, `timestamp`, and Lavin's `forwarded`.
"""

from __future__ import annotations

from aiohttp import web
from lavin.management.http.listing import list_reply
from lavin.management.http.policy_access import listed_vhosts, path_vhost
from lavin.management.http.replies import broker_of
from lavin.management.http.requester import requester
from lavin.management.shapes.runtime import node_name

routes = web.RouteTableDef()


@routes.get("/api/federation-links")
async def list_links(request: web.Request) -> web.Response:
    node = node_name(broker_of(request))
    rows = [row for vhost in await listed_vhosts(request) for row in vhost.links.federation.status(node)]
    return await list_reply(request, rows)


@routes.get("/api/federation-links/{vhost}")
async def list_vhost_links(request: web.Request) -> web.Response:
    vhost = path_vhost(request)
    await requester(request).require_vhost(vhost.name)
    return await list_reply(request, vhost.links.federation.status(node_name(broker_of(request))))
