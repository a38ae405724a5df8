"""The endpoints for what runs now, with RabbitMQ's paths, JSON and status codes:
overview, whoami, nodes, cluster name, connections (and closing them), channels,
consumers, health checks and the aliveness test.

A `management` user sees its own connections and channels, a `monitoring` user or an
administrator all of them; closing another user's connection takes an administrator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Final

from aiohttp import web
from lavin.api import errors
from lavin.api.message import Message
from lavin.broker.broker import Broker
from lavin.broker.queues.queue import MessageQueue
from lavin.broker.runtime.alarms import DISK, MEMORY
from lavin.broker.runtime.stats import ChannelSnapshot, ConnectionSnapshot
from lavin.management.http.listing import list_reply
from lavin.management.http.replies import BROKER, ObjectNotFound, access_of, done, error_response, reply
from lavin.management.http.requester import NotAuthorised, Requester, requester
from lavin.management.shapes import runtime as shapes

# RabbitMQ's reply text when the management API closes a connection without an X-Reason.
DEFAULT_CLOSE_REASON: Final = "Closed via management plugin"
CONNECTION_FORCED: Final = 320
ALIVENESS_QUEUE: Final = "aliveness-test"
ALIVENESS_BODY: Final = b"test_message"
NO_PROPERTIES: Final = b"\x00\x00"
NOT_YOURS: Final = "User not authorised to access object"

routes = web.RouteTableDef()


def _broker(request: web.Request) -> Broker:
    return request.app[BROKER]


def _visible(who: Requester, snapshots: list[ConnectionSnapshot]) -> list[ConnectionSnapshot]:
    """The connections the requester may see: all for a monitor, else its own."""
    return [snapshot for snapshot in snapshots if who.owns(snapshot.user or "")]


def _channels(connections: list[ConnectionSnapshot]) -> Iterator[tuple[ConnectionSnapshot, ChannelSnapshot]]:
    for connection in connections:
        for channel in connection.channels:
            yield connection, channel


async def _known_vhost(request: web.Request) -> str:
    """The vhost the path names: 404 when there is none, 401 when the requester may not see it."""
    name = request.match_info["vhost"]
    if name not in _broker(request).vhosts:
        raise ObjectNotFound
    await requester(request).require_vhost(name)
    return name


# ---- overview, whoami, nodes -------------------------------------------------------------


@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    who, broker = requester(request), _broker(request)
    everyone = broker.stats.snapshots()
    vhosts = await who.visible_vhosts(broker.vhosts)
    connections = [c for c in _visible(who, everyone) if c.vhost in vhosts]
    return reply(shapes.overview_json(broker, vhosts, everyone, connections, who.is_monitor))


@routes.get("/api/whoami")
async def whoami(request: web.Request) -> web.Response:
    who = requester(request)
    return reply({"name": who.name, "tags": sorted(who.tags)})


@routes.get("/api/cluster-name")
async def cluster_name(request: web.Request) -> web.Response:
    return reply({"name": shapes.node_name(_broker(request))})


@routes.get("/api/extensions")
async def extensions(request: web.Request) -> web.Response:
    return reply([])


@routes.get("/api/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    requester(request).require_monitor()
    return list_reply(request, [shapes.node_json(_broker(request))])


@routes.get("/api/nodes/{node}")
async def get_node(request: web.Request) -> web.Response:
    requester(request).require_monitor()
    broker = _broker(request)
    if request.match_info["node"] != shapes.node_name(broker):
        raise ObjectNotFound
    return reply(shapes.node_json(broker))


# ---- connections -------------------------------------------------------------------------


@routes.get("/api/connections")
async def list_connections(request: web.Request) -> web.Response:
    broker = _broker(request)
    connections = _visible(requester(request), broker.stats.snapshots())
    return list_reply(request, [shapes.connection_json(broker, c) for c in connections])


@routes.get("/api/vhosts/{vhost}/connections")
async def list_vhost_connections(request: web.Request) -> web.Response:
    vhost, broker = await _known_vhost(request), _broker(request)
    connections = [c for c in _visible(requester(request), broker.stats.snapshots()) if c.vhost == vhost]
    return list_reply(request, [shapes.connection_json(broker, c) for c in connections])


def _connection(request: web.Request) -> ConnectionSnapshot:
    """The connection the path names, if the requester may see it (401 if not, 404 if none);
    closing one takes an administrator or its own user, as in RabbitMQ."""
    name = request.match_info["connection"]
    found = next((c for c in _broker(request).stats.snapshots() if c.name == name), None)
    if found is None:
        raise ObjectNotFound
    _check_owner(request, found.user or "")
    return found


def _check_owner(request: web.Request, user: str) -> None:
    who = requester(request)
    allowed = who.is_administrator if request.method == "DELETE" else who.is_monitor
    if not allowed and who.name != user:
        raise NotAuthorised(NOT_YOURS)


@routes.get("/api/connections/{connection}")
async def get_connection(request: web.Request) -> web.Response:
    return reply(shapes.connection_json(_broker(request), _connection(request)))


@routes.delete("/api/connections/{connection}")
async def close_connection(request: web.Request) -> web.Response:
    _close(request, [_connection(request)])
    return done()


@routes.get("/api/connections/{connection}/channels")
async def list_connection_channels(request: web.Request) -> web.Response:
    connection, broker = _connection(request), _broker(request)
    return list_reply(request, [shapes.channel_json(broker, connection, channel) for channel in connection.channels])


def _connections_of(request: web.Request) -> list[ConnectionSnapshot]:
    user = request.match_info["username"]
    _check_owner(request, user)
    return [c for c in _broker(request).stats.snapshots() if c.user == user]


@routes.get("/api/connections/username/{username}")
async def list_user_connections(request: web.Request) -> web.Response:
    broker = _broker(request)
    return list_reply(request, [shapes.connection_json(broker, c) for c in _connections_of(request)])


@routes.delete("/api/connections/username/{username}")
async def close_user_connections(request: web.Request) -> web.Response:
    _close(request, _connections_of(request))
    return done()


def _close(request: web.Request, snapshots: list[ConnectionSnapshot]) -> None:
    """connection.close 320 with the X-Reason header's text, RabbitMQ's default without one."""
    reason = request.headers.get("X-Reason") or DEFAULT_CLOSE_REASON
    chosen = {id(snapshot.key) for snapshot in snapshots}
    for connection in list(_broker(request).connections):
        if id(connection) in chosen:
            connection.close(CONNECTION_FORCED, f"CONNECTION_FORCED - {reason}")


# ---- channels and consumers --------------------------------------------------------------


@routes.get("/api/channels")
async def list_channels(request: web.Request) -> web.Response:
    broker = _broker(request)
    connections = _visible(requester(request), broker.stats.snapshots())
    return list_reply(request, [shapes.channel_json(broker, c, ch) for c, ch in _channels(connections)])


@routes.get("/api/vhosts/{vhost}/channels")
async def list_vhost_channels(request: web.Request) -> web.Response:
    vhost, broker = await _known_vhost(request), _broker(request)
    connections = [c for c in _visible(requester(request), broker.stats.snapshots()) if c.vhost == vhost]
    return list_reply(request, [shapes.channel_json(broker, c, ch) for c, ch in _channels(connections)])


@routes.get("/api/channels/{channel}")
async def get_channel(request: web.Request) -> web.Response:
    broker, name = _broker(request), request.match_info["channel"]
    for connection, channel in _channels(broker.stats.snapshots()):
        if shapes.channel_name(connection, channel) == name:
            _check_owner(request, connection.user or "")
            return reply(shapes.channel_json(broker, connection, channel))
    raise ObjectNotFound


def _consumers(broker: Broker, vhosts: list[str]) -> list[dict[str, Any]]:
    connections = [c for c in broker.stats.snapshots() if c.vhost in vhosts]
    return [
        shapes.consumer_json(broker, connection, channel, consumer)
        for connection, channel in _channels(connections)
        for consumer in channel.consumers
    ]


@routes.get("/api/consumers")
async def list_consumers(request: web.Request) -> web.Response:
    broker = _broker(request)
    vhosts = await requester(request).visible_vhosts(broker.vhosts)
    return list_reply(request, _consumers(broker, vhosts))


@routes.get("/api/consumers/{vhost}")
async def list_vhost_consumers(request: web.Request) -> web.Response:
    vhost = await _known_vhost(request)
    return list_reply(request, _consumers(_broker(request), [vhost]))


# ---- health checks -----------------------------------------------------------------------


def _health(failure: dict[str, Any] | None) -> web.Response:
    """RabbitMQ's health check answers: 200 `{"status": "ok"}`, or 503 with the reason."""
    if failure is None:
        return reply({"status": "ok"})
    return reply({"status": "failed", **failure}, status=503)


