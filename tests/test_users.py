"""The user database: RabbitMQ's password hashes, users.json, the default user of the config,
and the `internal` auth backend."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import logging
import re
import socket
import stat
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from access_helpers import in_process_broker, read_json
from broker_process import BrokerProcess
from lavin.api import Access, AccessRefused, TopicPermissions, User, VHostPermissions
from lavin.broker.access import passwords
from lavin.broker.access.access_control import AccessControlError, NotFoundError
from lavin.config import StartupError

LOGIN_REFUSED = pika.exceptions.ProbableAuthenticationError

# ---- password hashes ---------------------------------------------------------------------

# Hashes made by RabbitMQ and LavinMQ: the two examples of RabbitMQ's passwords guide
# ("Computing Password Hash"), and LavinMQ's default_password_hash, of "guest".
MADE_ELSEWHERE = [
    pytest.param(passwords.SHA256, "test12", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", id="rabbitmq-sha256"),
    pytest.param(passwords.MD5, "simon", "ytUIm8s3AnKsXQjptplKFytfVxI=", id="rabbitmq-md5"),
    pytest.param(passwords.SHA256, "guest", "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+", id="lavinmq-guest"),
]
HASHLIB_NAMES = [(passwords.SHA256, "sha256"), (passwords.SHA512, "sha512"), (passwords.MD5, "md5")]


@pytest.mark.parametrize(("algorithm", "password", "password_hash"), MADE_ELSEWHERE)
def test_hashes_made_by_rabbitmq_and_lavinmq_verify(algorithm: str, password: str, password_hash: str) -> None:
    assert passwords.verify_password(password_hash, algorithm, password)
    assert not passwords.verify_password(password_hash, algorithm, password + "!")
    passwords.check_hash(password_hash, algorithm)


@pytest.mark.parametrize(("algorithm", "hashlib_name"), HASHLIB_NAMES)
def test_a_hash_is_base64_of_a_4_byte_salt_and_the_digest_of_salt_and_password(
    algorithm: str, hashlib_name: str
) -> None:
    password = "pässwörd"
    raw = base64.b64decode(passwords.hash_password(password, algorithm))
    salt = raw[:4]
    assert raw == salt + hashlib.new(hashlib_name, salt + password.encode("utf-8")).digest()
    by_hand = base64.b64encode(b"\x90\x8d\xc6\x0a" + hashlib.new(hashlib_name, b"\x90\x8d\xc6\x0asecret").digest())
    assert passwords.verify_password(by_hand.decode(), algorithm, "secret")
    assert not passwords.verify_password(by_hand.decode(), algorithm, "Secret")


def test_every_hash_has_its_own_salt() -> None:
    assert passwords.hash_password("same") != passwords.hash_password("same")


@pytest.mark.parametrize(
    ("password_hash", "algorithm"),
    [
        pytest.param("", passwords.SHA256, id="passwordless"),
        pytest.param("not base64!", passwords.SHA256, id="not-base64"),
        pytest.param("kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", "rabbit_password_hashing_sha1", id="unknown"),
        pytest.param("kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", passwords.MD5, id="other-algorithm"),
    ],
)
def test_an_empty_or_unusable_hash_matches_no_password(password_hash: str, algorithm: str) -> None:
    for password in ("", "test12"):
        assert not passwords.verify_password(password_hash, algorithm, password)


# ---- users.json --------------------------------------------------------------------------


def test_the_first_start_writes_the_default_user_and_vhost(fresh_broker: BrokerProcess) -> None:
    users_file = fresh_broker.data_dir / "users.json"
    [guest] = read_json(users_file)
    assert {key: value for key, value in guest.items() if key != "password_hash"} == {
        "name": "guest",
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": "administrator",
        "permissions": {"/": {"config": ".*", "write": ".*", "read": ".*"}},
        "topic_permissions": {},
    }
    assert passwords.verify_password(guest["password_hash"], passwords.SHA256, "guest")
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600  # it holds password hashes
    assert read_json(fresh_broker.data_dir / "vhosts.json") == [
        {"name": "/", "dir": hashlib.sha1(b"/").hexdigest(), "limits": {}}
    ]
    pika.BlockingConnection(pika.URLParameters(fresh_broker.url)).close()


def test_users_are_saved_by_replacing_the_file_and_read_back_after_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    users_file = data_dir / "users.json"
    with in_process_broker(data_dir) as lavin:
        access = lavin.broker.access
        first_inode = users_file.stat().st_ino
        lavin.call(access.add_user, "alice", "wonderland", ["management"])
        lavin.call(access.set_permissions, "alice", "/", VHostPermissions("^alice\\.", ".*", "^(alice|shared)\\."))
        lavin.call(access.set_topic_permissions, "alice", "/", "amq.topic", TopicPermissions("^a\\.", ".*"))
        # A new file renamed over the old one: a crash leaves one or the other, never a mix.
        assert users_file.stat().st_ino != first_inode
        assert sorted(path.name for path in data_dir.glob("users.json*")) == ["users.json"]
    with in_process_broker(data_dir) as lavin:
        alice = lavin.call(lavin.broker.access.user, "alice")
        pika.BlockingConnection(pika.URLParameters(lavin.url("alice", "wonderland"))).close()
    assert alice is not None
    assert alice.tags == ("management",)
    assert alice.permissions == {"/": VHostPermissions("^alice\\.", ".*", "^(alice|shared)\\.")}
    assert alice.topic_permissions == {("/", "amq.topic"): TopicPermissions("^a\\.", ".*")}
    [_, saved] = read_json(users_file)
    assert saved["topic_permissions"] == {"/": {"amq.topic": {"write": "^a\\.", "read": ".*"}}}


def test_a_user_written_into_users_json_by_an_operator_logs_in(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    # RabbitMQ's example hash of "test12"; no hashing_algorithm would mean LavinMQ's legacy MD5.
    operator_entry = {
        "name": "ops",
        "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": "monitoring",
        "permissions": {"/": {"config": "", "write": "", "read": ".*"}},
    }
    (data_dir / "users.json").write_text(json.dumps([operator_entry]))
    with in_process_broker(data_dir) as lavin:
        pika.BlockingConnection(pika.URLParameters(lavin.url("ops", "test12"))).close()
        with pytest.raises(LOGIN_REFUSED):  # users.json existed: no default user was added
            pika.BlockingConnection(pika.URLParameters(lavin.url()))


INVALID_USERS = [
    pytest.param("[{not json", "is not valid JSON", id="not-json"),
    pytest.param('{"name": "guest"}', "the file must be a list", id="not-a-list"),
    pytest.param("null", "the file must be a list", id="null"),
    pytest.param('[{"name": "a", "password_hash": 5}]', "user 'a': password_hash must be a string", id="hash-type"),
    pytest.param(
        '[{"name": "a", "password_hash": "", "hashing_algorithm": "rabbit_password_hashing_sha1"}]',
        "user 'a': unknown hashing algorithm 'rabbit_password_hashing_sha1'",
        id="algorithm",
    ),
    pytest.param(
        '[{"name": "a", "permissions": {"/": {"config": "(", "write": "", "read": ""}}}]',
        "user 'a': invalid regular expression '('",
        id="pattern",
    ),
    pytest.param('[{"name": "a"}, {"name": "a"}]', "user 'a' appears twice", id="duplicate"),
]


@pytest.mark.parametrize(("content", "reason"), INVALID_USERS)
def test_an_invalid_users_json_stops_start_up_naming_the_file(tmp_path: Path, content: str, reason: str) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    users_file = data_dir / "users.json"
    users_file.write_text(content)
    with pytest.raises(StartupError) as refused, in_process_broker(data_dir):
        pass
    assert str(users_file) in str(refused.value)
    assert reason in str(refused.value)
    assert users_file.read_text() == content  # never reset


def test_lavin_serve_exits_with_the_file_named_when_users_json_is_invalid(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data")
    process.data_dir.mkdir(parents=True)
    (process.data_dir / "users.json").write_text("[{not json")
    with pytest.raises(RuntimeError, match="broker exited with 1"):
        process.start()
    assert f"{process.data_dir / 'users.json'} is not valid JSON" in process.output
    assert "Traceback" not in process.output


def test_access_control_refuses_bad_user_input(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        access = lavin.broker.access
        refusals = {
            "user 'guest' already exists": (access.add_user, "guest", "x"),
            "no user 'nobody'": (access.delete_user, "nobody"),
            "no vhost 'nowhere'": (access.set_permissions, "guest", "nowhere", VHostPermissions()),
            "invalid regular expression '['": (access.set_permissions, "guest", "/", VHostPermissions("[")),
            "tags must be a list of names": (access.set_user_tags, "guest", "administrator"),
            "a user name must not be empty": (access.add_user, "", "x"),
            "password_hash holds 3 bytes": (access.add_user_with_hash, "h", "YWJj", passwords.SHA256, ()),
        }
        for text, (method, *arguments) in refusals.items():
            with pytest.raises(AccessControlError, match=re.escape(text)) as refused:
                lavin.call(method, *arguments)
            assert isinstance(refused.value, NotFoundError) == text.startswith("no ")
        assert [user.name for user in lavin.call(access.users)] == ["guest"]


# ---- logging in --------------------------------------------------------------------------


def test_a_passwordless_user_cannot_log_in_with_any_password(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with in_process_broker(tmp_path / "data") as lavin:
        lavin.call(lavin.broker.access.add_user, "service", None)
        with pytest.raises(LOGIN_REFUSED):
            pika.BlockingConnection(pika.URLParameters(lavin.url("service", "")))
    assert "login of user 'service' from 127.0.0.1 refused: user 'service' has no password" in caplog.text


def test_a_failed_login_is_logged_once_with_user_peer_and_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with in_process_broker(tmp_path / "data") as lavin:
        with pytest.raises(LOGIN_REFUSED):
            pika.BlockingConnection(pika.URLParameters(lavin.url("guest", "wrong")))
        with pytest.raises(LOGIN_REFUSED):
            pika.BlockingConnection(pika.URLParameters(lavin.url("mal\nlory", "x")))
    refusals = [record.getMessage() for record in caplog.records if record.name == "lavin.broker.broker"]
    assert refusals == [
        "login of user 'guest' from 127.0.0.1 refused: user 'guest' - invalid credentials",
        "login of unknown user 'mal\\nlory' from 127.0.0.1 refused",
    ]


def test_the_authorizer_follows_permission_changes_of_a_logged_in_user(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        access = lavin.broker.access
        told: list[str] = []
        lavin.call(access.add_listener, told.append)
        lavin.call(access.add_user, "bob", "pw")
        lavin.call(access.set_permissions, "bob", "/", VHostPermissions("^bob\\.", "", ""))
        user = lavin.wait(lambda: lavin.broker.authenticate("bob", "pw", "127.0.0.1", "PLAIN"))

        def may_configure(queue: str) -> bool:
            assert user.authorizer is not None
            return bool(lavin.call(user.authorizer.check, Access("/", "queue", queue, "configure")))

        assert may_configure("bob.jobs") and not may_configure("alice.jobs")
        lavin.call(access.set_permissions, "bob", "/", VHostPermissions(".*", "", ""))
        assert may_configure("alice.jobs")
        lavin.call(access.clear_permissions, "bob", "/")
        assert not may_configure("bob.jobs")
        lavin.call(access.set_permissions, "bob", "/", VHostPermissions())
        lavin.call(access.delete_user, "bob")
        assert not may_configure("bob.jobs")
    assert told == ["bob"] * 5  # four permission changes and the delete


# ---- the default user --------------------------------------------------------------------


class ConfiguredBroker(BrokerProcess):
    """`lavin serve` with [main] settings from an INI file (rewritten by `configure`)."""

    def __init__(self, tmp_path: Path, host: str = "127.0.0.1") -> None:
        self.host = host
        super().__init__(tmp_path / "data")
        self.ini = tmp_path / "lavin.ini"

    def configure(self, settings: str) -> None:
        self.ini.write_text(f"[main]\n{textwrap.dedent(settings)}\n")

    @property
    def command(self) -> list[str]:
        return [*super().command, "--config", str(self.ini)]

    def login(self, user: str, password: str) -> None:
        credentials = pika.PlainCredentials(user, password)
        pika.BlockingConnection(pika.ConnectionParameters(self.host, self.port, "/", credentials)).close()


@pytest.fixture
def configured_broker(tmp_path: Path) -> Iterator[ConfiguredBroker]:
    process = ConfiguredBroker(tmp_path)
    yield process
    process.stop()


def test_the_default_user_of_the_config_is_created_on_the_first_start_only(
    configured_broker: ConfiguredBroker,
) -> None:
    configured_broker.configure("default_user = admin\ndefault_password = s3cret")
    configured_broker.start()
    configured_broker.login("admin", "s3cret")
    with pytest.raises(LOGIN_REFUSED):
        configured_broker.login("guest", "guest")
    [admin] = read_json(configured_broker.data_dir / "users.json")
    assert (admin["name"], admin["tags"], admin["permissions"]) == (
        "admin",
        "administrator",
        {"/": {"config": ".*", "write": ".*", "read": ".*"}},
    )
    configured_broker.stop()
    configured_broker.configure("default_user = admin\ndefault_password = changed")
    configured_broker.start()
    configured_broker.login("admin", "s3cret")  # users.json exists: the config no longer applies
    configured_broker.stop()
    (configured_broker.data_dir / "users.json").write_text("[]")  # the operator removes every user
    configured_broker.start()
    with pytest.raises(LOGIN_REFUSED):
        configured_broker.login("admin", "s3cret")


def test_the_default_user_may_log_in_from_any_loopback_address(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        for peer in ("127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"):
            user = lavin.wait(lambda peer=peer: lavin.broker.authenticate("guest", "guest", peer, "PLAIN"))
            assert isinstance(user, User) and user.tags == ("administrator",)


def test_the_default_user_is_refused_from_elsewhere_unless_the_config_allows_it(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        [internal] = lavin.broker.auth_backends
        for peer in ("192.0.2.7", "2001:db8::1", "not-an-address"):
            with pytest.raises(AccessRefused, match="user 'guest' can only connect via localhost"):
                lavin.wait(lambda peer=peer: internal.authenticate("guest", "guest", peer))
        lavin.call(lavin.broker.access.add_user, "remote", "pw")
        assert lavin.wait(lambda: internal.authenticate("remote", "pw", "192.0.2.7")) is not None


def non_loopback_address() -> str | None:
    """An address of this machine that is not loopback, if it has one (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


@pytest.mark.parametrize("only_loopback", [True, False])
def test_default_user_only_loopback_decides_over_logins_through_a_real_interface(
    tmp_path: Path, only_loopback: bool
) -> None:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback")
    process = ConfiguredBroker(tmp_path, host=address)
    process.configure(f"default_user_only_loopback = {str(only_loopback).lower()}")
    process.start()
    try:
        if only_loopback:
            with pytest.raises(LOGIN_REFUSED):
                process.login("guest", "guest")
            assert f"login of user 'guest' from {address} refused: user 'guest' can only connect via localhost" in (
                process.output
            )
        else:
            process.login("guest", "guest")
    finally:
        process.stop()
