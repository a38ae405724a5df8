"""The `http` auth backend against a real HTTP service on loopback.

The service (stdlib `http.server` in a thread) answers RabbitMQ's four requests with a
small policy and records every request it gets: user alice (password alice-pw) logs in
with two tags, bob (bob-pw) with none; alice may enter vhost "/", bob may not; resources
whose name starts with `<user>.` or `amq.` are allowed; topic routing keys that start with
`<user>.` are allowed. Paths under /slow answer after SLOW_ANSWER seconds, /broken with
a 500, /garbage with a body that is neither allow nor deny.

The backend is driven in-process first (authenticate, then the authorizer's checks), then
through a broker child configured with `auth_backends = http`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess
from helpers import closes_channel
from lavin.api import Access, User
from lavin.client.wire import PROTOCOL_HEADER, Connection
from lavin.plugins.auth.http import HttpAuth, HttpAuthorizer
from lavin.testing import EmptyAuthContext

SLOW_ANSWER = 3.0
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
TAGS = {"alice": "Management policymaker", "bob": ""}
Result = TypeVar("Result")


@dataclass
class Recorded:
    method: str
    path: str
    params: dict[str, str]


@dataclass
class AuthService:
    """RabbitMQ's HTTP auth protocol, served on a loopback port its server binds (0 until then)."""

    port: int = 0
    requests: list[Recorded] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def settings(self, prefix: str = "/auth", **extra: str) -> dict[str, str]:
        paths = {f"{name}_path": self.url(f"{prefix}/{name}") for name in ("user", "vhost", "resource", "topic")}
        return {**paths, **extra}

    def requests_to(self, name: str) -> list[Recorded]:
        return [request for request in self.requests if request.path.endswith(f"/{name}")]

    def answer(self, path: str, params: Mapping[str, str]) -> tuple[int, str]:
        if path.startswith("/broken"):
            return 500, "internal error"
        if path.startswith("/garbage"):
            return 200, "maybe"
        if path.startswith("/slow"):
            time.sleep(SLOW_ANSWER)
        user = params.get("username", "")
        kind = path.rsplit("/", 1)[-1]
        if kind == "user":
            if PASSWORDS.get(user) != params.get("password"):
                return 200, "deny wrong password"
            return 200, f"allow {TAGS[user]}".strip()
        if kind == "vhost":
            allowed = user == "alice" and params["vhost"] == "/"
        elif kind == "resource":
            allowed = params["name"].startswith((f"{user}.", "amq."))
        else:
            allowed = params["routing_key"].startswith(f"{user}.")
        return 200, "ALLOW" if allowed else "deny"


class Handler(BaseHTTPRequestHandler):
    service: AuthService

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        self._answer("GET", parts.path, parts.query)

    def do_POST(self) -> None:
        assert self.headers["Content-Type"] == "application/x-www-form-urlencoded"
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._answer("POST", self.path, body.decode())

    def _answer(self, method: str, path: str, query: str) -> None:
        params = dict(parse_qsl(query, keep_blank_values=True, errors="surrogateescape"))
        self.service.requests.append(Recorded(method, path, params))
        status, body = self.service.answer(path, params)
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return


@pytest.fixture
def service() -> Iterator[AuthService]:
    service = AuthService()
    handler = type("BoundHandler", (Handler,), {"service": service})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    service.port = server.server_port
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield service
    server.shutdown()
    server.server_close()


def configured(settings: Mapping[str, str]) -> HttpAuth:
    backend = HttpAuth()
    backend.configure(settings, EmptyAuthContext())
    return backend


def run(scenario: Coroutine[Any, Any, Result]) -> Result:
    return asyncio.run(asyncio.wait_for(scenario, 10))


async def login(backend: HttpAuth, username: str, password: str, peer_host: str = "127.0.0.1") -> User | None:
    return await backend.authenticate(username, password, peer_host)


async def decide(user: User, access: Access) -> bool:
    assert user.authorizer is not None
    answer = user.authorizer.check(access)
    return answer if isinstance(answer, bool) else await answer


def test_entry_point_loads_the_backend() -> None:
    (entry,) = [e for e in entry_points(group="lavin.auth") if e.name == "http"]
    assert entry.load() is HttpAuth
    assert HttpAuth.name == "http"


# --- in-process: the backend and its authorizer against the real service ------------------


