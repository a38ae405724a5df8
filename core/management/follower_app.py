"""The management API of a follower node, which runs no broker: it reports the cluster
(`/api/nodes`, `/api/nodes/{node}`, `/api/cluster`, a minimal `/api/overview`) and answers
every other path 503 `not_leader`, naming the leader and where its management API is.

Over TCP a user logs in with HTTP Basic against the users file the leader replicates
(read per request: it is small, and the leader may change it at any time); only an
`administrator` or a `monitoring` user may read the cluster. Over the control socket every
request is trusted, as on the leader."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from aiohttp import web
from lavin.api.auth import User
from lavin.broker.access.passwords import verify_password
from lavin.broker.runtime.cluster_status import FOLLOWER, ClusterState, ClusterStatusSource
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import Handler, ObjectNotFound, error_response, json_errors, reply
from lavin.management.http.requester import (
    MANAGEMENT_TAGS,
    PROTECTED_PREFIXES,
    REQUESTER,
    Requester,
    answer_as,
    basic_credentials,
    not_authenticated,
    not_authorised,
    requester,
    trust_requests,
)
from lavin.management.shapes.cluster import cluster_json, member_named, other_node_json
from lavin.storage.metadata.access_files import USERS_FILE, load_users

STATUS: Final[web.AppKey[ClusterStatusSource]] = web.AppKey("cluster_status")
USERS_PATH: Final = web.AppKey("users_path", Path)

routes = web.RouteTableDef()


def build_follower_app(status: ClusterStatusSource, data_dir: Path, *, trusted: bool) -> web.Application:
    """`status`: the node's view of the cluster, asked per request. `data_dir`: where the
    replicated users file is. `trusted`: the control socket (no login)."""
    identify = trust_requests if trusted else _authenticate_requests
    app = web.Application(middlewares=[json_errors, identify])
    app[STATUS] = status
    app[USERS_PATH] = data_dir / USERS_FILE
    app.add_routes(routes)
    app.router.add_route("*", "/{tail:.*}", _not_leader)  # added last: every other path
    return app


def _state(request: web.Request) -> ClusterState:
    requester(request).require_monitor()
    status = request.app[STATUS]
    return status()


@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    state = _state(request)
    return reply(
        {
            "node": state.this_node,
            "cluster_name": state.leader or state.this_node,
            "cluster_role": FOLLOWER,
            "leader": state.leader,
            "product_name": "Lavin",
        }
    )


@routes.get("/api/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    return await list_reply(request, [other_node_json(member) for member in _state(request).members])


@routes.get("/api/nodes/{node}")
async def get_node(request: web.Request) -> web.Response:
    member = member_named(_state(request), request.match_info["node"])
    if member is None:
        raise ObjectNotFound
    return reply(other_node_json(member))


@routes.get("/api/cluster")
async def cluster(request: web.Request) -> web.Response:
    return reply(cluster_json(_state(request), clustering=True))


async def _not_leader(request: web.Request) -> web.Response:
    state = request.app[STATUS]()
    leader = member_named(state, state.leader) if state.leader is not None else None
    if leader is None:
        where = "no leader is elected yet"
    elif leader.http is None:
        where = f"the leader is {leader.name}"
    else:
        where = f"the leader is {leader.name}, its management API is at http://{leader.http}"
    return error_response(503, "not_leader", f"This node ({state.this_node}) is a follower; {where}")


@web.middleware
async def _authenticate_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """HTTP Basic against the replicated users file, with the leader's answers."""
    if not request.path.startswith(PROTECTED_PREFIXES):
        return await handler(request)
    credentials = basic_credentials(request.headers.get("Authorization", ""))
    if credentials is None:
        return not_authenticated("Not_Authorized")
    name, password = credentials
    stored = {user.name: user for user in load_users(request.app[USERS_PATH]) or ()}.get(name)
    if stored is None or not verify_password(stored.password_hash, stored.hashing_algorithm, password):
        return not_authenticated("Not_Authorized")
    tags = frozenset(stored.tags)
    if not tags & MANAGEMENT_TAGS:
        return not_authorised("Not management user")
    request[REQUESTER] = Requester(name, tags, User(name, stored.tags, dict(stored.permissions)))
    return await answer_as(request, handler)
