"""The health checks and the aliveness test, with RabbitMQ's paths, JSON and status codes:
200 `{"status": "ok"}`, or 503 `{"status": "failed", ...}` with the reason.

- `/api/health/checks/alarms`, `/api/health/checks/local-alarms`,
  `/api/health/checks/virtual-hosts`, `/api/health/checks/port-listener/{port}`: any
  management user (a port that is not a number is a 400);
- `/api/aliveness-test/{vhost}`: a user who may see the vhost (any for a `monitoring` user
  or an administrator, else one it has permissions on). As RabbitMQ, it runs as that user
  with its AMQP permissions: access to the vhost, configure and read on the queue
  `aliveness-test` and write on the default exchange, else 401 `not_authorised`. It declares
  the queue, publishes a message to it and gets it back; unlike RabbitMQ, which takes
  whatever message is at the head, it does so only when the queue holds no ready message
  of anyone else, and otherwise fails (503) without taking any.
"""

from __future__ import annotations

import time
from typing import Any, Final

from aiohttp import web
from lavin.api.message import Message
from lavin.broker.broker import Broker
from lavin.broker.queues.queue import MessageQueue
from lavin.broker.runtime.alarms import DISK, MEMORY
from lavin.management.http.object_access import Permissions, channel_reply
from lavin.management.http.replies import ObjectNotFound, access_of, broker_of, error_response, reply
from lavin.management.http.requester import requester
from lavin.management.http.runtime_access import running_vhost
from lavin.management.shapes import runtime as shapes

ALIVENESS_QUEUE: Final = "aliveness-test"
ALIVENESS_BODY: Final = b"test_message"
NO_PROPERTIES: Final = b"\x00\x00"

routes = web.RouteTableDef()


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
    return _alarms(broker_of(request), "resource alarm(s) in effect in the cluster")


@routes.get("/api/health/checks/local-alarms")
async def local_alarms_check(request: web.Request) -> web.Response:
    return _alarms(broker_of(request), "resource alarm(s) in effect on the node")


@routes.get("/api/health/checks/virtual-hosts")
async def virtual_hosts_check(request: web.Request) -> web.Response:
    down = sorted(set(access_of(request).vhosts()) - set(broker_of(request).vhosts))
    return _health({"reason": "Some virtual hosts are down", "virtual-hosts": down} if down else None)


@routes.get("/api/health/checks/port-listener/{port}")
async def port_listener_check(request: web.Request) -> web.Response:
    text = request.match_info["port"]
    try:
        port = int(text)
    except ValueError:  # a bad request, not a failed check: 400, as RabbitMQ answers
        return error_response(400, "bad_request", f"Invalid port: {text}")
    ports = [listening for _, _, listening in broker_of(request).listeners]
    if port in ports:
        return reply({"status": "ok", "port": port})
    return _health({"reason": "No active listener", "missing": port, "ports": ports})


@routes.get("/api/aliveness-test/{vhost}")
@channel_reply
async def aliveness_test(request: web.Request) -> web.Response:
    """Declare the aliveness-test queue, publish a message to it and get it back."""
    name = await running_vhost(request)
    if not await requester(request).may_access_vhost(name):
        return error_response(401, "not_authorised", "Access refused.")  # RabbitMQ's refused connection
    permissions = Permissions(request, name)
    await permissions.require("queue", ALIVENESS_QUEUE, "configure")
    await permissions.require("exchange", "", "write")
    await permissions.require("queue", ALIVENESS_QUEUE, "read")
    # No await from here on: nothing else runs between the publish and the get.
    vhost = broker_of(request).vhosts.get(name)
    if vhost is None:  # deleted while the permissions were asked
        raise ObjectNotFound
    queue = vhost.declare_queue(
        ALIVENESS_QUEUE, None, passive=False, durable=False, exclusive=False, auto_delete=False, arguments={}
    )
    if not isinstance(queue, MessageQueue):
        return _health({"reason": f"queue '{ALIVENESS_QUEUE}' is a stream"})
    if queue.message_count:  # the head is someone else's message: leave it there
        return _health({"reason": f"{ALIVENESS_QUEUE} queue holds messages that are not the test's"})
    message = Message("", ALIVENESS_QUEUE, NO_PROPERTIES, ALIVENESS_BODY, int(time.time() * 1000))
    vhost.publish("", message, None)
    item = queue.get()
    if item is None:  # a consumer took it, or a length limit refused it
        return _health({"reason": f"{ALIVENESS_QUEUE} queue is empty"})
    queue.ack(item[0])
    return reply({"status": "ok"})
