"""The management application: RabbitMQ's HTTP API (and, over TCP, the web UI), built
from the endpoint modules. Over the control socket every request is trusted; over TCP a
user of the broker logs in with HTTP Basic and its tags decide what it may do."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from aiohttp import web
from lavin.broker.broker import Broker
from lavin.management.http.replies import BROKER, MAX_BODY_SIZE, json_errors
from lavin.management.http.requester import authenticate_requests, trust_requests
from lavin.management.prometheus import routes as metrics
from lavin.management.routes import (
    bindings,
    channels,
    connections,
    definitions,
    exchanges,
    health,
    links,
    node_control,
    nodes,
    parameters,
    permissions,
    policies,
    queues,
    ui,
    users,
    vhosts,
)
from lavin.transport.tls import TlsCertificates
from lavin.transport.websocket import add_amqp_websocket_route

AMQP_WEBSOCKET_PATH = "/ws/amqp"
# Added in this order. aiohttp tries the routes under one static prefix in the order they
# were added, so where two modules' paths could match one URL the earlier module's wins.
ROUTE_MODULES: Final = (
    users,
    vhosts,
    permissions,
    definitions,
    nodes,
    node_control,
    connections,
    channels,
    health,
    policies,
    parameters,
    links,
    exchanges,
    queues,
    bindings,
    ui,
    metrics,
)


def build_app(
    broker: Broker,
    *,
    trusted: bool,
    certificates: TlsCertificates | None = None,
    websocket_protocol_factory: Callable[[], asyncio.Protocol] | None = None,
    stop_broker: Callable[[], None] | None = None,
) -> web.Application:
    """`trusted`: every request acts as an administrator (the control socket, which only
    the broker's own user can open); else HTTP Basic with the broker's users.
    `certificates`: what /api/tls/reload reloads.
    `websocket_protocol_factory`: serve AMQP over WebSocket at /ws/amqp, with the connections
    it makes (outside HTTP Basic: AMQP logs in itself).
    `stop_broker`: what /api/stop calls (`lavin ctl stop`), for a broker run as `lavin serve`."""
    identify = trust_requests if trusted else authenticate_requests
    app = web.Application(middlewares=[json_errors, identify], client_max_size=MAX_BODY_SIZE)
    app[BROKER] = broker
    for module in ROUTE_MODULES:
        app.add_routes(module.routes)
    if certificates is not None:
        app[nodes.TLS_CERTIFICATES] = certificates
    if stop_broker is not None:
        app[node_control.STOP_BROKER] = stop_broker
    if websocket_protocol_factory is not None:
        add_amqp_websocket_route(
            app, AMQP_WEBSOCKET_PATH, websocket_protocol_factory, frame_max=broker.config.frame_max
        )
    return app