def _alarms(broker: Broker, reason: str) -> web.Response:
    node = shapes.node_name(broker)
    active = [alarm for alarm in (MEMORY, DISK) if alarm in broker.alarms.active]
    if not active:
        return _health(None)
    return _health({"reason": reason, "alarms": [{"node": node, "resource": alarm} for alarm in active]})


@routes.get("/api/health/checks/alarms")
async def alarms_check(request: web.Request) -> web.Response:
    return _alarms(_broker(request), "resource alarm(s) in effect in the cluster")


@routes.get("/api/health/checks/local-alarms")
async def local_alarms_check(request: web.Request) -> web.Response:
    return _alarms(_broker(request), "resource alarm(s) in effect on the node")


@routes.get("/api/health/checks/virtual-hosts")
async def virtual_hosts_check(request: web.Request) -> web.Response:
    down = sorted(set(access_of(request).vhosts()) - set(_broker(request).vhosts))
    return _health({"reason": "Some virtual hosts are down", "virtual-hosts": down} if down else None)


@routes.get("/api/health/checks/port-listener/{port}")
async def port_listener_check(request: web.Request) -> web.Response:
    text = request.match_info["port"]
    try:
        port = int(text)
    except ValueError:  # a bad request, not a failed check: 400, as RabbitMQ answers
        return error_response(400, "bad_request", f"Invalid port: {text}")
    ports = [listening for _, _, listening in _broker(request).listeners]
    if port in ports:
        return reply({"status": "ok", "port": port})
    return _health({"reason": "No active listener", "missing": port, "ports": ports})


@routes.get("/api/aliveness-test/{vhost}")
async def aliveness_test(request: web.Request) -> web.Response:
    """Declare the aliveness-test queue, publish a message to it and get it back."""
    vhost = _broker(request).vhosts[await _known_vhost(request)]
    try:
        queue = vhost.declare_queue(
            ALIVENESS_QUEUE, None, passive=False, durable=False, exclusive=False, auto_delete=False, arguments={}
        )
        if not isinstance(queue, MessageQueue):
            return _health({"reason": f"queue '{ALIVENESS_QUEUE}' is a stream"})
        message = Message("", ALIVENESS_QUEUE, NO_PROPERTIES, ALIVENESS_BODY, int(time.time() * 1000))
        vhost.publish("", message, None)
        item = queue.get()
    except errors.AMQPError as exc:
        return _health({"reason": exc.reply_text})
    if item is None:
        return _health({"reason": "the message published was not there to get"})
    queue.ack(item[0])
    return reply({"status": "ok"})
