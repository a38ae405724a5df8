"""The `http` and `https` shovel destinations: each message is POSTed to `dest-uri`.

The request carries what LavinMQ's HTTP destination sends: the body as it is, `User-Agent`,
`X-Shovel` (the shovel's name), `Content-Type` and `X-Message-Id` from the message's
properties, and each message header `k` as `X-k`. The path is the URI's, else the message's
`uri_path` header, else `/`. A user and password in the URI are sent as basic auth and never
shown or logged.

A 2xx answer completes the message's future. Anything else, a connection error or a timeout
is retried with exponential back-off while the message stays unsettled at the source; a
message that still fails after `Backoff.give_up_after` seconds fails its future with
EndpointFailure, so the link shows the error and the core starts it again (the message comes
again from the source). At most `src-prefetch-count` POSTs are in flight; `send` waits for a
free slot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
from lavin.api import EndpointFailure, EndpointSettings, InvalidEndpoint, ShovelDestination, ShovelMessage

log = logging.getLogger(__name__)

DEFAULT_PREFETCH_COUNT = 1000  # RabbitMQ's src-prefetch-count default
USER_AGENT = "Lavin"
ANSWER_READ_LIMIT = 64 * 1024  # bytes
# LavinMQ's client: 10 s to connect, 30 s to read; the whole request is bounded too.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60, connect=10, sock_read=30)
# An HTTP header name is a token (RFC 9110); headers whose names are not are left out.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]+")


@dataclass(frozen=True)
class Backoff:
    """How a failed POST is retried: after `first` seconds, doubling up to `cap`; after
    `give_up_after` seconds of failures the message's future fails."""

    first: float = 1.0
    cap: float = 30.0
    give_up_after: float = 60.0

    def delay(self, failures: int) -> float:
        return float(min(self.cap, self.first * 2 ** (failures - 1)))


