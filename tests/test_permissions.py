"""Permissions are enforced as RabbitMQ enforces them: which permission each method needs,
on which resource, in which order, and the texts of the refusals.

The broker child runs a test-only auth backend, `permtest`, installed on its PYTHONPATH
only: a password that is JSON describes the user (permissions, topic permissions, tags, a
delay for a late-answering authorizer, an expiry), so that each test logs in with exactly
the rights it needs. Its authorizer logs every question, which the caching tests count.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pytest
from access_helpers import in_process_broker, open_refusal
from broker_process import BrokerProcess, hermetic_env
from helpers import closes_channel, closes_connection, round_trip, unique_name
from lavin.api import Access, PatternAuthorizer, VHostPermissions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

BACKEND_MODULE = '''
import asyncio
import json
import logging
import time

from lavin.api import AccessRefused, AuthBackend, Authorizer, PatternAuthorizer, TopicPermissions, User
from lavin.api import Access, PatternAuthorizer, VHostPermissions

log = logging.getLogger("lavin_test_permissions")


class LoggingAuthorizer(Authorizer):
    """Patterns, a line in the log per question, and the answer `delay` seconds late if set;
    with `by_patterns`, the vhost patterns are handed to the core, which matches names itself."""

    def __init__(self, name, patterns, delay, by_patterns):
        self.name = name
        self.patterns = patterns
        self.delay = delay
        self.by_patterns = by_patterns

    def vhost_permissions(self, vhost):
        return self.patterns.vhost_permissions(vhost) if self.by_patterns else None

    def check(self, access):
        log.info("%s asked: %s %s %s %s", self.name, access.kind, access.name, access.permission, access.routing_key)
        answer = self.patterns.check(access)
        return self.later(answer) if self.delay else answer

    async def later(self, answer):
        await asyncio.sleep(self.delay)
        return answer


def user_from(name, spec):
    spec = json.loads(spec)
    permissions = {vhost: VHostPermissions(*patterns) for vhost, patterns in spec["permissions"].items()}
    topics = {(vhost, exchange): TopicPermissions(*patterns) for vhost, exchange, *patterns in spec["topic"]}
    authorizer = LoggingAuthorizer(name, PatternAuthorizer(permissions, topics), spec["delay"], spec["by_patterns"])
    expires_in = spec["expires_in"]
    expires_at = None if expires_in is None else time.monotonic() + expires_in
    return User(name, tuple(spec["tags"]), permissions, authorizer, expires_at)


class PermTest(AuthBackend):
    name = "permtest"

    async def authenticate(self, username, password, peer_host):
        return user_from(username, password) if password.startswith("{") else None

    async def update_secret(self, user, secret):
        if secret == "refuse":
            raise AccessRefused("not this secret")
        return user_from(user.name, secret)
'''


def install_backend(directory: Path) -> dict[str, str]:
    directory.mkdir()
    (directory / "lavin_test_permissions.py").write_text(BACKEND_MODULE)
    dist_info = directory / "lavin_test_permissions-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: lavin-test-permissions\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[lavin.auth]\npermtest = lavin_test_permissions:PermTest\n")
    return {**hermetic_env(), "PYTHONPATH": str(directory)}


def unstarted_permtest_broker(directory: Path) -> BrokerProcess:
    """A broker (not started) asking permtest first; guest, an administrator of the
    internal backend, sets up resources."""
    ini = directory / "lavin.ini"
    ini.write_text("[main]\nplugins = permtest\nauth_backends = permtest, internal\n")
    return BrokerProcess(
        directory / "data", extra_args=["--config", str(ini)], env=install_backend(directory / "plugin-path")
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = unstarted_permtest_broker(tmp_path_factory.mktemp("permissions"))
    process.start()
    yield process
    process.stop()


ALL = ".*"
NOTHING = ""


def login(
    broker: BrokerProcess,
    user: str,
    configure: str = ALL,
    write: str = ALL,
    read: str = ALL,
    *,
    vhost: str = "/",
    **options: Any,
) -> BlockingConnection:
    """A connection of a permtest user with these patterns on "/"; `options` as `secret`'s."""
    credentials = pika.PlainCredentials(user, secret(configure, write, read, **options))
    return pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port, vhost, credentials))


