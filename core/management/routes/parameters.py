"""The endpoints for runtime and global parameters, with RabbitMQ's paths, JSON, status
codes and tag rules; every one takes a `policymaker` (on a vhost it may use, when the path
names one) or an administrator:

- `/api/parameters`, `/api/parameters/{component}`, `/api/parameters/{component}/{vhost}`,
  `/api/parameters/{component}/{vhost}/{name}` (GET, PUT, DELETE): a vhost's runtime
  parameters, its limits among them (component `vhost-limits`, as RabbitMQ 3.x shows them);
- `/api/global-parameters`, `/api/global-parameters/{name}` (GET, PUT, DELETE).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from lavin.broker.links.definition import local_vhosts
from lavin.broker.links.endpoints import SHOVEL_COMPONENT
from lavin.broker.policy.policy_rules import PolicyError
from lavin.broker.vhost import VHost
from lavin.management.definitions.document import VHOST_LIMITS_COMPONENT
from lavin.management.definitions.exporter import parameters_json
from lavin.management.http.listing import list_reply
from lavin.management.http.policy_access import escaped, listed_vhosts, path_vhost, vhost_to_change
from lavin.management.http.replies import ObjectNotFound, broker_of, done, json_body, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import access as shapes

routes = web.RouteTableDef()


# ---- runtime parameters ----------------------------------------------------------------------


@routes.get("/api/parameters")
@routes.get("/api/parameters/{component}")
async def list_parameters(request: web.Request) -> web.Response:
    await requester(request).require_policymaker()
    broker = broker_of(request)
    component = request.match_info.get("component")
    items = [
        item
        for vhost in await listed_vhosts(request)
        for item in parameters_json(broker, vhost)
        if component is None or item["component"] == component
    ]
    return await list_reply(request, items)


@routes.get("/api/parameters/{component}/{vhost}")
async def list_vhost_parameters(request: web.Request) -> web.Response:
    vhost = path_vhost(request)
    await requester(request).require_policymaker(vhost.name)
    component = request.match_info["component"]
    items = [item for item in parameters_json(broker_of(request), vhost) if item["component"] == component]
    return await list_reply(request, items)


def _parameter(request: web.Request, vhost: VHost) -> dict[str, Any]:
    component, name = request.match_info["component"], request.match_info["name"]
    for item in parameters_json(broker_of(request), vhost):
        if item["component"] == component and item["name"] == name:
            return item
    raise ObjectNotFound


@routes.get("/api/parameters/{component}/{vhost}/{name}")
async def get_parameter(request: web.Request) -> web.Response:
    await requester(request).require_policymaker(request.match_info["vhost"])
    return reply(_parameter(request, path_vhost(request)))


@routes.put("/api/parameters/{component}/{vhost}/{name}")
async def put_parameter(request: web.Request) -> web.Response:
    await requester(request).require_policymaker(request.match_info["vhost"])
    vhost = vhost_to_change(request)
    (value,) = shapes.required(await json_body(request), "value")
    component, name = request.match_info["component"], request.match_info["name"]
    if component == VHOST_LIMITS_COMPONENT:
        if not isinstance(value, dict):
            raise shapes.BadRequest("vhost limits must be an object")
        access = broker_of(request).access
        created = not access.vhost_limits(vhost.name)
        access.set_vhost_limits(vhost.name, value)
        return done(created)
    if component == SHOVEL_COMPONENT:
        await _check_local_vhosts(request, vhost.name, value)
    try:
        return done(vhost.policies.set_parameter(component, name, value))
    except PolicyError as exc:
        raise shapes.BadRequest(escaped(str(exc))) from None


async def _check_local_vhosts(request: web.Request, own_vhost: str, value: Any) -> None:
    """A shovel acts in the vhosts of this broker its URIs name: the requester must have
    access to each, as RabbitMQ checks the user who sets it."""
    who = requester(request)
    for other in sorted(local_vhosts(value, own_vhost)):
        if not await who.may_access_vhost(other):
            raise shapes.BadRequest(f"Validation failed\n\nuser '{who.name}' has no access to vhost '{other}'\n")


@routes.delete("/api/parameters/{component}/{vhost}/{name}")
async def delete_parameter(request: web.Request) -> web.Response:
    await requester(request).require_policymaker(request.match_info["vhost"])
    vhost = path_vhost(request)
    _parameter(request, vhost)  # 404 when missing
    component, name = request.match_info["component"], request.match_info["name"]
    if component == VHOST_LIMITS_COMPONENT:
        broker_of(request).access.set_vhost_limits(vhost.name, {})
    else:
        vhost.policies.delete_parameter(component, name)
    return done()


# ---- global parameters -----------------------------------------------------------------------


@routes.get("/api/global-parameters")
async def list_global_parameters(request: web.Request) -> web.Response:
    await requester(request).require_policymaker()
    return await list_reply(request, broker_of(request).global_parameters.to_json())


@routes.get("/api/global-parameters/{name}")
async def get_global_parameter(request: web.Request) -> web.Response:
    await requester(request).require_policymaker()
    name = request.match_info["name"]
    values = broker_of(request).global_parameters.values
    if name not in values:
        raise ObjectNotFound
    return reply({"name": name, "value": values[name]})


@routes.put("/api/global-parameters/{name}")
async def put_global_parameter(request: web.Request) -> web.Response:
    await requester(request).require_policymaker()
    (value,) = shapes.required(await json_body(request), "value")
    try:
        return done(broker_of(request).global_parameters.set(request.match_info["name"], value))
    except PolicyError as exc:
        raise shapes.BadRequest(escaped(str(exc))) from None


@routes.delete("/api/global-parameters/{name}")
async def delete_global_parameter(request: web.Request) -> web.Response:
    await requester(request).require_policymaker()
    if not broker_of(request).global_parameters.delete(request.match_info["name"]):
        raise ObjectNotFound
    return done()