class HttpDestination(ShovelDestination):
    name: ClassVar[str] = "http"

    def __init__(self, settings: EndpointSettings) -> None:
        super().__init__(settings)
        self.validate(settings.uri, settings.definition)
        parts = urlsplit(settings.uri)
        netloc = parts.hostname or ""
        if ":" in netloc:  # an IPv6 literal
            netloc = f"[{netloc}]"
        if parts.port is not None:
            netloc = f"{netloc}:{parts.port}"
        self._url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        self._has_path = bool(parts.path)
        self._headers = {"User-Agent": USER_AGENT}
        if parts.username is not None:
            credentials = aiohttp.encode_basic_auth(unquote(parts.username), unquote(parts.password or ""))
            self._headers["Authorization"] = credentials
        shown_netloc = netloc if parts.username is None else f"{parts.username}@{netloc}"  # no password
        self._shown_uri = urlunsplit((parts.scheme, shown_netloc, parts.path, parts.query, ""))
        self.backoff = Backoff()
        self._limit = _prefetch_count(settings.definition)
        self._slots = asyncio.Semaphore(self._limit)
        self._session: aiohttp.ClientSession | None = None
        self._posts: dict[asyncio.Task[None], asyncio.Future[None]] = {}
        self._failure: EndpointFailure | None = None

    @classmethod
    def validate(cls, uri: str, definition: Mapping[str, Any]) -> None:
        try:
            parts = urlsplit(uri)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        except ValueError as exc:
            raise InvalidEndpoint(f"{cls.name} destination URI is not valid: {exc}") from None
        if parts.scheme != cls.name:
            raise InvalidEndpoint(
                f"the {cls.name} destination takes {cls.name}:// URIs, not {parts.scheme or 'none'}://"
            )
        if not parts.hostname:
            raise InvalidEndpoint(f"{cls.name} destination URI has no host")
        _prefetch_count(definition)

    async def open(self) -> None:
        self._failure = None
        # A connection for each POST in flight, so none waits for one (and times out) in the pool.
        connector = aiohttp.TCPConnector(limit=self._limit)
        self._session = aiohttp.ClientSession(connector=connector, timeout=REQUEST_TIMEOUT, headers=self._headers)

    async def close(self) -> None:
        posts, self._posts = self._posts, {}
        for task in posts:
            task.cancel()
        await asyncio.gather(*posts, return_exceptions=True)
        for future in posts.values():
            if not future.done():
                future.set_exception(EndpointFailure(f"the destination {self._shown_uri} was closed"))
        if self._session is not None:
            await self._session.close()
            self._session = None

    def details(self) -> Mapping[str, Any]:
        return {"dest_uri": self._shown_uri}

    async def send(self, message: ShovelMessage) -> asyncio.Future[None]:
        await self._slots.acquire()
        if self._failure is not None or self._session is None:
            self._slots.release()
            raise self._failure or EndpointFailure(f"the destination {self._shown_uri} is not open")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._deliver(self._session, message, future))
        self._posts[task] = future
        task.add_done_callback(self._post_done)
        return future

    def _post_done(self, task: asyncio.Task[None]) -> None:
        future = self._posts.pop(task, None)
        self._slots.release()
        fault = None if task.cancelled() else task.exception()
        if fault is not None and future is not None and not future.done():
            # A fault of ours, not of the far side: the message must not wait forever.
            log.error("shovel '%s': POST to %s failed", self.settings.link_name, self._shown_uri, exc_info=fault)
            future.set_exception(EndpointFailure(f"POST to {self._shown_uri} failed: {fault!r}"))

    async def _deliver(
        self, session: aiohttp.ClientSession, message: ShovelMessage, future: asyncio.Future[None]
    ) -> None:
        """POST until a 2xx, waiting longer after each failure; then settle the future."""
        url, headers = self._request(message)
        started, failures = time.monotonic(), 0
        while True:
            problem = await self._post(session, url, headers, message.body)
            if problem is None:
                if not future.done():
                    future.set_result(None)
                return
            failures += 1
            if time.monotonic() - started >= self.backoff.give_up_after:
                self._failure = EndpointFailure(
                    f"POST to {self._shown_uri} failed {failures} times in {self.backoff.give_up_after:g}s: {problem}"
                )
                if not future.done():
                    future.set_exception(self._failure)
                return
            delay = self.backoff.delay(failures)
            log.info(
                "shovel '%s': POST to %s failed (%s); retrying in %gs",
                self.settings.link_name,
                self._shown_uri,
                problem,
                delay,
            )
            await asyncio.sleep(delay)

    @staticmethod
    async def _post(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str], body: bytes) -> str | None:
        """None when the far side took the message, else what went wrong."""
        try:
            async with session.post(url, data=body, headers=headers) as response:
                # The answer's body is not needed: a small one is read so that the connection
                # can be used again, a large or unsized one is dropped with it.
                if response.content_length is not None and response.content_length <= ANSWER_READ_LIMIT:
                    await response.read()
                if 200 <= response.status < 300:
                    return None
                return f"{response.status} {response.reason or ''}".strip()
        except TimeoutError:
            return "timed out"
        except aiohttp.ClientError as exc:
            return str(exc) or type(exc).__name__
        except ValueError as exc:  # a URL yarl cannot make of the uri_path header
            return f"cannot make the request: {exc}"

    def _request(self, message: ShovelMessage) -> tuple[str, dict[str, str]]:
        properties = message.properties
        message_headers: Mapping[str, Any] = properties.get("headers") or {}
        headers = {"X-Shovel": _header_value(self.settings.link_name)}
        if properties.get("content_type"):
            headers["Content-Type"] = _header_value(properties["content_type"])
        if properties.get("message_id"):
            headers["X-Message-Id"] = _header_value(properties["message_id"])
        for key, value in message_headers.items():
            if _TOKEN.fullmatch(f"X-{key}"):
                headers[f"X-{key}"] = _header_value(value)
        url = self._url
        if not self._has_path and message_headers.get("uri_path"):
            path = _header_value(message_headers["uri_path"])
            url = f"{url}{path if path.startswith('/') else '/' + path}"
        return url, headers


class HttpsDestination(HttpDestination):
    name: ClassVar[str] = "https"


def _prefetch_count(definition: Mapping[str, Any]) -> int:
    count = definition.get("src-prefetch-count", DEFAULT_PREFETCH_COUNT)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidEndpoint(f"src-prefetch-count must be a positive integer, not {count!r}")
    return count


def _header_value(value: Any) -> str:
    """A message header's value as header text: strings as they are, other values in a
    readable form; line breaks and other control characters (which aiohttp refuses) become
    spaces, so a value cannot start another header."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = ""
    elif isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", "replace")
    elif isinstance(value, list | dict):
        text = json.dumps(value, default=str, ensure_ascii=False)
    else:
        text = str(value)
    return _CONTROL.sub(" ", text)


__all__ = ["Backoff", "HttpDestination", "HttpsDestination"]
