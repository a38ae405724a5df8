"""The Prometheus endpoints, as RabbitMQ's prometheus plugin serves them: `/metrics`
(aggregated), `/metrics/per-object`, `/metrics/detailed` and `/metrics/memory-breakdown`.

They are served on their own listener without authentication (`[main] metrics_http_port`,
like RabbitMQ's port 15692) and on the management API's, where only a `monitoring` or
`administrator` user may read them.

Query parameters: `prefix` (`rabbitmq`, the default, or `lavin`); for the detailed view,
`family` (repeated or comma-separated), `vhost` (repeated; unknown vhosts are left out, as
RabbitMQ does) and one `queue` regular expression; the other views report on everything,
as RabbitMQ's. A bad value is a 400 with a plain-text reason.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from lavin.api.patterns import Pattern, PatternError
from lavin.broker.broker import Broker
from lavin.management.http.replies import BROKER
from lavin.management.http.requester import requester, trust_requests
from lavin.management.prometheus.families import (
    AGGREGATED,
    DETAILED,
    KNOWN_FAMILIES,
    MEMORY_BREAKDOWN,
    PER_OBJECT,
    PREFIXES,
    BrokerCollector,
    Scrape,
)
from lavin.management.prometheus.sources import ObjectFilter, Snapshot
from multidict import MultiMapping
from prometheus_client import generate_latest

# The text format generate_latest writes; Prometheus 2 and 3 both read it.
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
MAX_QUEUE_FILTER_LENGTH: Final = 2000  # RabbitMQ's
VIEWS: Final = {"": AGGREGATED, PER_OBJECT: PER_OBJECT, DETAILED: DETAILED, MEMORY_BREAKDOWN: MEMORY_BREAKDOWN}

routes = web.RouteTableDef()


class BadQuery(ValueError):
    """A query parameter RabbitMQ's plugin refuses (or Lavin's `prefix`): 400."""


@routes.get("/metrics")
async def aggregated(request: web.Request) -> web.StreamResponse:
    return await _metrics(request, AGGREGATED)


@routes.get("/metrics/{view}")
async def named_view(request: web.Request) -> web.StreamResponse:
    view = VIEWS.get(request.match_info["view"])
    if view is None:
        return web.Response(status=404, text="Unknown Registry")
    return await _metrics(request, view)


async def _metrics(request: web.Request, view: str) -> web.StreamResponse:
    requester(request).require_monitor()
    broker = request.app[BROKER]
    object_filter = ObjectFilter()
    try:
        scrape = parse_scrape(request.query, view)
        if view == DETAILED:
            object_filter = await _object_filter(broker, request.query)
    except BadQuery as exc:
        return web.Response(status=400, text=str(exc))
    body = generate_latest(BrokerCollector(Snapshot(broker, object_filter), scrape))
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def parse_scrape(query: MultiMapping[str], view: str) -> Scrape:
    prefixes = query.getall("prefix", [PREFIXES[0]])
    if len(prefixes) != 1 or prefixes[0] not in PREFIXES:
        raise BadQuery(f"'prefix' must be one of {', '.join(PREFIXES)}")
    families = frozenset(name for value in query.getall("family", []) for name in value.split(",") if name)
    unknown = sorted(families - KNOWN_FAMILIES)
    if unknown:
        raise BadQuery(f"Unknown metric family: {', '.join(unknown)}")
    return Scrape(view, prefixes[0], families)


async def _object_filter(broker: Broker, query: MultiMapping[str]) -> ObjectFilter:
    """The detailed view's `vhost` and `queue` filters; the queue pattern is matched
    against the names of the chosen vhosts off the event loop."""
    vhosts = query.getall("vhost", [])
    chosen = frozenset(name for name in vhosts if name in broker.vhosts) if vhosts else None
    pattern = _queue_pattern(query.getall("queue", []))
    if pattern is None:
        return ObjectFilter(chosen)
    hosts = [host for vhost, host in broker.vhosts.items() if chosen is None or vhost in chosen]
    names = (name for host in hosts for name in host.queues)
    return ObjectFilter(chosen, frozenset(await pattern.matching(names)))


def _queue_pattern(values: list[str]) -> Pattern | None:
    """The `queue` regular expression, checked as RabbitMQ checks it."""
    if len(values) > 1:
        raise BadQuery("Only one 'queue' query parameter is allowed")
    if not values or not values[0]:
        return None
    if len(values[0]) > MAX_QUEUE_FILTER_LENGTH:
        raise BadQuery("'queue' regex too long")
    try:
        return Pattern(values[0])
    except PatternError as exc:
        raise BadQuery(f"Invalid 'queue' regex: {exc.reason}") from None


def build_metrics_app(broker: Broker) -> web.Application:
    """The metrics listener's application: the endpoints above, without authentication."""
    app = web.Application(middlewares=[trust_requests])
    app[BROKER] = broker
    app.add_routes(routes)
    return app
