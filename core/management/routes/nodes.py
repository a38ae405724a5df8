"""The endpoints for the node and the broker as a whole, with RabbitMQ's paths, JSON and
status codes:

- `/api/overview`: any management user; the totals count what it may see (every vhost and
  connection for a `monitoring` user or an administrator);
- `/api/cluster-name`, `/api/extensions`: any management user;
- `/api/nodes`, `/api/nodes/{node}`, `/api/nodes/{node}/memory`: `monitoring` (or
  `administrator`); in a cluster `/api/nodes` lists every member (this node in full, the
  others with what is known of them), each with Lavin's `cluster_role`, `in_sync` and
  replication lag;
- `/api/cluster` (Lavin's own): `monitoring`; the cluster's members, leader, in-sync
  replicas and etcd endpoints (a single node is a cluster of one, `"clustering": false`);
- `/api/tls/reload` (POST, Lavin's own; `lavin ctl reload_tls`, as SIGHUP does):
  `administrator`. New TLS connections get the files as they are now, open ones keep theirs.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from lavin.broker.broker import Broker
from lavin.broker.runtime.cluster_status import ClusterMember, ClusterState
from lavin.broker.runtime.memory import memory_breakdown
from lavin.broker.runtime.stats import OVERALL, QUEUE_TOTALS
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import ObjectNotFound, broker_of, done, error_response, reply
from lavin.management.http.requester import requester
from lavin.management.http.runtime_access import visible_connections
from lavin.management.shapes import runtime as shapes
from lavin.management.shapes.cluster import (
    cluster_json,
    cluster_state_of,
    member_named,
    other_node_json,
    role_fields,
)
from lavin.management.shapes.history import Histories
from lavin.transport.tls import TlsCertificates, TlsSetupError

TLS_CERTIFICATES: Final = web.AppKey("tls_certificates", TlsCertificates)

routes = web.RouteTableDef()


@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    who, broker = requester(request), broker_of(request)
    histories = Histories.asked(request.query, broker.stats)
    everyone = broker.stats.snapshots()
    vhosts = await who.visible_vhosts(broker.vhosts)
    connections = [c for c in visible_connections(who, everyone) if c.vhost in vhosts]
    data = shapes.overview_json(broker, vhosts, everyone, connections, who.is_monitor)
    if who.is_monitor:  # the broker's own totals; another user's are sums of what it sees
        histories.add_msg_rates(data["message_stats"], OVERALL)
        histories.add_lengths(data["queue_totals"], QUEUE_TOTALS)
    return reply(data)


@routes.get("/api/cluster-name")
async def cluster_name(request: web.Request) -> web.Response:
    return reply({"name": shapes.node_name(broker_of(request))})


@routes.get("/api/extensions")
async def extensions(request: web.Request) -> web.Response:
    return reply([])


@routes.get("/api/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    requester(request).require_monitor()
    broker = broker_of(request)
    state = cluster_state_of(broker, shapes.node_name(broker))
    return await list_reply(request, [_node_json(broker, state, member) for member in state.members])


@routes.get("/api/nodes/{node}")
async def get_node(request: web.Request) -> web.Response:
    requester(request).require_monitor()
    broker = broker_of(request)
    state = cluster_state_of(broker, shapes.node_name(broker))
    member = member_named(state, request.match_info["node"])
    if member is None:
        raise ObjectNotFound
    return reply(_node_json(broker, state, member))


@routes.get("/api/cluster")
async def cluster(request: web.Request) -> web.Response:
    requester(request).require_monitor()
    broker = broker_of(request)
    state = cluster_state_of(broker, shapes.node_name(broker))
    return reply(cluster_json(state, clustering=broker.cluster is not None))


@routes.get("/api/nodes/{node}/memory")
async def node_memory(request: web.Request) -> web.Response:
    broker = _named_node(request)
    breakdown = memory_breakdown(broker.alarms, broker.stats.snapshots())
    return reply({"memory": shapes.memory_json(breakdown)})


@routes.post("/api/tls/reload")
async def reload_certificates(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    certificates = request.app.get(TLS_CERTIFICATES)
    if certificates is None:
        return error_response(400, "bad_request", "TLS is not configured: no tls_cert")
    try:
        certificates.reload()
    except TlsSetupError as exc:
        return error_response(400, "bad_request", f"TLS certificates not reloaded, keeping the current ones: {exc}")
    return done()


def _node_json(broker: Broker, state: ClusterState, member: ClusterMember) -> dict[str, Any]:
    """This node in full, another member with what the cluster knows of it."""
    if member.name != state.this_node:
        return other_node_json(member)
    return shapes.node_json(broker) | role_fields(member)


def _named_node(request: web.Request) -> Broker:
    """The broker, when the path names its node and the requester may see nodes."""
    requester(request).require_monitor()
    broker = broker_of(request)
    if request.match_info["node"] != shapes.node_name(broker):
        raise ObjectNotFound
    return broker
