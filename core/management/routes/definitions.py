"""The definitions endpoints, with RabbitMQ's paths, JSON and status codes; both take an
`administrator`:

- `/api/definitions` (GET, POST): the broker's whole document (`lavin ctl
  export_definitions` and `import_definitions` come here over the control socket);
- `/api/definitions/{vhost}` (GET, POST): one vhost's parameters, policies, queues,
  exchanges and bindings; an unknown vhost is 400 `vhost_not_found`, as RabbitMQ answers.

They only translate HTTP: `lavin.management.definitions` reads and writes the documents. An
import that refuses the document or fails on an object is a 400 that names the reasons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from lavin.broker.vhost import VHost
from lavin.management.definitions.exporter import export_definitions, export_vhost_definitions
from lavin.management.definitions.importer import (
    DefinitionsError,
    ImportReport,
    import_definitions,
    import_vhost_definitions,
)
from lavin.management.http.replies import broker_of, done, json_body, reply
from lavin.management.http.requester import requester
from lavin.management.shapes import access as shapes

routes = web.RouteTableDef()


async def _import(request: web.Request, apply: Callable[[Any], ImportReport]) -> web.Response:
    try:
        report = apply(await json_body(request, json_only=True))
    except DefinitionsError as exc:
        raise shapes.BadRequest(str(exc)) from None
    if report.failures:
        raise shapes.BadRequest("; ".join(report.failures))
    return done()


def _definitions_vhost(request: web.Request) -> VHost:
    """RabbitMQ answers 400 `vhost_not_found` for an unknown vhost here."""
    vhost = broker_of(request).vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise shapes.BadRequest("vhost_not_found")
    return vhost


@routes.get("/api/definitions")
async def get_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return reply(export_definitions(broker_of(request)))


@routes.post("/api/definitions")
async def post_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    broker = broker_of(request)
    return await _import(request, lambda document: import_definitions(broker, document))


@routes.get("/api/definitions/{vhost}")
async def get_vhost_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    return reply(export_vhost_definitions(broker_of(request), _definitions_vhost(request)))


@routes.post("/api/definitions/{vhost}")
async def post_vhost_definitions(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    broker, vhost = broker_of(request), _definitions_vhost(request)
    return await _import(request, lambda document: import_vhost_definitions(broker, vhost, document))