@pytest.mark.parametrize("method", ["get", "post"])
def test_login_sends_credentials_and_takes_tags(service: AuthService, method: str) -> None:
    async def scenario() -> None:
        backend = configured(service.settings(http_method=method))
        try:
            alice = await login(backend, "alice", "alice-pw")
            bob = await login(backend, "bob", "bob-pw")
            assert await login(backend, "alice", "bob-pw") is None  # deny: the next backend is asked
            assert await login(backend, "carol", "") is None
        finally:
            await backend.close()
        assert alice is not None and alice.name == "alice"
        assert alice.tags == ("management", "policymaker")  # lower-cased, as RabbitMQ does
        assert bob is not None and bob.tags == ()

    run(scenario())
    assert [(r.method, r.params) for r in service.requests_to("user")] == [
        (method.upper(), {"username": "alice", "password": "alice-pw"}),
        (method.upper(), {"username": "bob", "password": "bob-pw"}),
        (method.upper(), {"username": "alice", "password": "bob-pw"}),
        (method.upper(), {"username": "carol", "password": ""}),
    ]


@pytest.mark.parametrize("method", ["get", "post"])
def test_checks_send_rabbitmq_parameters_and_follow_the_answers(service: AuthService, method: str) -> None:
    async def scenario() -> list[bool]:
        backend = configured(service.settings(http_method=method))
        try:
            alice = await login(backend, "alice", "alice-pw", peer_host="127.0.0.5")
            assert alice is not None
            return [
                await decide(alice, access)
                for access in [
                    Access("/", "vhost"),
                    Access("other", "vhost"),
                    Access("/", "queue", "alice.jobs", "configure"),
                    Access("/", "queue", "bob.jobs", "read"),
                    Access("/", "exchange", "amq.topic", "write"),
                    Access("/", "topic", "amq.topic", "write", "alice.news"),
                    Access("/", "topic", "amq.topic", "read", "bob.news"),
                ]
            ]
        finally:
            await backend.close()

    assert run(scenario()) == [True, False, True, False, True, True, False]
    tags = "management policymaker"
    assert [r.params for r in service.requests_to("vhost")] == [
        {"username": "alice", "vhost": "/", "ip": "127.0.0.5", "tags": tags},
        {"username": "alice", "vhost": "other", "ip": "127.0.0.5", "tags": tags},
    ]
    resource = {"username": "alice", "vhost": "/", "tags": tags}
    assert [r.params for r in service.requests_to("resource")] == [
        {**resource, "resource": "queue", "name": "alice.jobs", "permission": "configure"},
        {**resource, "resource": "queue", "name": "bob.jobs", "permission": "read"},
        {**resource, "resource": "exchange", "name": "amq.topic", "permission": "write"},
    ]
    topic = {**resource, "resource": "topic", "name": "amq.topic", "variable_map.username": "alice"}
    assert [r.params for r in service.requests_to("topic")] == [
        {**topic, "permission": "write", "routing_key": "alice.news", "variable_map.vhost": "/"},
        {**topic, "permission": "read", "routing_key": "bob.news", "variable_map.vhost": "/"},
    ]
    assert {r.method for r in service.requests} == {method.upper()}


def test_bytes_that_are_not_utf8_reach_the_service_as_sent(service: AuthService) -> None:
    async def scenario() -> None:
        backend = configured(service.settings())
        try:
            assert await login(backend, "alice", "alice-\udcff") is None
        finally:
            await backend.close()

    run(scenario())
    assert service.requests_to("user")[0].params["password"] == "alice-\udcff"


def test_answers_are_cached_for_cache_ttl(service: AuthService) -> None:
    async def scenario() -> None:
        backend = configured(service.settings(cache_ttl="0.5"))
        try:
            alice = await login(backend, "alice", "alice-pw")
            assert alice is not None and alice.authorizer is not None
            access = Access("/", "queue", "alice.jobs", "read")
            first = alice.authorizer.check(access)
            assert not isinstance(first, bool) and await first is True
            assert alice.authorizer.check(access) is True  # at once, from the cache
            assert await login(backend, "alice", "alice-pw") is not None  # the login answer too
            assert len(service.requests) == 2
            other = alice.authorizer.check(Access("/", "queue", "alice.other", "read"))
            assert not isinstance(other, bool) and await other is True
            assert len(service.requests) == 3
            await asyncio.sleep(0.6)
            stale = alice.authorizer.check(access)
            assert not isinstance(stale, bool) and await stale is True
            assert len(service.requests) == 4
        finally:
            await backend.close()

    run(scenario())


def test_without_cache_ttl_every_check_asks(service: AuthService) -> None:
    async def scenario() -> None:
        backend = configured(service.settings())
        try:
            alice = await login(backend, "alice", "alice-pw")
            assert alice is not None
            for _ in range(3):
                assert await decide(alice, Access("/", "vhost")) is True
        finally:
            await backend.close()

    run(scenario())
    assert len(service.requests_to("vhost")) == 3