def secret(
    configure: str = ALL,
    write: str = ALL,
    read: str = ALL,
    *,
    permissions: dict[str, list[str]] | None = None,
    topic: list[list[str]] | None = None,
    tags: tuple[str, ...] = (),
    delay: float = 0.0,
    expires_in: float | None = None,
    by_patterns: bool = False,
) -> str:
    """The permtest password (or new secret) of a user: patterns on "/" unless `permissions`
    (vhost -> [configure, write, read]), topic permissions as [vhost, exchange, write, read]."""
    return json.dumps(
        {
            "permissions": permissions if permissions is not None else {"/": [configure, write, read]},
            "topic": topic or [],
            "tags": list(tags),
            "delay": delay,
            "expires_in": expires_in,
            "by_patterns": by_patterns,
        }
    )


def url(broker: BrokerProcess, user: str, vhost: str = "/", **options: Any) -> str:
    password = quote(secret(**options), safe="")
    return f"amqp://{user}:{password}@{broker.host}:{broker.port}/{quote(vhost, safe='')}"


def admin(broker: BrokerProcess) -> BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def refused(kind: str, name: str, user: str) -> str:
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user '{user}'"


def topic_refused(routing_key: str, exchange: str, user: str) -> str:
    return (
        f"ACCESS_REFUSED - access to topic '{routing_key}' in exchange '{exchange}' in vhost '/' "
        f"refused for user '{user}'"
    )


def asked(broker: BrokerProcess, user: str, question: str) -> int:
    """How often the user's authorizer was asked `question` ("kind name permission rk")."""
    return broker.output.count(f"{user} asked: {question}\n")


# ---- the matrix: each method x each permission it needs --------------------------------


@dataclass(frozen=True)
class Cell:
    """One method needing one permission on one resource. Names are built on a prefix P
    unique to the test: the user's three patterns allow P* (and amq.default); the refused
    case empties the pattern of `permission`."""

    permission: str  # configure, write or read
    kind: str  # of the refused resource
    name: str  # of the refused resource, "{p}" standing for P
    act: Callable[[BlockingChannel, str], Any]
    prepare: Callable[[BlockingChannel, str], Any] = lambda channel, p: None


def _exchanges(*names: str, kind: str = "direct") -> Callable[[BlockingChannel, str], None]:
    def prepare(channel: BlockingChannel, p: str) -> None:
        for name in names:
            channel.exchange_declare(p + name, kind)

    return prepare


def _queue_and_exchange(bound: bool = False) -> Callable[[BlockingChannel, str], None]:
    def prepare(channel: BlockingChannel, p: str) -> None:
        channel.queue_declare(p + "q")
        channel.exchange_declare(p + "x", "direct")
        if bound:
            channel.queue_bind(p + "q", p + "x", "rk")

    return prepare


def _bound_exchanges(channel: BlockingChannel, p: str) -> None:
    _exchanges("dst", "src")(channel, p)
    channel.exchange_bind(p + "dst", p + "src", "rk")


def _queue(channel: BlockingChannel, p: str) -> None:
    channel.queue_declare(p + "q")


def _publish(exchange: str, routing_key: str) -> Callable[[BlockingChannel, str], None]:
    def act(channel: BlockingChannel, p: str) -> None:
        channel.basic_publish(exchange.format(p=p), routing_key.format(p=p), b"m")
        round_trip(channel)  # a passive declare, which needs no permission

    return act


