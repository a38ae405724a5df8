"""Authentication and authorization: who a user is, and what the user may do.

An `AuthBackend` answers who a user is (`authenticate`) and returns a `User` whose
`authorizer` answers what that user may do. The core asks the authorizer once per
connection and `Access` (it caches the answers, and drops the cache when permissions
change), so an authorizer may be slow; it answers either at once (a bool) or later (an
awaitable bool), in which case the connection waits for it without blocking others.

The rules follow RabbitMQ's: a permission is a regular expression matched (unanchored, as
`re.search`, by RE2: `lavin.api.patterns`) against the resource name; an empty pattern
allows nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

from lavin.api.patterns import compile_pattern

# RabbitMQ's user tags.
TAGS = ("administrator", "monitoring", "management", "policymaker", "impersonator")

ResourceKind = Literal["vhost", "queue", "exchange", "topic"]
Permission = Literal["access", "configure", "write", "read"]


class Access(NamedTuple):
    """One thing a user wants to do (a tuple: made for every check that misses the cache).

    - `kind="vhost"`, `permission="access"`: open a connection to `vhost`;
    - `kind="queue"` or `"exchange"`, `permission` configure, write or read, on `name`;
    - `kind="topic"`, `permission` write or read: a routing key (`routing_key`) on the
      topic exchange `name` (RabbitMQ's topic permissions).
    """

    vhost: str
    kind: ResourceKind
    name: str = ""
    permission: Permission = "access"
    routing_key: str = ""


class Authorizer(ABC):
    """What one authenticated user may do."""

    @abstractmethod
    def check(self, access: Access) -> bool | Awaitable[bool]:
        """True to allow, False to refuse; an awaitable when the answer must be fetched."""

    def vhost_permissions(self, vhost: str) -> VHostPermissions | None:
        """The patterns by which `check` answers every queue and exchange question on
        `vhost`, if it answers by RabbitMQ's pattern rule alone: the core then matches
        names itself (a new name costs a regular-expression search, not a call here) and
        asks again when the user's permissions change. None (the default): ask `check`."""
        return None


@dataclass(frozen=True, slots=True)
class VHostPermissions:
    """configure / write / read patterns of one user on one vhost."""

    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def pattern(self, permission: Permission) -> str:
        if permission == "configure":
            return self.configure
        if permission == "write":
            return self.write
        return self.read


@dataclass(frozen=True, slots=True)
class TopicPermissions:
    """write / read patterns on the routing keys of one topic exchange."""

    write: str = ".*"
    read: str = ".*"


def pattern_allows(pattern: str, name: str) -> bool:
    """RabbitMQ's rule: an empty pattern allows nothing; otherwise an unanchored search."""
    return bool(pattern) and compile_pattern(pattern).search(name)


class PatternAuthorizer(Authorizer):
    """Permissions held as patterns: per vhost, and per (vhost, topic exchange).

    A vhost without an entry is refused; a topic exchange without an entry is allowed, as
    RabbitMQ allows every routing key when no topic permission names the exchange.
    """

    def __init__(
        self,
        permissions: Mapping[str, VHostPermissions],
        topic_permissions: Mapping[tuple[str, str], TopicPermissions] | None = None,
    ) -> None:
        self.permissions = dict(permissions)
        self.topic_permissions = dict(topic_permissions or {})

    def vhost_permissions(self, vhost: str) -> VHostPermissions | None:
        if type(self).check is not PatternAuthorizer.check:  # a subclass answers otherwise
            return None
        return self.permissions.get(vhost)

    def check(self, access: Access) -> bool:
        permissions = self.permissions.get(access.vhost)
        if permissions is None:
            return False
        if access.kind == "vhost":
            return True
        if access.kind == "topic":
            topic = self.topic_permissions.get((access.vhost, access.name))
            if topic is None:
                return True
            return pattern_allows(topic.write if access.permission == "write" else topic.read, access.routing_key)
        return pattern_allows(permissions.pattern(access.permission), access.name)


@dataclass
class User:
    """An authenticated user. `authorizer` decides what the user may do; by default the
    patterns in `permissions` (vhost -> VHostPermissions)."""

    name: str
    tags: tuple[str, ...] = ()
    permissions: dict[str, VHostPermissions] = field(default_factory=dict)
    authorizer: Authorizer | None = None
    # Loop time (time.monotonic) after which the credentials are no longer valid (an
    # OAuth2 token's expiry): the core closes the connection then. None: never.
    expires_at: float | None = None

    def __post_init__(self) -> None:
        if self.authorizer is None:
            self.authorizer = PatternAuthorizer(self.permissions)

    def has_tag(self, tag: str) -> bool:
        return tag in self.tags


class AuthBackend(ABC):
    """Answers who a user is. The backends named in `[main] auth_backends` are asked in
    that order; the first that returns a user wins.

    A backend class is built with no arguments; `configure` then hands it its settings
    (the `[plugin.NAME]` section of the config file, NAME being its entry-point name) and
    the broker's `AuthContext`, before the broker takes connections.

    `authenticate` is a coroutine, awaited on the broker's event loop while the connection
    waits: a backend that asks a server (HTTP, LDAP, OAuth) awaits it instead of blocking,
    and other clients go on meanwhile.
    """

    name: ClassVar[str]

    def configure(self, settings: Mapping[str, str], context: AuthContext) -> None:
        """Take settings and the broker's context; the default ignores both."""
        return None

    @abstractmethod
    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        """Return the user; None for "not mine" (the next backend is asked); raise
        AccessRefused to refuse the login outright (the reason goes to the log only)."""

    async def authenticate_by_certificate(self, username: str, peer_host: str) -> User | None:
        """SASL EXTERNAL: the client's verified TLS certificate names `username`, so no
        password is checked. Return the user, or None for "not mine" (the default: the
        backend takes no such logins); raise AccessRefused to refuse outright."""
        return None

    async def update_secret(self, user: User, secret: str) -> User:
        """`connection.update-secret`: the user with the new secret (an OAuth2 backend
        verifies the new token and returns the user with its new scopes and expiry).
        Raise AccessRefused to refuse it. By default a backend has no secret to update."""
        raise NotImplementedError

    async def close(self) -> None:
        """The broker stops: release sessions, caches, tasks."""
        return None


@dataclass(frozen=True, slots=True)
class StoredUser:
    """A user of the broker's own user database (the `internal` backend's users)."""

    name: str
    password_hash: str  # base64 of salt + hash, RabbitMQ's format; "" for a passwordless user
    hashing_algorithm: str  # e.g. rabbit_password_hashing_sha256
    tags: tuple[str, ...]
    permissions: Mapping[str, VHostPermissions]
    topic_permissions: Mapping[tuple[str, str], TopicPermissions]


class AuthContext(ABC):
    """What the broker offers auth backends."""

    @abstractmethod
    def stored_user(self, name: str) -> StoredUser | None:
        """The user of that name in the broker's own user database, or None."""

    @abstractmethod
    def verify_password(self, user: StoredUser, password: str) -> bool:
        """Whether `password` matches the user's hash (any supported algorithm)."""

    @property
    @abstractmethod
    def settings(self) -> Mapping[str, Any]:
        """Broker-wide settings backends may need: `default_user` (str) and
        `default_user_only_loopback` (bool)."""
