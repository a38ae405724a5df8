"""RabbitMQ's HTTP auth backend (rabbitmq_auth_backend_http): a web service decides.

Every login and every access is a request to one of four URLs, with the parameters
RabbitMQ sends (a query string for GET, a form body for POST):

- `user_path`: username, password; the answer `allow [tag ...]` logs in with those tags;
- `vhost_path`: username, vhost, ip, tags;
- `resource_path`: username, vhost, resource (queue, exchange), name, permission, tags;
- `topic_path`: username, vhost, resource (topic), name, permission, tags, routing_key,
  variable_map.username, variable_map.vhost.

The body `allow` allows and `deny` (or `deny REASON`) refuses, in any case; any other body,
an HTTP status other than 200/201, a network error or a timeout refuses too, with a
warning in the log. As in RabbitMQ, a refused login is not final: the next backend in
`auth_backends` is asked. Definite answers may be cached for `cache_ttl` seconds, per
request (the core also caches each connection's answers for that connection's life).

aiohttp is imported when the backend is configured, so a broker that does not use this
backend does not pay for the import.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

from lavin.api import Access, AuthBackend, AuthContext, Authorizer, User, printable

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

# RabbitMQ's defaults (the plugin's application environment).
DEFAULT_PATHS = {
    "user_path": "http://localhost:8000/auth/user",
    "vhost_path": "http://localhost:8000/auth/vhost",
    "resource_path": "http://localhost:8000/auth/resource",
    "topic_path": "http://localhost:8000/auth/topic",
}
SETTINGS = (*DEFAULT_PATHS, "http_method", "request_timeout", "cache_ttl")
DEFAULT_REQUEST_TIMEOUT = 15.0
SUCCESS_STATUSES = (200, 201)  # as RabbitMQ
CACHE_LIMIT = 100_000  # entries; past it the oldest go first

Params = tuple[tuple[str, str], ...]


class HttpAuth(AuthBackend):
    name = "http"

    def __init__(self) -> None:
        self.paths = dict(DEFAULT_PATHS)
        self.method = "get"
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        self.cache_ttl = 0.0
        self._session: aiohttp.ClientSession | None = None
        # (url, params) -> (monotonic expiry, body); insertion order is expiry order, as
        # every entry lives cache_ttl seconds and a refreshed one is re-inserted at the end.
        self._cache: dict[tuple[str, Params], tuple[float, str]] = {}

    def configure(self, settings: Mapping[str, str], context: AuthContext) -> None:
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
        for key in DEFAULT_PATHS:
            url = settings.get(key, self.paths[key])
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{key} must be an http:// or https:// URL, not {url!r}")
            self.paths[key] = url
        self.method = settings.get("http_method", self.method).lower()
        if self.method not in ("get", "post"):
            raise ValueError(f"http_method must be get or post, not {settings['http_method']!r}")
        self.request_timeout = _seconds(settings, "request_timeout", self.request_timeout, positive=True)
        self.cache_ttl = _seconds(settings, "cache_ttl", self.cache_ttl, positive=False)
        import aiohttp  # noqa: F401 - a missing install stops start-up here, not at the first login

    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        body = await self.ask("user_path", (("username", username), ("password", password)))
        if body is None:
            return None
        verdict, _, rest = body.partition(" ")
        if verdict.lower() == "allow":
            tags = tuple(rest.lower().split())  # lower-cased, as RabbitMQ does
            return User(username, tags=tags, authorizer=HttpAuthorizer(self, username, tags, peer_host))
        if verdict.lower() == "deny":
            log.info("HTTP auth service denied user '%s'%s", printable(username), _reason(rest))
        else:
            log.warning("HTTP auth service gave user_path an answer that is neither allow nor deny: %r", body[:100])
        return None

    def cached(self, path: str, params: Params) -> str | None:
        """The service's answer to this request if it is in the cache and fresh."""
        entry = self._cache.get((self.paths[path], params))
        if entry is None or entry[0] <= time.monotonic():
            return None
        return entry[1]

    async def ask(self, path: str, params: Params) -> str | None:
        """The service's answer (the body, stripped), from the cache or from a request;
        None after an error, which is logged. Only allow and deny answers are cached."""
        body = self.cached(path, params)
        if body is None:
            body = await self._request(self.paths[path], params)
            if body is not None and self.cache_ttl > 0 and _verdict(body) in ("allow", "deny"):
                self._remember(self.paths[path], params, body)
        return body

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._cache.clear()

    async def _request(self, url: str, params: Params) -> str | None:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.request_timeout))
        # Client strings may hold surrogate escapes (bytes that are not UTF-8): sent as those bytes.
        query = urlencode([(key, value.encode("utf-8", "surrogateescape")) for key, value in params])
        try:
            if self.method == "get":
                separator = "&" if urlsplit(url).query else "?"
                request = self._session.get(f"{url}{separator}{query}")
            else:
                headers = {"Content-Type": "application/x-www-form-urlencoded"}
                request = self._session.post(url, data=query.encode(), headers=headers)
            async with request as response:
                status, content = response.status, await response.read()
        except TimeoutError:
            log.warning("HTTP auth request to %s timed out after %gs", url, self.request_timeout)
            return None
        except aiohttp.ClientError as exc:
            log.warning("HTTP auth request to %s failed: %s", url, str(exc) or type(exc).__name__)
            return None
        body = content.decode("utf-8", "replace").strip()
        if status not in SUCCESS_STATUSES:
            log.warning("HTTP auth request to %s answered %d: %r", url, status, body[:100])
            return None
        return body

    def _remember(self, url: str, params: Params, body: str) -> None:
        now = time.monotonic()
        key = (url, params)
        self._cache.pop(key, None)
        while self._cache:
            oldest = next(iter(self._cache))
            if self._cache[oldest][0] > now and len(self._cache) < CACHE_LIMIT:
                break
            del self._cache[oldest]
        self._cache[key] = (now + self.cache_ttl, body)


