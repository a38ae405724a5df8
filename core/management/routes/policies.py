"""The endpoints for policies and operator policies, with RabbitMQ's paths, JSON, status
codes and tag rules:

- `/api/policies`, `/api/policies/{vhost}`, `/api/operator-policies`,
  `/api/operator-policies/{vhost}`: any management user, for the vhosts it may see,
  lowest priority first;
- `/api/policies/{vhost}/{name}` (GET, PUT, DELETE): `policymaker`, on a vhost it may use;
- `/api/operator-policies/{vhost}/{name}` (GET, PUT, DELETE): `administrator`.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from lavin.broker.policy.policy_rules import PolicyError
from lavin.broker.vhost import VHost
from lavin.management.http.listing import list_reply
from lavin.management.http.policy_access import escaped, listed_vhosts, path_vhost, vhost_to_change
from lavin.management.http.replies import ObjectNotFound, done, json_body, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import access as shapes

routes = web.RouteTableDef()


def _by_priority(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RabbitMQ lists policies by priority, lowest first."""
    return sorted(items, key=lambda item: item["priority"])


def _table(vhost: VHost, operator: bool) -> dict[str, Any]:
    policies = vhost.policies
    return dict(policies.operator_policies if operator else policies.policies)


async def _list_policies(request: web.Request, operator: bool) -> web.Response:
    if "vhost" in request.match_info:
        vhost = path_vhost(request)
        await requester(request).require_vhost(vhost.name)
        chosen = [vhost]
    else:
        chosen = await listed_vhosts(request)
    items = [policy.to_json() for vhost in chosen for policy in _table(vhost, operator).values()]
    return await list_reply(request, _by_priority(items))


async def _get_policy(request: web.Request, operator: bool) -> web.Response:
    vhost = path_vhost(request)
    policy = _table(vhost, operator).get(request.match_info["name"])
    if policy is None:
        raise ObjectNotFound
    return reply(policy.to_json())


async def _put_policy(request: web.Request, operator: bool) -> web.Response:
    vhost = vhost_to_change(request)
    body = await json_body(request, json_only=operator)  # RabbitMQ's 415 for operator policies only
    shapes.required(body, "pattern", "definition")
    try:
        created = vhost.policies.set_policy(request.match_info["name"], body, operator=operator)
    except PolicyError as exc:
        # RabbitMQ escapes the reason for policies, not for operator policies.
        raise shapes.BadRequest(str(exc) if operator else escaped(str(exc))) from None
    return done(created)


async def _delete_policy(request: web.Request, operator: bool) -> web.Response:
    if not path_vhost(request).policies.delete_policy(request.match_info["name"], operator=operator):
        raise ObjectNotFound
    return done()


@routes.get("/api/policies")
@routes.get("/api/policies/{vhost}")
async def list_policies(request: web.Request) -> web.Response:
    return await _list_policies(request, operator=False)


@routes.get("/api/policies/{vhost}/{name}")
async def get_policy(request: web.Request) -> web.Response:
    await requester(request).require_policymaker(request.match_info["vhost"])
    return await _get_policy(request, operator=False)


@routes.put("/api/policies/{vhost}/{name}")
async def put_policy(request: web.Request) -> web.Response:
    await requester(request).require_policymaker(request.match_info["vhost"])
    return await _put_policy(request, operator=False)


@routes.delete("/api/policies/{vhost}/{name}")
async def delete_policy(request: web.Request) -> web.Response:
    await requester(request).require_policymaker(request.match_info["vhost"])
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
