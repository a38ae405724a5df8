"""The management application: RabbitMQ's HTTP API (and, over TCP, the web UI), built
from the endpoint modules. Over the control socket every request is trusted; over TCP a
user of the broker logs in with HTTP Basic and its tags decide what it may do."""

from __future__ import annotations

from aiohttp import web
from lavin.broker.broker import Broker
from lavin.management import access_routes, metrics_routes, object_routes, policy_routes, runtime_routes, ui_routes
from lavin.management.http import BROKER, MAX_BODY_SIZE, json_errors
from lavin.management.requester import authenticate_requests, trust_requests


def build_app(broker: Broker, *, trusted: bool) -> web.Application:
    """`trusted`: every request acts as an administrator (the control socket, which only
    the broker's own user can open); else HTTP Basic with the broker's users."""
    identify = trust_requests if trusted else authenticate_requests
    app = web.Application(middlewares=[json_errors, identify], client_max_size=MAX_BODY_SIZE)
    app[BROKER] = broker
    app.add_routes(access_routes.routes)
    app.add_routes(runtime_routes.routes)
    app.add_routes(policy_routes.routes)
    app.add_routes(object_routes.routes)
    app.add_routes(ui_routes.routes)
    app.add_routes(metrics_routes.routes)
    return app