@pytest.mark.parametrize(
    ("prefix", "logged"),
    [
        ("/broken", "answered 500: 'internal error'"),
        ("/garbage", "an answer that is neither allow nor deny: 'maybe'"),
        ("/slow", "timed out after 0.5s"),
    ],
)
def test_a_failing_service_denies_with_a_warning(
    service: AuthService, prefix: str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[User | None, bool, bool]:
        backend = configured(service.settings(prefix, request_timeout="0.5", cache_ttl="60"))
        try:
            # The user the service would have let in, had it answered.
            alice = User("alice", authorizer=HttpAuthorizer(backend, "alice", (), "127.0.0.1"))
            first = await decide(alice, Access("/", "vhost"))
            second = await decide(alice, Access("/", "vhost"))
            return await login(backend, "alice", "alice-pw"), first, second
        finally:
            await backend.close()

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="lavin.plugins.auth.http"):
        user, first, second = run(scenario())
    assert (user, first, second) == (None, False, False)
    assert time.monotonic() - started < SLOW_ANSWER * 2  # 3 timeouts of 0.5 s, not 3 slow answers
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 3 and all(logged in message for message in warnings), warnings
    assert len(service.requests_to("vhost")) == 2  # not an answer: not cached, asked again


def test_an_unreachable_service_denies(caplog: pytest.LogCaptureFixture) -> None:
    # A port bound but not listening refuses connections for as long as it is held.
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{held.getsockname()[1]}/auth"
    settings = {f"{name}_path": f"{closed}/{name}" for name in ("user", "vhost", "resource", "topic")}

    async def scenario() -> User | None:
        backend = configured(settings)
        try:
            return await login(backend, "alice", "alice-pw")
        finally:
            await backend.close()

    with held, caplog.at_level(logging.WARNING, logger="lavin.plugins.auth.http"):
        assert run(scenario()) is None
    assert f"HTTP auth request to {closed}/user failed" in caplog.text


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"user_pth": "http://127.0.0.1/u"}, "unknown setting(s) user_pth"),
        ({"user_path": "ftp://127.0.0.1/u"}, "user_path must be an http:// or https:// URL"),
        ({"vhost_path": "/auth/vhost"}, "vhost_path must be an http:// or https:// URL"),
        ({"http_method": "put"}, "http_method must be get or post"),
        ({"request_timeout": "0"}, "request_timeout must be a number of seconds above 0"),
        ({"request_timeout": "soon"}, "request_timeout must be a number of seconds above 0"),
        ({"cache_ttl": "-1"}, "cache_ttl must be a number of seconds"),
        ({"cache_ttl": "nan"}, "cache_ttl must be a number of seconds"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        configured(settings)


# --- through a broker: auth_backends = http -----------------------------------------------


def http_broker(broker_factory: BrokerFactory, tmp_path: Path, settings: Mapping[str, str]) -> BrokerProcess:
    ini = tmp_path / "lavin.ini"
    lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
    ini.write_text(f"[main]\nauth_backends = http\n[plugin.http]\n{lines}")
    return broker_factory(extra_args=["--config", str(ini)])


def url(broker: BrokerProcess, user: str, password: str, vhost: str = "%2F") -> str:
    return f"amqp://{user}:{password}@{broker.host}:{broker.port}/{vhost}"


def test_broker_logs_in_and_enforces_the_service_answers(
    service: AuthService, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = http_broker(broker_factory, tmp_path, service.settings(http_method="post"))
    connection = pika.BlockingConnection(pika.URLParameters(url(broker, "alice", "alice-pw")))
    try:
        channel = connection.channel()
        channel.queue_declare("alice.jobs")
        channel.basic_publish("", "alice.jobs", b"hello")
        with closes_channel(403, "ACCESS_REFUSED - access to queue 'bob.jobs' in vhost '/' refused for user 'alice'"):
            channel.queue_declare("bob.jobs")
    finally:
        connection.close()
    assert {"username": "alice", "vhost": "/", "ip": "127.0.0.1", "tags": "management policymaker"} in [
        r.params for r in service.requests_to("vhost")
    ]
    with Connection(url(broker, "bob", "bob-pw")) as bob:  # the service denies bob the vhost
        bob.send_raw(PROTOCOL_HEADER)
        bob.start_ok()
        bob.tune_ok(vhost="/")
        close = bob.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (530, "NOT_ALLOWED - access to vhost '/' refused for user 'bob'")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.URLParameters(url(broker, "alice", "wrong")))


def test_broker_refuses_a_login_the_service_does_not_answer_in_time(
    service: AuthService, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = http_broker(broker_factory, tmp_path, service.settings("/slow", request_timeout="0.5"))
    started = time.monotonic()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.URLParameters(url(broker, "alice", "alice-pw")))
    assert time.monotonic() - started < SLOW_ANSWER
    assert "timed out after 0.5s" in broker.output