class HttpAuthorizer(Authorizer):
    """One user's accesses, each asked of the service (or answered from its cache)."""

    def __init__(self, backend: HttpAuth, username: str, tags: tuple[str, ...], peer_host: str) -> None:
        self.backend = backend
        self.username = username
        self.tags = " ".join(tags)
        self.peer_host = peer_host

    def check(self, access: Access) -> bool | Awaitable[bool]:
        path, params = self.request(access)
        body = self.backend.cached(path, params)
        if body is not None:
            return _allowed(path, body)
        return self._ask(path, params)

    def request(self, access: Access) -> tuple[str, Params]:
        """The URL setting and the parameters RabbitMQ sends for this access."""
        user = ("username", self.username)
        if access.kind == "vhost":
            return "vhost_path", (user, ("vhost", access.vhost), ("ip", self.peer_host), ("tags", self.tags))
        resource = (user, ("vhost", access.vhost), ("resource", access.kind), ("name", access.name))
        params = (*resource, ("permission", access.permission), ("tags", self.tags))
        if access.kind != "topic":
            return "resource_path", params
        variables = (("variable_map.username", self.username), ("variable_map.vhost", access.vhost))
        return "topic_path", (*params, ("routing_key", access.routing_key), *variables)

    async def _ask(self, path: str, params: Params) -> bool:
        body = await self.backend.ask(path, params)
        return body is not None and _allowed(path, body)


def _allowed(path: str, body: str) -> bool:
    verdict, _, rest = body.partition(" ")
    if verdict.lower() == "allow" and not rest:
        return True
    if verdict.lower() == "deny":
        log.info("HTTP auth service denied a request to %s%s", path, _reason(rest))
    else:
        log.warning("HTTP auth service gave %s an answer that is neither allow nor deny: %r", path, body[:100])
    return False


def _verdict(body: str) -> str:
    return body.partition(" ")[0].lower()


def _reason(text: str) -> str:
    return f": {printable(text)}" if text else ""


def _seconds(settings: Mapping[str, str], key: str, default: float, *, positive: bool) -> float:
    text = settings.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{key} must be a number of seconds{' above 0' if positive else ''}, not {text!r}")
    return value
