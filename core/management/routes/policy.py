"""The endpoints for policies, operator policies, runtime parameters, global parameters and
per-vhost definitions, with RabbitMQ's paths, JSON, status codes and tag rules:

- reading the policy and operator-policy lists: any management user, for its vhosts;
- one policy, runtime parameters, global parameters: `policymaker` (on a vhost it may use);
- one operator policy, per-vhost definitions: `administrator`.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from lavin.broker.access.access_control import NotFoundError
from lavin.broker.broker import Broker
from lavin.broker.policy.policy_rules import PolicyError
from lavin.broker.vhost import VHost
from lavin.management.definitions.document import VHOST_LIMITS_COMPONENT
from lavin.management.definitions.exporter import export_vhost_definitions, parameters_json
from lavin.management.definitions.importer import DefinitionsError, import_vhost_definitions
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import BROKER, ObjectNotFound, done, json_body, reply
from lavin.management.http.requester import NotAuthorised, requester
from lavin.management.shapes import access as shapes

routes = web.RouteTableDef()

NOT_AUTHORISED_OBJECT = "User not authorised to access object"


def _broker(request: web.Request) -> Broker:
    return request.app[BROKER]


def _vhost(request: web.Request) -> VHost:
    """The path's vhost; 404 when there is none of that name."""
    vhost = _broker(request).vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise ObjectNotFound
    return vhost


def _vhost_to_change(request: web.Request) -> VHost:
    """The path's vhost for a PUT: RabbitMQ answers 404 `vhost_not_found`."""
    vhost = _broker(request).vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise NotFoundError("vhost_not_found")
    return vhost


async def _require_policymaker(request: web.Request, vhost: str | None = None) -> None:
    """RabbitMQ's rule for policies and parameters: an administrator, or a policymaker with
    access to the vhost."""
    who = requester(request)
    if who.is_administrator:
        return
    if not who.is_policymaker or (vhost is not None and not await who.may_access_vhost(vhost)):
        raise NotAuthorised(NOT_AUTHORISED_OBJECT)


async def _visible(request: web.Request, vhosts: dict[str, VHost]) -> list[VHost]:
    names = await requester(request).visible_vhosts(sorted(vhosts))
    return [vhosts[name] for name in names]


def _escaped(reason: str) -> str:
    """RabbitMQ escapes the angle brackets of a reason it reports for policies and parameters."""
    return reason.replace("<", "&lt;").replace(">", "&gt;")


