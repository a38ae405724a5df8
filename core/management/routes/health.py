"""The health checks and the aliveness test, with RabbitMQ's paths, JSON and status codes:
200 `{"status": "ok"}`, or 503 `{"status": "failed", ...}` with the reason.

- `/api/health/checks/alarms`, `/api/health/checks/local-alarms`,
  `/api/health/checks/virtual-hosts`, `/api/health/checks/port-listener/{port}`: any
  management user (a port that is not a number is a 400);
- `/api/aliveness-test/{vhost}`: a user who may see the vhost (any for a `monitoring` user
  or an administrator, else one it has permissions on); it declares the `aliveness-test`
  queue, publishes a message to it and gets it back.
"""

from __future__ import annotations

import time
from typing import Any, Final

from aiohttp import web
from lavin.api import errors
from lavin.api.message import Message
from lavin.broker.broker import Broker
from lavin.broker.queues.queue import MessageQueue
from lavin.broker.runtime.alarms import DISK, MEMORY
from lavin.management.http.replies import access_of, broker_of, error_response, reply
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
async def aliveness_test(request: web.Request) -> web.Response:
    """Declare the aliveness-test queue, publish a message to it and get it back."""
    vhost = broker_of(request).vhosts[await running_vhost(request)]
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
