"""The `oauth2` auth backend: JWTs signed in the test with RSA keys it generates, verified
against a JWKS file (or a JWKS served on loopback), scopes mapped to permissions as
RabbitMQ's OAuth 2 plugin maps them.

The backend is driven in-process first, then through a broker child configured with
`auth_backends = oauth2`, with pika passing the token as the password.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Coroutine, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import jwt
import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess
from cryptography.hazmat.primitives.asymmetric import rsa
from helpers import closes_channel, wait_until
from jwt.algorithms import RSAAlgorithm
from lavin.api import Access, AccessRefused, User
from lavin.plugins.auth.oauth2 import OAuth2Auth, wildcard
from lavin.testing import EmptyAuthContext

Result = TypeVar("Result")
KEY_ID = "key-1"
AUDIENCE = "rabbitmq"
ALICE_SCOPES = " ".join(
    [
        "rabbitmq.read:%2F/alice.*",
        "rabbitmq.write:%2F/alice.*",
        "rabbitmq.write:%2F/amq.default",  # publishing to "" writes to amq.default, as in RabbitMQ
        "rabbitmq.configure:%2F/alice.*",
        "rabbitmq.configure:staging/*",
        "rabbitmq.write:%2F/amq.topic/alice.*",
        "rabbitmq.tag:administrator",
        "other.configure:*/*",  # another resource server's
        "rabbitmq.delete:*/*",  # no such permission
        "openid",
    ]
)


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks(*keys: tuple[str, rsa.RSAPrivateKey]) -> dict[str, Any]:
    entries = []
    for key_id, key in keys:
        entry = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        entries.append({**entry, "kid": key_id, "use": "sig", "alg": "RS256"})
    return {"keys": entries}


@pytest.fixture
def jwks_file(tmp_path: Path, signing_key: rsa.RSAPrivateKey) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks((KEY_ID, signing_key))))
    return path


def token(key: rsa.RSAPrivateKey, *, kid: str | None = KEY_ID, algorithm: str = "RS256", **claims: Any) -> str:
    """A token for alice, valid for five minutes; a claim given as None is left out."""
    payload = {"sub": "alice", "aud": [AUDIENCE, "account"], "exp": int(time.time()) + 300, "scope": ALICE_SCOPES}
    payload.update(claims)
    headers = {"kid": kid} if kid is not None else {}
    signing = key if algorithm.startswith("RS") else "a-shared-secret-of-at-least-32-bytes"
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, signing, algorithm, headers)


def configured(settings: Mapping[str, str]) -> OAuth2Auth:
    backend = OAuth2Auth()
    backend.configure(settings, EmptyAuthContext())
    return backend


def file_backend(jwks_file: Path, **settings: str) -> OAuth2Auth:
    return configured({"resource_server_id": AUDIENCE, "jwks_file": str(jwks_file), **settings})


def run(scenario: Coroutine[Any, Any, Result]) -> Result:
    return asyncio.run(asyncio.wait_for(scenario, 10))


def login(backend: OAuth2Auth, password: str, username: str = "") -> User | None:
    return run(backend.authenticate(username, password, "127.0.0.1"))


def allowed(user: User, access: Access) -> bool:
    assert user.authorizer is not None
    answer = user.authorizer.check(access)
    assert isinstance(answer, bool)  # scopes are answered at once
    return answer


def test_entry_point_loads_the_backend() -> None:
    (entry,) = [e for e in entry_points(group="lavin.auth") if e.name == "oauth2"]
    assert entry.load() is OAuth2Auth
    assert OAuth2Auth.name == "oauth2"


# --- in-process -----------------------------------------------------------------------------


def test_a_valid_token_logs_in_with_its_scopes(jwks_file: Path, signing_key: rsa.RSAPrivateKey) -> None:
    exp = int(time.time()) + 300
    user = login(file_backend(jwks_file), token(signing_key, exp=exp), username="ignored")
    assert user is not None
    assert user.name == "alice"
    assert user.tags == ("administrator",)
    assert user.expires_at is not None and abs(user.expires_at - (time.monotonic() + exp - time.time())) < 2
    expected = {
        Access("/", "vhost"): True,
        Access("staging", "vhost"): True,
        Access("prod", "vhost"): False,
        Access("/", "queue", "alice.jobs", "read"): True,
        Access("/", "queue", "alice.jobs", "configure"): True,
        Access("/", "queue", "bob.jobs", "read"): False,
        Access("/", "queue", "alice", "read"): False,  # the pattern matches the whole name
        Access("staging", "queue", "anything", "configure"): True,
        Access("staging", "queue", "anything", "read"): False,
        Access("prod", "queue", "alice.jobs", "read"): False,
        Access("/", "exchange", "amq.topic", "write"): True,  # a three-part scope names the exchange too
        Access("/", "exchange", "amq.topic", "read"): False,
        Access("/", "topic", "amq.topic", "write", "alice.news"): True,
        Access("/", "topic", "amq.topic", "write", "bob.news"): False,
        Access("/", "topic", "amq.topic", "read", "alice.news"): False,
        # Only three-part scopes grant routing keys, as in RabbitMQ.
        Access("/", "topic", "alice.events", "write", "x"): False,
    }
    assert {access: allowed(user, access) for access in expected} == expected


def test_scope_may_be_a_list_and_the_prefix_configured(jwks_file: Path, signing_key: rsa.RSAPrivateKey) -> None:
    scopes = ["mq:read:*/*", "mq:tag:monitoring", "rabbitmq.configure:*/*"]
    user = login(file_backend(jwks_file, scope_prefix="mq:"), token(signing_key, scope=scopes))
    assert user is not None and user.tags == ("monitoring",)
    assert allowed(user, Access("any", "queue", "q", "read"))
    assert not allowed(user, Access("any", "queue", "q", "configure"))


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("*", "", True),
        ("*", "any/thing", True),
        ("%2F", "/", True),
        ("%2F", "%2F", False),
        ("a*b", "a-long-b", True),
        ("a*b", "a-long-bc", False),
        ("a.b", "axb", False),  # no regular expressions
        ("a.b", "a.b", True),
        ("*.log", "app.log", True),
        ("x+y", "x y", True),  # URL-decoded: + is a space
        ("x%2", "x%2", False),  # a bad escape matches nothing
        ("é*", "été", True),
        ("a(b)[c]{d}|e\\f$", "a(b)[c]{d}|e\\f$", True),  # every character is taken as itself
        ("*", "line\nbreak", True),
        ("%F0%9F%90%87*", "\U0001f407s", True),
    ],
)
def test_wildcard_patterns_match_as_rabbitmq(pattern: str, name: str, matches: bool) -> None:
    compiled = wildcard(pattern)
    assert (compiled is not None and compiled.search(name)) is matches


def test_a_scope_of_many_stars_matches_a_long_name_at_once() -> None:
    """Under a backtracking matcher this takes over a minute."""
    compiled = wildcard("*a" * 12 + "*b")
    assert compiled is not None
    started = time.monotonic()
    assert not compiled.search("a" * 500)
    assert compiled.search("a" * 500 + "b")
    assert time.monotonic() - started < 0.1


@pytest.mark.parametrize(
    ("claims", "settings", "reason"),
    [
        ({"aud": "someone-else"}, {}, "Audience doesn't match"),
        ({"aud": None}, {}, 'Token is missing the "aud" claim'),
        ({"exp": int(time.time()) - 10}, {}, "Signature has expired"),
        ({"exp": None}, {}, 'Token is missing the "exp" claim'),
        ({"kid": "key-9"}, {}, "no signing key 'key-9'"),
        ({"iss": "https://other.example"}, {"issuer": "https://idp.example"}, "Invalid issuer"),
        ({"algorithm": "HS256"}, {}, "The specified alg value is not allowed"),
        ({"scope": 7}, {}, "the scope claim is neither a string nor a list of strings"),
    ],
)
def test_a_bad_token_is_refused_with_the_reason_logged(
    jwks_file: Path,
    signing_key: rsa.RSAPrivateKey,
    claims: dict[str, Any],
    settings: dict[str, str],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="lavin.plugins.auth.oauth2"):
        assert login(file_backend(jwks_file, **settings), token(signing_key, **claims), username="bob") is None
    assert "OAuth 2 login (user name 'bob') from 127.0.0.1 refused: Authentication using an OAuth 2" in caplog.text
    assert reason in caplog.text


def test_a_token_signed_by_another_key_is_refused(
    jwks_file: Path, other_key: rsa.RSAPrivateKey, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="lavin.plugins.auth.oauth2"):
        assert login(file_backend(jwks_file), token(other_key)) is None
    assert "Signature verification failed" in caplog.text


def test_a_password_that_is_no_token_is_left_to_other_backends(
    jwks_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="lavin.plugins.auth.oauth2"):
        assert login(file_backend(jwks_file), "guest", username="guest") is None
    assert caplog.text == ""


def test_verify_aud_false_accepts_any_audience(jwks_file: Path, signing_key: rsa.RSAPrivateKey) -> None:
    assert login(file_backend(jwks_file, verify_aud="false"), token(signing_key, aud="someone-else")) is not None


def test_a_token_without_kid_uses_default_key_or_the_only_key(jwks_file: Path, signing_key: rsa.RSAPrivateKey) -> None:
    assert login(file_backend(jwks_file), token(signing_key, kid=None)) is not None
    assert login(file_backend(jwks_file, default_key=KEY_ID), token(signing_key, kid=None)) is not None
    assert login(file_backend(jwks_file, default_key="key-2"), token(signing_key, kid=None)) is None


@pytest.mark.parametrize(
    ("claims", "settings", "name"),
    [
        ({}, {}, "alice"),
        ({"sub": None, "client_id": "billing-app"}, {}, "billing-app"),
        ({"sub": None}, {}, "unknown"),
        (
            {"user_name": 42, "client_id": "billing-app"},
            {"preferred_username_claims": "user_name, client_id"},
            "billing-app",
        ),
        ({"user_name": "Alice A."}, {"preferred_username_claims": "user_name, sub"}, "Alice A."),
    ],
)
def test_the_user_name_is_the_first_preferred_claim(
    jwks_file: Path, signing_key: rsa.RSAPrivateKey, claims: dict[str, Any], settings: dict[str, str], name: str
) -> None:
    user = login(file_backend(jwks_file, **settings), token(signing_key, **claims))
    assert user is not None and user.name == name


def test_update_secret_takes_the_new_token_of_the_same_user(
    jwks_file: Path, signing_key: rsa.RSAPrivateKey, other_key: rsa.RSAPrivateKey
) -> None:
    backend = file_backend(jwks_file)
    user = login(backend, token(signing_key, exp=int(time.time()) + 60))
    assert user is not None and user.expires_at is not None
    renewed = run(
        backend.update_secret(user, token(signing_key, exp=int(time.time()) + 600, scope="rabbitmq.read:*/*"))
    )
    assert renewed.name == "alice" and renewed.tags == ()
    assert renewed.expires_at is not None and renewed.expires_at > user.expires_at + 500
    assert allowed(renewed, Access("prod", "queue", "bob.jobs", "read"))
    assert not allowed(renewed, Access("/", "queue", "alice.jobs", "write"))
    with pytest.raises(AccessRefused, match="Not allowed to change username on refreshed token"):
        run(backend.update_secret(user, token(signing_key, sub="mallory")))
    with pytest.raises(AccessRefused, match="Authentication using an OAuth 2/JWT token failed: Signature verification"):
        run(backend.update_secret(user, token(other_key)))
    with pytest.raises(AccessRefused, match="Signature has expired"):
        run(backend.update_secret(user, token(signing_key, exp=int(time.time()) - 1)))


class JwksHandler(BaseHTTPRequestHandler):
    document: dict[str, Any]
    served: list[str]

    def do_GET(self) -> None:
        self.served.append(self.path)
        data = json.dumps(self.document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return


@pytest.fixture
def jwks_server(signing_key: rsa.RSAPrivateKey) -> Iterator[tuple[str, list[str]]]:
    served: list[str] = []
    handler = type("BoundHandler", (JwksHandler,), {"document": jwks((KEY_ID, signing_key)), "served": served})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/jwks", served
    server.shutdown()
    server.server_close()


def test_keys_from_jwks_url_are_fetched_once_and_cached(
    jwks_server: tuple[str, list[str]], signing_key: rsa.RSAPrivateKey
) -> None:
    url, served = jwks_server
    backend = configured({"resource_server_id": AUDIENCE, "jwks_url": url})
    assert served == []  # nothing fetched before the first login

    async def scenario() -> list[User | None]:
        logins = [backend.authenticate("", token(signing_key), "127.0.0.1") for _ in range(3)]
        users = list(await asyncio.gather(*logins))
        # An unknown key id soon after a fetch is refused without fetching again.
        users.append(await backend.authenticate("", token(signing_key, kid="key-9"), "127.0.0.1"))
        users.append(await backend.authenticate("", token(signing_key), "127.0.0.1"))
        return users

    users = run(scenario())
    assert [user is not None for user in users] == [True, True, True, False, True]
    assert served == ["/jwks"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"jwks_file": "JWKS"}, "resource_server_id must be set"),
        ({"resource_server_id": AUDIENCE}, "exactly one of jwks_file and jwks_url must be set"),
        ({"resource_server_id": AUDIENCE, "jwks_file": "JWKS", "jwks_url": "http://x/"}, "exactly one of"),
        ({"resource_server_id": AUDIENCE, "jwks_url": "file:///etc/keys"}, "jwks_url must be an http"),
        ({"resource_server_id": AUDIENCE, "jwks_file": "JWKS", "algorithms": "RS256, XS1"}, "algorithm 'XS1'"),
        ({"resource_server_id": AUDIENCE, "jwks_file": "JWKS", "algorithms": "none"}, "algorithm 'none'"),
        ({"resource_server_id": AUDIENCE, "jwks_file": "JWKS", "verify_aud": "maybe"}, "verify_aud must be true or"),
        ({"resource_server_id": AUDIENCE, "jwks_file": "JWKS", "issuer_url": "x"}, "unknown setting"),
        ({"resource_server_id": AUDIENCE, "jwks_file": "/nonexistent/jwks.json"}, "cannot read the keys in jwks_file"),
    ],
)
def test_bad_settings_are_refused(jwks_file: Path, settings: dict[str, str], message: str) -> None:
    resolved = {key: str(jwks_file) if value == "JWKS" else value for key, value in settings.items()}
    with pytest.raises(ValueError, match=message):
        configured(resolved)


def test_a_jwks_file_without_keys_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text('{"keys": []}')
    with pytest.raises(ValueError, match="cannot read the keys in jwks_file"):
        configured({"resource_server_id": AUDIENCE, "jwks_file": str(path)})


# --- through a broker: auth_backends = oauth2 -----------------------------------------------


@pytest.fixture
def oauth2_broker(broker_factory: BrokerFactory, tmp_path: Path, jwks_file: Path) -> BrokerProcess:
    ini = tmp_path / "lavin.ini"
    ini.write_text(
        f"[main]\nauth_backends = oauth2\n[plugin.oauth2]\nresource_server_id = {AUDIENCE}\njwks_file = {jwks_file}\n"
    )
    return broker_factory(extra_args=["--config", str(ini)])


def token_url(broker: BrokerProcess, secret: str) -> str:
    return f"amqp://anyone:{secret}@{broker.host}:{broker.port}/%2F"


def test_broker_takes_a_token_and_enforces_its_scopes(
    oauth2_broker: BrokerProcess, signing_key: rsa.RSAPrivateKey, other_key: rsa.RSAPrivateKey
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(token_url(oauth2_broker, token(signing_key))))
    try:
        channel = connection.channel()
        channel.queue_declare("alice.jobs")
        channel.basic_publish("", "alice.jobs", b"hello")
        with closes_channel(403, "ACCESS_REFUSED - access to queue 'bob.jobs' in vhost '/' refused for user 'alice'"):
            channel.queue_declare("bob.jobs")
    finally:
        connection.close()
    for refused in [token(other_key), token(signing_key, aud="someone-else"), "not-a-token"]:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.URLParameters(token_url(oauth2_broker, refused)))


def test_broker_update_secret_replaces_the_token(oauth2_broker: BrokerProcess, signing_key: rsa.RSAPrivateKey) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(token_url(oauth2_broker, token(signing_key))))
    try:
        channel = connection.channel()
        with closes_channel(403, "ACCESS_REFUSED - access to queue 'bob.jobs' in vhost '/' refused for user 'alice'"):
            channel.queue_declare("bob.jobs")
        connection.update_secret(token(signing_key, scope="rabbitmq.configure:*/* rabbitmq.read:*/*"), "renewed")
        connection.channel().queue_declare("bob.jobs")
    finally:
        connection.close()


def test_broker_closes_a_connection_when_its_token_expires(
    oauth2_broker: BrokerProcess, signing_key: rsa.RSAPrivateKey
) -> None:
    short_lived = token(signing_key, exp=int(time.time()) + 2)
    connection = pika.BlockingConnection(pika.URLParameters(token_url(oauth2_broker, short_lived)))
    closed: list[BaseException] = []

    def closed_by_broker() -> bool:
        try:
            connection.process_data_events(time_limit=0.1)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            closed.append(exc)
        return bool(closed)

    wait_until(closed_by_broker, "the connection closed at the token's expiry", timeout=6)
    assert closed[0].reply_code == 403, closed