def _by_priority(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RabbitMQ lists policies by priority, lowest first."""
    return sorted(items, key=lambda item: item["priority"])


def _table(vhost: VHost, operator: bool) -> dict[str, Any]:
    policies = vhost.policies
    return dict(policies.operator_policies if operator else policies.policies)


# ---- policies and operator policies ----------------------------------------------------------


async def _list_policies(request: web.Request, operator: bool) -> web.Response:
    vhosts = _broker(request).vhosts
    if "vhost" in request.match_info:
        vhost = _vhost(request)
        await requester(request).require_vhost(vhost.name)
        chosen = [vhost]
    else:
        chosen = await _visible(request, vhosts)
    items = [policy.to_json() for vhost in chosen for policy in _table(vhost, operator).values()]
    return list_reply(request, _by_priority(items))


async def _get_policy(request: web.Request, operator: bool) -> web.Response:
    vhost = _vhost(request)
    policy = _table(vhost, operator).get(request.match_info["name"])
    if policy is None:
        raise ObjectNotFound
    return reply(policy.to_json())


async def _put_policy(request: web.Request, operator: bool) -> web.Response:
    vhost = _vhost_to_change(request)
    body = await json_body(request)
    shapes.required(body, "pattern", "definition")
    try:
        created = vhost.policies.set_policy(request.match_info["name"], body, operator=operator)
    except PolicyError as exc:
        # RabbitMQ escapes the reason for policies, not for operator policies.
        raise shapes.BadRequest(str(exc) if operator else _escaped(str(exc))) from None
    return done(created)


async def _delete_policy(request: web.Request, operator: bool) -> web.Response:
    if not _vhost(request).policies.delete_policy(request.match_info["name"], operator=operator):
        raise ObjectNotFound
    return done()


@routes.get("/api/policies")
@routes.get("/api/policies/{vhost}")
async def list_policies(request: web.Request) -> web.Response:
    return await _list_policies(request, operator=False)


@routes.get("/api/policies/{vhost}/{name}")
async def get_policy(request: web.Request) -> web.Response:
    await _require_policymaker(request, request.match_info["vhost"])
    return await _get_policy(request, operator=False)


@routes.put("/api/policies/{vhost}/{name}")
async def put_policy(request: web.Request) -> web.Response:
    await _require_policymaker(request, request.match_info["vhost"])
    return await _put_policy(request, operator=False)


@routes.delete("/api/policies/{vhost}/{name}")
async def delete_policy(request: web.Request) -> web.Response:
    await _require_policymaker(request, request.match_info["vhost"])
    return await _delete_policy(request, operator=False)


@routes.get("/api/operator-policies")
@routes.get("/api/operator-policies/{vhost}")
async def list_operator_policies(request: web.Request) -> web.Response:
    return await _list_policies(request, operator=True)


@routes.get("/api/operator-policies/{vhost}/{name}")
async def get_operator_policy(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return await _get_policy(request, operator=True)


@routes.put("/api/operator-policies/{vhost}/{name}")
async def put_operator_policy(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return await _put_policy(request, operator=True)


@routes.delete("/api/operator-policies/{vhost}/{name}")
async def delete_operator_policy(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return await _delete_policy(request, operator=True)


# ---- runtime parameters ----------------------------------------------------------------------


@routes.get("/api/parameters")
@routes.get("/api/parameters/{component}")
async def list_parameters(request: web.Request) -> web.Response:
    await _require_policymaker(request)
    broker = _broker(request)
    component = request.match_info.get("component")
    items = [
        item
        for vhost in await _visible(request, broker.vhosts)
        for item in parameters_json(broker, vhost)
        if component is None or item["component"] == component
    ]
    return list_reply(request, items)


@routes.get("/api/parameters/{component}/{vhost}")
async def list_vhost_parameters(request: web.Request) -> web.Response:
    vhost = _vhost(request)
    await _require_policymaker(request, vhost.name)
    component = request.match_info["component"]
    items = [item for item in parameters_json(_broker(request), vhost) if item["component"] == component]
    return list_reply(request, items)


def _parameter(request: web.Request, vhost: VHost) -> dict[str, Any]:
    component, name = request.match_info["component"], request.match_info["name"]
    for item in parameters_json(_broker(request), vhost):
        if item["component"] == component and item["name"] == name:
            return item
    raise ObjectNotFound


@routes.get("/api/parameters/{component}/{vhost}/{name}")
async def get_parameter(request: web.Request) -> web.Response:
    await _require_policymaker(request, request.match_info["vhost"])
    return reply(_parameter(request, _vhost(request)))


@routes.put("/api/parameters/{component}/{vhost}/{name}")
async def put_parameter(request: web.Request) -> web.Response:
    await _require_policymaker(request, request.match_info["vhost"])
    vhost = _vhost_to_change(request)
    (value,) = shapes.required(await json_body(request), "value")
    component, name = request.match_info["component"], request.match_info["name"]
    if component == VHOST_LIMITS_COMPONENT:
        if not isinstance(value, dict):
            raise shapes.BadRequest("vhost limits must be an object")
        access = _broker(request).access
        created = not access.vhost_limits(vhost.name)
        access.set_vhost_limits(vhost.name, value)
        return done(created)
    try:
        return done(vhost.policies.set_parameter(component, name, value))
    except PolicyError as exc:
        raise shapes.BadRequest(_escaped(str(exc))) from None


@routes.delete("/api/parameters/{component}/{vhost}/{name}")
async def delete_parameter(request: web.Request) -> web.Response:
    await _require_policymaker(request, request.match_info["vhost"])
    vhost = _vhost(request)
    _parameter(request, vhost)  # 404 when missing
    component, name = request.match_info["component"], request.match_info["name"]
    if component == VHOST_LIMITS_COMPONENT:
        _broker(request).access.set_vhost_limits(vhost.name, {})
    else:
        vhost.policies.delete_parameter(component, name)
    return done()


# ---- global parameters -----------------------------------------------------------------------


@routes.get("/api/global-parameters")
async def list_global_parameters(request: web.Request) -> web.Response:
    await _require_policymaker(request)
    return list_reply(request, _broker(request).global_parameters.to_json())


@routes.get("/api/global-parameters/{name}")
async def get_global_parameter(request: web.Request) -> web.Response:
    await _require_policymaker(request)
    name = request.match_info["name"]
    values = _broker(request).global_parameters.values
    if name not in values:
        raise ObjectNotFound
    return reply({"name": name, "value": values[name]})


@routes.put("/api/global-parameters/{name}")
async def put_global_parameter(request: web.Request) -> web.Response:
    await _require_policymaker(request)
    (value,) = shapes.required(await json_body(request), "value")
    return done(_broker(request).global_parameters.set(request.match_info["name"], value))


@routes.delete("/api/global-parameters/{name}")
async def delete_global_parameter(request: web.Request) -> web.Response:
    await _require_policymaker(request)
    if not _broker(request).global_parameters.delete(request.match_info["name"]):
        raise ObjectNotFound
    return done()


# ---- per-vhost definitions -------------------------------------------------------------------


def _definitions_vhost(request: web.Request) -> VHost:
    """RabbitMQ answers 400 `vhost_not_found` for an unknown vhost here."""
    vhost = _broker(request).vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise shapes.BadRequest("vhost_not_found")
    return vhost


@routes.get("/api/definitions/{vhost}")
async def get_vhost_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return reply(export_vhost_definitions(_broker(request), _definitions_vhost(request)))


@routes.post("/api/definitions/{vhost}")
async def post_vhost_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    vhost = _definitions_vhost(request)
    try:
        report = import_vhost_definitions(_broker(request), vhost, await json_body(request))
    except DefinitionsError as exc:
        raise shapes.BadRequest(str(exc)) from None
    if report.failures:
        raise shapes.BadRequest("; ".join(report.failures))
    return done()
