"""The http shovel destination against a real aiohttp web server on loopback: the endpoint
kit, the headers LavinMQ sends, basic auth, retries with back-off, the in-flight bound and
validation."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from lavin.api import EndpointFailure, EndpointSettings, InvalidEndpoint, ShovelMessage
from lavin.plugins.federation.http_destination import Backoff, HttpDestination, HttpsDestination
from lavin.testing import ShovelDestinationKit

FAST = Backoff(first=0.05, cap=0.2, give_up_after=1.0)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FarSide:
    """A web server that records every POST it accepts; `statuses` are answered first, in
    order, then 200."""

    statuses: list[int] = field(default_factory=list)
    accepted: list[Request] = field(default_factory=list)
    attempts: int = 0
    hold: asyncio.Event | None = None
    in_flight: int = 0
    most_in_flight: int = 0
    port: int = 0
    runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.attempts += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            body = await request.read()
            if self.hold is not None:
                await self.hold.wait()
            status = self.statuses.pop(0) if self.statuses else 200
            if status == 200:
                self.accepted.append(Request(request.path_qs, dict(request.headers), body))
            return web.Response(status=status)
        finally:
            self.in_flight -= 1

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    def uri(self, path: str = "/in", userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}{path}"


def settings(uri: str, definition: dict[str, Any] | None = None) -> EndpointSettings:
    return ShovelDestinationKit.settings(uri, definition, link_name="orders-to-web")


def run_with_server(check: Callable[[FarSide], Awaitable[None]], server: FarSide | None = None) -> FarSide:
    server = server or FarSide()

    async def framed() -> None:
        await server.start()
        try:
            await check(server)
        finally:
            await server.stop()

    asyncio.run(framed())
    return server


async def open_destination(
    uri: str, definition: dict[str, Any] | None = None, backoff: Backoff = FAST
) -> HttpDestination:
    destination = HttpDestination(settings(uri, definition))
    destination.backoff = backoff
    await destination.open()
    return destination


class TestHttpDestinationKit(ShovelDestinationKit):
    endpoint_class = HttpDestination

    async def start_far_side(self) -> None:
        self.server = FarSide()
        await self.server.start()

    async def stop_far_side(self) -> None:
        await self.server.stop()

    def endpoint_settings(self) -> EndpointSettings:
        # One POST at a time, so that arrival order is send order.
        return self.settings(self.server.uri(), {"src-prefetch-count": 1})

    def new_endpoint(self) -> HttpDestination:
        destination = HttpDestination(self.endpoint_settings())
        destination.backoff = FAST
        return destination

    async def received(self) -> list[bytes]:
        return [request.body for request in self.server.accepted]

    async def break_far_side(self) -> None:
        await self.server.stop()

    async def restore_far_side(self) -> None:
        await self.server.start()


def test_headers_are_those_lavinmq_sends() -> None:
    properties = {
        "content_type": "application/json",
        "message_id": "m-1",
        "headers": {
            "region": "eu",
            "attempt": 2,
            "urgent": True,
            "bad\nname": "x",
            "injected": "a\r\nX-Evil: 1",
            "control": "a\x7fb\x01c",
            "text": "été",
        },
    }

    async def check(server: FarSide) -> None:
        destination = await open_destination(server.uri("/orders?src=lavin"))
        try:
            await (await destination.send(ShovelMessage(b'{"id": 1}', "rk", properties=properties)))
        finally:
            await destination.close()

    (request,) = run_with_server(check).accepted
    assert request.path == "/orders?src=lavin"
    assert request.body == b'{"id": 1}'
    headers = request.headers
    assert headers["User-Agent"] == "Lavin"
    assert headers["X-Shovel"] == "orders-to-web"
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Message-Id"] == "m-1"
    assert (headers["X-region"], headers["X-attempt"], headers["X-urgent"]) == ("eu", "2", "true")
    assert headers["X-injected"] == "a X-Evil: 1" and "X-Evil" not in headers
    assert (headers["X-control"], headers["X-text"]) == ("a b c", "été")
    assert not any(name.startswith("X-bad") for name in headers)


def test_the_uri_path_header_names_the_path_when_the_uri_has_none() -> None:
    async def check(server: FarSide) -> None:
        destination = await open_destination(server.uri(path=""))
        try:
            message = ShovelMessage(b"x", properties={"headers": {"uri_path": "/by-header"}})
            await (await destination.send(message))
            await (await destination.send(ShovelMessage(b"y")))
        finally:
            await destination.close()

    assert [request.path for request in run_with_server(check).accepted] == ["/by-header", "/"]


def test_basic_auth_comes_from_the_userinfo_and_is_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    shown = {}

    async def check(server: FarSide) -> None:
        server.statuses = [503]  # one retry, which is logged
        destination = await open_destination(server.uri(userinfo="shop:p%40ss-w0rd@"))
        try:
            shown.update(destination.details())
            await (await destination.send(ShovelMessage(b"x")))
        finally:
            await destination.close()

    (request,) = run_with_server(check).accepted
    assert request.headers["Authorization"] == "Basic " + base64.b64encode(b"shop:p@ss-w0rd").decode()
    assert shown["dest_uri"].startswith("http://shop@127.0.0.1:") and "w0rd" not in str(shown)
    assert "POST to http://shop@127.0.0.1" in caplog.text
    assert "w0rd" not in caplog.text


def test_a_500_is_retried_and_the_message_arrives_once() -> None:
    async def check(server: FarSide) -> None:
        server.statuses = [500]
        destination = await open_destination(server.uri(), backoff=Backoff())
        try:
            future = await destination.send(ShovelMessage(b"retried"))
            await asyncio.sleep(0.5)
            assert not future.done(), "the future completed before a 2xx"
            async with asyncio.timeout(5):
                await future
        finally:
            await destination.close()

    server = run_with_server(check)
    assert server.attempts == 2
    assert [request.body for request in server.accepted] == [b"retried"]


def test_a_server_that_is_down_is_retried_with_back_off() -> None:
    """The default back-off (1 s, 2 s, ...): over 3 s a handful of attempts, not a hot loop."""
    attempts = 0

    def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        attempts += 1
        writer.close()  # accepted and dropped: the server is "down"

    async def check() -> None:
        dropping = await asyncio.start_server(count, "127.0.0.1", 0)
        port = dropping.sockets[0].getsockname()[1]
        destination = await open_destination(f"http://127.0.0.1:{port}/in", backoff=Backoff())
        try:
            future = await destination.send(ShovelMessage(b"x"))
            await asyncio.sleep(3)
            assert not future.done(), "the message is neither delivered nor given up on yet"
        finally:
            await destination.close()
            dropping.close()

    asyncio.run(check())
    assert 2 <= attempts <= 4, f"{attempts} attempts in 3 s"


def test_posts_in_flight_are_bounded_by_the_prefetch_count() -> None:
    async def check(server: FarSide) -> None:
        server.hold = asyncio.Event()
        destination = await open_destination(server.uri(), {"src-prefetch-count": 3})
        try:
            futures = [await destination.send(ShovelMessage(f"m{index}".encode())) for index in range(3)]
            fourth = asyncio.create_task(destination.send(ShovelMessage(b"m3")))
            await asyncio.sleep(0.3)
            assert not fourth.done(), "send returned with every slot taken"
            assert server.in_flight == 3
            server.hold.set()
            futures.append(await asyncio.wait_for(fourth, 5))
            async with asyncio.timeout(5):
                await asyncio.gather(*futures)
        finally:
            await destination.close()

    server = run_with_server(check)
    assert server.most_in_flight == 3
    assert sorted(request.body for request in server.accepted) == [b"m0", b"m1", b"m2", b"m3"]


def test_validate_refuses_what_cannot_work() -> None:
    HttpDestination.validate("http://user:pw@example.com:8080/path", {"src-prefetch-count": 10})
    HttpsDestination.validate("https://example.com", {})
    refused = [
        (HttpDestination, "http:///no-host", {}, "has no host"),
        (HttpDestination, "http://", {}, "has no host"),
        (HttpDestination, "https://example.com", {}, "takes http:// URIs, not https://"),
        (HttpsDestination, "http://example.com", {}, "takes https:// URIs, not http://"),
        (HttpDestination, "ftp://example.com", {}, "not ftp://"),
        (HttpDestination, "http://example.com:99999/", {}, "not valid"),
        (HttpDestination, "http://example.com", {"src-prefetch-count": 0}, "positive integer"),
        (HttpDestination, "http://example.com", {"src-prefetch-count": "10"}, "positive integer"),
    ]
    for endpoint, uri, definition, reason in refused:
        with pytest.raises(InvalidEndpoint, match=reason):
            endpoint.validate(uri, definition)


def test_a_message_that_keeps_failing_fails_its_future_and_then_send() -> None:
    async def check(server: FarSide) -> None:
        server.statuses = [500] * 100
        destination = await open_destination(server.uri())
        try:
            started = time.monotonic()
            future = await destination.send(ShovelMessage(b"x"))
            with pytest.raises(EndpointFailure, match=r"failed \d+ times in 1s: 500 Internal Server Error"):
                async with asyncio.timeout(5):
                    await future
            assert time.monotonic() - started < 3
            with pytest.raises(EndpointFailure, match="500 Internal Server Error"):
                await destination.send(ShovelMessage(b"y"))
        finally:
            await destination.close()

    assert run_with_server(check).accepted == []