MATRIX = {
    "exchange.declare-configure": Cell("configure", "exchange", "{p}x", lambda c, p: c.exchange_declare(p + "x")),
    "exchange.declare.alternate-read": Cell(
        "read",
        "exchange",
        "{p}x",
        lambda c, p: c.exchange_declare(p + "x", arguments={"alternate-exchange": p + "ae"}),
    ),
    "exchange.declare.alternate-write": Cell(
        "write",
        "exchange",
        "{p}ae",
        lambda c, p: c.exchange_declare(p + "x", arguments={"alternate-exchange": p + "ae"}),
    ),
    "exchange.delete-configure": Cell(
        "configure", "exchange", "{p}x", lambda c, p: c.exchange_delete(p + "x"), _exchanges("x")
    ),
    "queue.declare-configure": Cell("configure", "queue", "{p}q", lambda c, p: c.queue_declare(p + "q")),
    "queue.declare.dead-letter-read": Cell(
        "read",
        "queue",
        "{p}q",
        lambda c, p: c.queue_declare(p + "q", arguments={"x-dead-letter-exchange": p + "dlx"}),
    ),
    "queue.declare.dead-letter-write": Cell(
        "write",
        "exchange",
        "{p}dlx",
        lambda c, p: c.queue_declare(p + "q", arguments={"x-dead-letter-exchange": p + "dlx"}),
    ),
    "queue.delete-configure": Cell("configure", "queue", "{p}q", lambda c, p: c.queue_delete(p + "q"), _queue),
    "queue.bind-write": Cell(
        "write", "queue", "{p}q", lambda c, p: c.queue_bind(p + "q", p + "x", "rk"), _queue_and_exchange()
    ),
    "queue.bind-read": Cell(
        "read", "exchange", "{p}x", lambda c, p: c.queue_bind(p + "q", p + "x", "rk"), _queue_and_exchange()
    ),
    "queue.unbind-write": Cell(
        "write", "queue", "{p}q", lambda c, p: c.queue_unbind(p + "q", p + "x", "rk"), _queue_and_exchange(True)
    ),
    "queue.unbind-read": Cell(
        "read", "exchange", "{p}x", lambda c, p: c.queue_unbind(p + "q", p + "x", "rk"), _queue_and_exchange(True)
    ),
    "exchange.bind-write": Cell(
        "write",
        "exchange",
        "{p}dst",
        lambda c, p: c.exchange_bind(p + "dst", p + "src", "rk"),
        _exchanges("dst", "src"),
    ),
    "exchange.bind-read": Cell(
        "read",
        "exchange",
        "{p}src",
        lambda c, p: c.exchange_bind(p + "dst", p + "src", "rk"),
        _exchanges("dst", "src"),
    ),
    "exchange.unbind-write": Cell(
        "write", "exchange", "{p}dst", lambda c, p: c.exchange_unbind(p + "dst", p + "src", "rk"), _bound_exchanges
    ),
    "exchange.unbind-read": Cell(
        "read", "exchange", "{p}src", lambda c, p: c.exchange_unbind(p + "dst", p + "src", "rk"), _bound_exchanges
    ),
    "basic.publish-write": Cell("write", "exchange", "{p}x", _publish("{p}x", "rk"), _exchanges("x")),
    "basic.publish.default-exchange-write": Cell("write", "exchange", "amq.default", _publish("", "{p}q"), _queue),
    "basic.get-read": Cell("read", "queue", "{p}q", lambda c, p: c.basic_get(p + "q"), _queue),
    "basic.consume-read": Cell("read", "queue", "{p}q", lambda c, p: c.basic_consume(p + "q", lambda *_: None), _queue),
    "queue.purge-read": Cell("read", "queue", "{p}q", lambda c, p: c.queue_purge(p + "q"), _queue),
}


def _patterns(p: str, permission: str, refuse: bool) -> dict[str, str]:
    allowed = f"^({re.escape(p)}|amq\\.default$)"
    patterns = {"configure": allowed, "write": allowed, "read": allowed}
    if refuse:
        patterns[permission] = NOTHING
    return patterns


# Each cell runs twice: the authorizer asked for every name, and its patterns matched by the core.
BY_PATTERNS = pytest.mark.parametrize("by_patterns", [False, True], ids=["asked", "by-patterns"])


@BY_PATTERNS
@pytest.mark.parametrize("cell", MATRIX.values(), ids=MATRIX.keys())
def test_method_is_allowed_with_its_permission(broker: BrokerProcess, cell: Cell, by_patterns: bool) -> None:
    p = unique_name("perm") + "."
    with admin(broker) as connection:
        cell.prepare(connection.channel(), p)
    patterns = _patterns(p, cell.permission, refuse=False)
    with login(broker, "alice", **patterns, by_patterns=by_patterns) as connection:
        channel = connection.channel()
        cell.act(channel, p)
        round_trip(channel)


@BY_PATTERNS
@pytest.mark.parametrize("cell", MATRIX.values(), ids=MATRIX.keys())
def test_method_is_refused_without_its_permission(broker: BrokerProcess, cell: Cell, by_patterns: bool) -> None:
    p = unique_name("perm") + "."
    with admin(broker) as connection:
        cell.prepare(connection.channel(), p)
    with (
        login(broker, "bob", **_patterns(p, cell.permission, refuse=True), by_patterns=by_patterns) as connection,
        closes_channel(403, refused(cell.kind, cell.name.format(p=p), "bob")),
    ):
        cell.act(connection.channel(), p)


