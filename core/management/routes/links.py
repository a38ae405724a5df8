"""Shovel and federation link status, shovel control: RabbitMQ's paths and shapes
(rabbitmq_shovel_management, rabbitmq_federation_management) and LavinMQ's pause and resume.

- `GET /api/shovels`, `/api/shovels/{vhost}`: the shovels of the vhosts the requester may
  see (any management user), RabbitMQ's rows: `name`, `vhost`, `type` (`dynamic`), `state`
  (`starting`, `running`, `terminated`, `error` with `reason`; Lavin also `paused`),
  `src_uri`/`dest_uri` without passwords, the endpoints' fields, and Lavin's counters
  `forwarded` and `confirmed`;
- `GET /api/shovels/vhost/{vhost}/{name}`: one shovel;
- `DELETE /api/shovels/vhost/{vhost}/{name}/restart`: start it again now;
- `PUT /api/shovels/{vhost}/{name}/pause`, `/resume`: hold it (its connections closed, its
  messages left at the source) and let it go again. A pause is stored, as LavinMQ's: it
  lasts across restarts until resumed or the parameter changes;
- `GET /api/federation-links`, `/api/federation-links/{vhost}`: federation links, same
  rule; a row: `node`, `exchange` or `queue`, `upstream_exchange` or `upstream_queue`,
  `type`, `vhost`, `upstream`, `id`, `status` (`starting`, `running`, `error` with
  `error`), `uri` without its password, `timestamp`, and Lavin's `forwarded`.

Restart, pause and resume take a policymaker with access to the vhost, as the parameter does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from lavin.broker.links.link import ShovelLink
from lavin.broker.links.vhost_links import VHostLinks
from lavin.management.http.listing import list_reply
from lavin.management.http.policy_access import listed_vhosts, path_vhost
from lavin.management.http.replies import ObjectNotFound, broker_of, done, reply
from lavin.management.http.requester import requester
from lavin.management.shapes.runtime import node_name

routes = web.RouteTableDef()

# The status rows of one kind of link of a vhost, for a node name.
Rows = Callable[[VHostLinks, str], list[dict[str, Any]]]


def _shovel_rows(links: VHostLinks, node: str) -> list[dict[str, Any]]:
    return links.shovels.status(node)


def _federation_rows(links: VHostLinks, node: str) -> list[dict[str, Any]]:
    return links.federation.status(node)


async def _all_rows(request: web.Request, rows: Rows) -> web.Response:
    node = node_name(broker_of(request))
    return await list_reply(request, [row for vhost in await listed_vhosts(request) for row in rows(vhost.links, node)])


async def _vhost_rows(request: web.Request, rows: Rows) -> list[dict[str, Any]]:
    vhost = path_vhost(request)
    await requester(request).require_vhost(vhost.name)
    return rows(vhost.links, node_name(broker_of(request)))


@routes.get("/api/shovels")
async def list_shovels(request: web.Request) -> web.Response:
    return await _all_rows(request, _shovel_rows)


@routes.get("/api/shovels/{vhost}")
async def list_vhost_shovels(request: web.Request) -> web.Response:
    return await list_reply(request, await _vhost_rows(request, _shovel_rows))


@routes.get("/api/shovels/vhost/{vhost}/{name}")
async def get_shovel(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    for row in await _vhost_rows(request, _shovel_rows):
        if row["name"] == name:
            return reply(row)
    raise ObjectNotFound


@routes.get("/api/federation-links")
async def list_federation_links(request: web.Request) -> web.Response:
    return await _all_rows(request, _federation_rows)


@routes.get("/api/federation-links/{vhost}")
async def list_vhost_federation_links(request: web.Request) -> web.Response:
    return await list_reply(request, await _vhost_rows(request, _federation_rows))


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
