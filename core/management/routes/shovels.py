"""Shovel status and control, with RabbitMQ's paths and shapes (rabbitmq_shovel_management)
and LavinMQ's pause and resume:

- `GET /api/shovels`, `/api/shovels/{vhost}`: the shovels of the vhosts the requester may
  see (any management user), RabbitMQ's rows: `name`, `vhost`, `type` (`dynamic`), `state`
  (`starting`, `running`, `terminated`, `error` with `reason`; Lavin also `paused`),
  `src_uri`/`dest_uri` without passwords, the endpoints' fields, and Lavin's counters
  `forwarded` and `confirmed`;
- `GET /api/shovels/vhost/{vhost}/{name}`: one shovel;
- `DELETE /api/shovels/vhost/{vhost}/{name}/restart`: start it again now;
- `PUT /api/shovels/{vhost}/{name}/pause`, `/resume`: hold it (its connections closed, its
  messages left at the source) and let it go again. A pause is stored, as LavinMQ's: it
  lasts across restarts until resumed or the parameter changes.

Restart, pause and resume take a policymaker with access to the vhost, as the parameter does.
"""

from __future__ import annotations

from aiohttp import web
from lavin.broker.links.link import ShovelLink
from lavin.management.http.listing import list_reply
from lavin.management.http.policy_access import listed_vhosts, path_vhost
from lavin.management.http.replies import ObjectNotFound, broker_of, done, reply
from lavin.management.http.requester import requester
from lavin.management.shapes.runtime import node_name

routes = web.RouteTableDef()


@routes.get("/api/shovels")
async def list_shovels(request: web.Request) -> web.Response:
    node = node_name(broker_of(request))
    rows = [row for vhost in await listed_vhosts(request) for row in vhost.links.shovels.status(node)]
    return await list_reply(request, rows)


@routes.get("/api/shovels/{vhost}")
async def list_vhost_shovels(request: web.Request) -> web.Response:
    vhost = path_vhost(request)
    await requester(request).require_vhost(vhost.name)
    return await list_reply(request, vhost.links.shovels.status(node_name(broker_of(request))))


@routes.get("/api/shovels/vhost/{vhost}/{name}")
async def get_shovel(request: web.Request) -> web.Response:
    vhost = path_vhost(request)
    await requester(request).require_vhost(vhost.name)
    name = request.match_info["name"]
    for row in vhost.links.shovels.status(node_name(broker_of(request))):
        if row["name"] == name:
            return reply(row)
    raise ObjectNotFound


async def _link(request: web.Request) -> ShovelLink:
    """The shovel the path names, for a policymaker on its vhost; 404 when there is none."""
    await requester(request).require_policymaker(request.match_info["vhost"])
    link = path_vhost(request).links.shovels.links.get(request.match_info["name"])
    if link is None:
        raise ObjectNotFound
    return link


@routes.delete("/api/shovels/vhost/{vhost}/{name}/restart")
async def restart_shovel(request: web.Request) -> web.Response:
    (await _link(request)).restart()
    return done()


@routes.put("/api/shovels/{vhost}/{name}/pause")
async def pause_shovel(request: web.Request) -> web.Response:
    link = await _link(request)
    await path_vhost(request).links.shovels.pause(link)
    return done()


@routes.put("/api/shovels/{vhost}/{name}/resume")
async def resume_shovel(request: web.Request) -> web.Response:
    link = await _link(request)
    path_vhost(request).links.shovels.resume(link)
    return done()