# ---- server-named queues, passive declares, order of checks ------------------------------


def test_a_server_named_queue_needs_configure_on_the_name_it_gets(broker: BrokerProcess) -> None:
    with login(broker, "carol", configure="^amq\\.gen-") as connection:
        assert connection.channel().queue_declare("").method.queue.startswith("amq.gen-")
    with login(broker, "carol", configure="^carol\\.") as connection, pytest.raises(ChannelClosedByBroker) as info:
        connection.channel().queue_declare("")
    assert info.value.reply_code == 403
    assert re.fullmatch(refused("queue", "amq\\.gen-[A-Za-z0-9_-]{22}", "carol"), info.value.reply_text)


def test_a_passive_declare_needs_no_permission(broker: BrokerProcess) -> None:
    p = unique_name("perm") + "."
    with admin(broker) as connection:
        _queue_and_exchange()(connection.channel(), p)
    with login(broker, "dave", NOTHING, NOTHING, NOTHING) as connection:
        channel = connection.channel()
        channel.queue_declare(p + "q", passive=True)
        channel.exchange_declare(p + "x", passive=True)


def test_queue_delete_checks_configure_before_looking_for_the_queue(broker: BrokerProcess) -> None:
    with (
        login(broker, "erin", configure=NOTHING) as connection,
        closes_channel(403, refused("queue", "perm-missing", "erin")),
    ):
        connection.channel().queue_delete("perm-missing")


def test_publish_checks_write_before_looking_for_the_exchange(broker: BrokerProcess) -> None:
    with (
        login(broker, "erin", write=NOTHING) as connection,
        closes_channel(403, refused("exchange", "perm-missing", "erin")),
    ):
        _publish("perm-missing", "rk")(connection.channel(), "")


def test_deleting_an_amq_exchange_is_refused_before_configure_is_checked(broker: BrokerProcess) -> None:
    text = "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed"
    with login(broker, "erin", configure=NOTHING) as connection, closes_channel(403, text):
        connection.channel().exchange_delete("amq.direct")


def test_the_amq_prefix_is_refused_before_configure_is_checked(broker: BrokerProcess) -> None:
    with (
        login(broker, "erin", configure=NOTHING) as connection,
        closes_channel(403, "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'"),
    ):
        connection.channel().queue_declare("amq.q")


# ---- topic permissions -----------------------------------------------------------------


def test_publishing_to_a_topic_exchange_needs_topic_write_on_the_routing_key(broker: BrokerProcess) -> None:
    exchange = unique_name("perm-topic")
    with admin(broker) as connection:
        connection.channel().exchange_declare(exchange, "topic")
    topic = [["/", exchange, "^allowed\\.", ".*"]]
    with login(broker, "frank", topic=topic) as connection:
        channel = connection.channel()
        _publish(exchange, "allowed.one")(channel, "")
        with closes_channel(403, topic_refused("denied.one", exchange, "frank")):
            _publish(exchange, "denied.one")(channel, "")


def test_binding_to_a_topic_exchange_needs_topic_read_on_the_binding_key(broker: BrokerProcess) -> None:
    exchange, queue = unique_name("perm-topic"), unique_name("perm-q")
    with admin(broker) as connection:
        connection.channel().exchange_declare(exchange, "topic")
        connection.channel().queue_declare(queue)
    topic = [["/", exchange, ".*", "^allowed\\."]]
    with login(broker, "frank", topic=topic) as connection:
        channel = connection.channel()
        channel.queue_bind(queue, exchange, "allowed.#")
        channel.queue_unbind(queue, exchange, "allowed.#")
        with closes_channel(403, topic_refused("denied.#", exchange, "frank")):
            channel.queue_bind(queue, exchange, "denied.#")


def test_an_exchange_declared_again_as_topic_has_its_routing_keys_checked(broker: BrokerProcess) -> None:
    exchange = unique_name("perm-x")
    with admin(broker) as setup, login(broker, "frank", topic=[["/", exchange, "^allowed\\.", ".*"]]) as connection:
        setup.channel().exchange_declare(exchange, "direct")
        channel = connection.channel()
        _publish(exchange, "denied.one")(channel, "")  # a direct exchange: no topic permissions
        setup.channel().exchange_delete(exchange)
        setup.channel().exchange_declare(exchange, "topic")
        with closes_channel(403, topic_refused("denied.one", exchange, "frank")):
            _publish(exchange, "denied.one")(channel, "")


