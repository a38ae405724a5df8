"""Lavin's own endpoints for `lavin ctl environment`, `log_tail` and `stop` (RabbitMQ's CLI
asks its node over Erlang distribution, which has no HTTP paths):

- `/api/environment`: the effective configuration, every setting by its config-file key
  name, secrets (passwords) masked; `administrator`;
- `/api/log-tail?lines=N`: the broker's last N log lines (at most the 1000 it keeps);
  `administrator`;
- `/api/stop` (POST): a graceful shutdown, as SIGTERM; the control socket only, and only
  when the broker runs as `lavin serve` (an embedded broker is stopped by its owner).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from lavin.config.declaration import SETTING
from lavin.management.http.replies import broker_of, done, error_response, reply
from lavin.management.http.requester import NotAuthorised, requester
from lavin.management.recent_log import KEPT_LINES, RECENT_LOG

STOP_BROKER: Final[web.AppKey[Callable[[], None]]] = web.AppKey("stop_broker")
SECRET_WORDS: Final = ("password", "secret")
MASK: Final = "********"
DEFAULT_TAIL_LINES: Final = 50

routes = web.RouteTableDef()


def _plain(value: Any) -> Any:
    """A setting's value as JSON: paths as text, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


@routes.get("/api/environment")
async def environment(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    config = broker_of(request).config
    settings = {
        item.name: MASK if any(word in item.name for word in SECRET_WORDS) else _plain(getattr(config, item.name))
        for item in fields(config)
        if SETTING in item.metadata
    }
    return reply(settings)


@routes.get("/api/log-tail")
async def log_tail(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    text = request.query.get("lines", str(DEFAULT_TAIL_LINES))
    if not text.isdigit():
        return error_response(400, "bad_request", f"lines must be a whole number from 0 to {KEPT_LINES}, not {text}")
    return reply(RECENT_LOG.tail(min(int(text), KEPT_LINES)))


@routes.post("/api/stop")
async def stop(request: web.Request) -> web.Response:
    if requester(request).user is not None:
        raise NotAuthorised("The broker is stopped through its control socket only")
    stop_broker = request.app.get(STOP_BROKER)
    if stop_broker is None:
        return error_response(400, "bad_request", "This broker is embedded: its owner stops it")
    # After this answer is sent: the shutdown closes the socket it goes out on.
    asyncio.get_running_loop().call_soon(stop_broker)
    return done()
