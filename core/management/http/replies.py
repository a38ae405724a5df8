"""What every management endpoint shares: RabbitMQ's JSON replies and error bodies, the
request body reader, and the broker the application serves.

Errors are RabbitMQ's: 400 `{"error": "bad_request", "reason": ...}`, 404 `{"error":
"Object Not Found", "reason": "Not Found"}`, 405, 415 for a body that is not JSON where
RabbitMQ takes only JSON, and 201 for a PUT that creates, 204 for one that updates and for
a DELETE. Anything else a handler raises is a fault of the broker: a 500 and one log line.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from lavin.api.json_input import RefusedJSON, parse_json
from lavin.api.printable import printable
from lavin.broker.access.access_control import AccessControl, AccessControlError, NotFoundError
from lavin.broker.broker import Broker
from lavin.management.shapes import access as shapes

log = logging.getLogger(__name__)

BROKER: Final = web.AppKey("broker", Broker)
# RabbitMQ's default max_http_body_size: a definitions document can be large.
MAX_BODY_SIZE: Final = 20 * 1024 * 1024
NOT_FOUND: Final = {"error": "Object Not Found", "reason": "Not Found"}
# A body must arrive within http_idle_timeout plus this many seconds per byte it declares
# (1 MiB/s): aiohttp bounds the headers but not the body, which a client could drip.
SECONDS_PER_BODY_BYTE: Final = 1 / (1024 * 1024)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ObjectNotFound(Exception):
    """The object a path names does not exist: 404, as RabbitMQ answers."""


class NotJSONContent(Exception):
    """A body labelled with another content type than JSON where only JSON is taken: 415."""


class BodyTooSlow(Exception):
    """The request's body did not arrive in time: 408, and the connection is closed."""


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except shapes.BadRequest as exc:
        return error_response(400, "bad_request", str(exc))
    except NotFoundError as exc:
        return error_response(404, "not_found", str(exc))
    except AccessControlError as exc:
        return error_response(400, "bad_request", str(exc))
    except ObjectNotFound:
        return reply(NOT_FOUND, status=404)
    except NotJSONContent as exc:
        return error_response(415, "unsupported_media_type", str(exc))
    except web.HTTPNotFound:  # no such path
        return reply(NOT_FOUND, status=404)
    except web.HTTPMethodNotAllowed as exc:
        return error_response(405, "method_not_allowed", f"{exc.method} is not allowed here")
    except web.HTTPRequestEntityTooLarge:
        return error_response(400, "bad_request", "Exceeded HTTP request body size limit")
    except BodyTooSlow as exc:
        return await _answer_and_close(request, error_response(408, "request_timeout", str(exc)))
    except web.HTTPException:  # a reply aiohttp makes: 401, 403, a redirect
        raise
    except Exception as exc:  # noqa: BLE001 - a broker fault (users.json unwritable, a bug): one line, no traceback
        log.error(
            "%s %s failed: %s: %s", request.method, printable(request.path), type(exc).__name__, printable(str(exc))
        )
        return error_response(500, "internal_server_error", str(exc))


async def _answer_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send `response`, then close the connection without waiting for the rest of the
    body (aiohttp would otherwise read and drop it for up to its lingering time)."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()
    return response


def error_response(status: int, error: str, reason: str) -> web.Response:
    return reply({"error": error, "reason": reason}, status=status)


def _json_default(value: Any) -> Any:
    """AMQP argument values JSON lacks: byte strings, decimals, timestamps."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_dumps = functools.partial(json.dumps, default=_json_default)


def reply(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def done(created: bool = False) -> web.Response:
    return web.Response(status=201 if created else 204)


async def json_body(request: web.Request, *, json_only: bool = False) -> dict[str, Any]:
    """The request's JSON object, read as RabbitMQ reads it (an empty body is `{}`).

    `json_only`: the endpoint is one where RabbitMQ accepts only `application/json` and
    answers 415 to another content type or none (definitions, vhost limits, operator
    policies); the others take the body whatever it is labelled, as RabbitMQ's do."""
    if json_only and request.content_type != "application/json":
        label = request.headers.get("Content-Type") or "a body without a content type"
        raise NotJSONContent(f"the body must be application/json, not {printable(label)}")
    body = (await _body(request)).strip()
    if body in (b"", b"null", b"undefined"):
        return {}
    try:
        decoded = parse_json(body)
    except RefusedJSON as exc:
        raise shapes.BadRequest(str(exc)) from None
    except ValueError:
        raise shapes.BadRequest("not_json") from None
    if isinstance(decoded, str):
        raise shapes.BadRequest(
            "invalid payload: the request body JSON-decoded to a string. Is the input doubly-JSON-encoded?"
        )
    if not isinstance(decoded, dict):
        raise shapes.BadRequest("not_json")
    return decoded


async def _body(request: web.Request) -> bytes:
    """The request's body, within its deadline."""
    seconds = request.app[BROKER].config.http_idle_timeout + (request.content_length or 0) * SECONDS_PER_BODY_BYTE
    try:
        async with asyncio.timeout(seconds):
            return await request.read()
    except TimeoutError:
        raise BodyTooSlow(f"the request body did not arrive within {seconds:.0f} seconds") from None


def broker_of(request: web.Request) -> Broker:
    return request.app[BROKER]


def access_of(request: web.Request) -> AccessControl:
    return request.app[BROKER].access


def known_vhost(access: AccessControl, name: str) -> str:
    if name not in access.vhosts():
        raise ObjectNotFound
    return name