def test_a_topic_exchange_without_topic_permissions_takes_every_routing_key(broker: BrokerProcess) -> None:
    with login(broker, "frank", topic=[["/", "other", "", ""]]) as connection:
        _publish("amq.topic", "any.key")(connection.channel(), "")


# ---- vhost access ----------------------------------------------------------------------


def test_a_user_without_permissions_on_the_vhost_cannot_open_it(broker: BrokerProcess) -> None:
    assert open_refusal(url(broker, "gina", permissions={"elsewhere": [ALL, ALL, ALL]})) == (
        530,
        "NOT_ALLOWED - access to vhost '/' refused for user 'gina'",
    )


def test_a_vhost_that_does_not_exist_is_not_found(broker: BrokerProcess) -> None:
    assert open_refusal(url(broker, "gina", vhost="nowhere")) == (530, "NOT_ALLOWED - vhost nowhere not found")


# ---- impersonation ---------------------------------------------------------------------


def test_user_id_must_be_the_user_unless_the_user_is_an_impersonator(broker: BrokerProcess) -> None:
    queue = unique_name("perm-q")
    with admin(broker) as connection:
        connection.channel().queue_declare(queue)
    claims_other = pika.BasicProperties(user_id="someone-else")
    with login(broker, "hank", tags=("impersonator",)) as connection:
        channel = connection.channel()
        channel.basic_publish("", queue, b"m", claims_other)
        round_trip(channel)
    with login(broker, "ivy") as connection:
        channel = connection.channel()
        channel.basic_publish("", queue, b"m", pika.BasicProperties(user_id="ivy"))
        text = "PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated user was 'ivy'"
        with closes_channel(406, text):
            channel.basic_publish("", queue, b"m", claims_other)
            round_trip(channel)


# ---- answers that come late ------------------------------------------------------------


def test_an_authorizer_that_answers_late_holds_the_frames_behind_the_one_it_checks(broker: BrokerProcess) -> None:
    queue = unique_name("perm-slow")
    with login(broker, "jack", delay=0.2) as connection:
        channel = connection.channel()
        started = time.monotonic()
        channel.queue_declare(queue)
        # Pipelined: the first publish waits for its write check, the rest wait behind it.
        for number in range(20):
            channel.basic_publish("", queue, str(number).encode())
        bodies = []
        while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
            bodies.append(got[2])
        elapsed = time.monotonic() - started
        channel.queue_delete(queue)
    assert bodies == [str(number).encode() for number in range(20)]
    assert elapsed >= 0.6, "configure, write and read were each asked once, each 0.2 s late"
    assert asked(broker, "jack", "exchange amq.default write ") == 1


def test_a_late_refusal_closes_the_channel_and_is_not_kept(broker: BrokerProcess) -> None:
    with login(broker, "kate", configure=NOTHING, delay=0.2) as connection:
        for _ in range(2):  # RabbitMQ keeps allowed answers only: the second is asked again
            with closes_channel(403, refused("queue", "perm-late", "kate")):
                connection.channel().queue_declare("perm-late")
    assert asked(broker, "kate", "queue perm-late configure ") == 2


def test_a_late_vhost_refusal_closes_the_connection(broker: BrokerProcess) -> None:
    assert open_refusal(url(broker, "kate", permissions={"elsewhere": [ALL, ALL, ALL]}, delay=0.2)) == (
        530,
        "NOT_ALLOWED - access to vhost '/' refused for user 'kate'",
    )


# ---- caching ---------------------------------------------------------------------------


def test_answers_are_asked_once_per_connection(broker: BrokerProcess) -> None:
    exchange, queue = unique_name("perm-x"), unique_name("perm-q")
    with admin(broker) as connection:
        connection.channel().exchange_declare(exchange, "topic")
    with login(broker, "liam") as connection:
        for _ in range(2):  # answers outlive a channel
            channel = connection.channel()
            channel.queue_declare(queue)
            for _ in range(50):
                channel.basic_publish(exchange, "a.b", b"m")
                channel.basic_publish("", queue, b"m")
            round_trip(channel)
            channel.close()
        connection.channel().queue_delete(queue)
    assert asked(broker, "liam", f"exchange {exchange} write ") == 1
    assert asked(broker, "liam", f"topic {exchange} write a.b") == 1
    assert asked(broker, "liam", "exchange amq.default write ") == 1
    assert asked(broker, "liam", f"queue {queue} configure ") == 1


def test_an_authorizer_that_hands_over_its_patterns_is_asked_about_topics_only(broker: BrokerProcess) -> None:
    exchange, queue = unique_name("perm-x"), unique_name("perm-q")
    with admin(broker) as connection:
        connection.channel().exchange_declare(exchange, "topic")
    with login(broker, "noah", configure="^perm-q", by_patterns=True) as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.queue_bind(queue, exchange, "a.b")
        channel.basic_publish(exchange, "a.b", b"m")
        round_trip(channel)
        with closes_channel(403, refused("exchange", exchange, "noah")):
            channel.exchange_declare(exchange, "topic")
        connection.channel().queue_delete(queue)
    assert asked(broker, "noah", f"topic {exchange} read a.b") == 1
    assert asked(broker, "noah", f"topic {exchange} write a.b") == 1
    assert broker.output.count("noah asked: queue ") == 0
    assert broker.output.count("noah asked: exchange ") == 0


def test_a_subclass_of_pattern_authorizer_that_answers_otherwise_is_asked() -> None:
    class OnlyQueueA(PatternAuthorizer):
        def check(self, access: Access) -> bool:
            return access.name == "a"

    assert PatternAuthorizer({"/": VHostPermissions()}).vhost_permissions("/") == VHostPermissions()
    assert OnlyQueueA({"/": VHostPermissions()}).vhost_permissions("/") is None


def test_a_permission_change_reaches_connections_already_open(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        access = lavin.broker.access
        lavin.call(access.add_user, "mia", "pw")
        lavin.call(access.set_permissions, "mia", "/", VHostPermissions())
        credentials = pika.PlainCredentials("mia", "pw")
        with pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", lavin.port, "/", credentials)
        ) as connection:
            channel = connection.channel()
            channel.queue_declare("mia.q")
            channel.basic_publish("", "mia.q", b"before")
            round_trip(channel)
            lavin.call(access.set_permissions, "mia", "/", VHostPermissions(".*", "", ".*"))
            with closes_channel(403, refused("exchange", "amq.default", "mia")):
                channel.basic_publish("", "mia.q", b"after")
                round_trip(channel)
            lavin.call(access.set_permissions, "mia", "/", VHostPermissions(".*", ".*", ""))
            with closes_channel(403, refused("queue", "mia.q", "mia")):
                connection.channel().basic_get("mia.q")


# ---- update-secret and expiry ----------------------------------------------------------


@BY_PATTERNS
def test_update_secret_replaces_the_users_permissions(broker: BrokerProcess, by_patterns: bool) -> None:
    queue = unique_name("perm-q")
    with login(broker, "nina", by_patterns=by_patterns) as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        _publish("", queue)(channel, "")
        connection.update_secret(secret(write=NOTHING, by_patterns=by_patterns), "new token")
        with closes_channel(403, refused("exchange", "amq.default", "nina")):
            _publish("", queue)(channel, "")
        connection.channel().queue_delete(queue)
    assert "user 'nina' updated secret, reason: new token" in broker.output


def test_a_refused_secret_closes_the_connection(broker: BrokerProcess) -> None:
    with (
        login(broker, "oscar") as connection,
        closes_connection(530, "NOT_ALLOWED - New secret was refused by one of the backends"),
    ):
        connection.update_secret("refuse", "bad token")


def test_expired_credentials_close_the_connection(broker: BrokerProcess) -> None:
    with login(broker, "pam", expires_in=0.5) as connection:
        started = time.monotonic()
        with closes_connection(403, "ACCESS_REFUSED - credential expired"):
            while time.monotonic() - started < 5:
                connection.process_data_events(0.1)
    assert time.monotonic() - started >= 0.45


def test_a_new_secret_moves_the_expiry(broker: BrokerProcess) -> None:
    with login(broker, "quinn", expires_in=0.5) as connection:
        started = time.monotonic()
        connection.update_secret(secret(expires_in=1.5), "refreshed")
        connection.process_data_events(1.0)  # past the first expiry
        assert connection.is_open
        with closes_connection(403, "ACCESS_REFUSED - credential expired"):
            while time.monotonic() - started < 5:
                connection.process_data_events(0.1)
