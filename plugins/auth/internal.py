"""The `internal` backend: the broker's own user database (users.json), as RabbitMQ's
rabbit_auth_backend_internal and LavinMQ's local users."""

from __future__ import annotations

from collections.abc import Mapping

from lavin.api import (
    Access,
    AccessRefused,
    AuthBackend,
    AuthContext,
    Authorizer,
    PatternAuthorizer,
    StoredUser,
    User,
    VHostPermissions,
)
from lavin.plugins.auth.guest import is_loopback


class StoredUserAuthorizer(Authorizer):
    """Answers from the user's current entry in the database, so that a permission change
    applies to connections already open (the core drops its cached answers when told)."""

    def __init__(self, context: AuthContext, name: str) -> None:
        self._context = context
        self._name = name
        self._seen: StoredUser | None = None
        self._patterns: PatternAuthorizer | None = None

    def vhost_permissions(self, vhost: str) -> VHostPermissions | None:
        stored = self._context.stored_user(self._name)
        return None if stored is None else stored.permissions.get(vhost)

    def check(self, access: Access) -> bool:
        stored = self._context.stored_user(self._name)
        if stored is None:  # deleted meanwhile
            return False
        patterns = self._patterns
        if stored is not self._seen or patterns is None:  # entries are replaced, never changed in place
            self._seen = stored
            patterns = self._patterns = PatternAuthorizer(stored.permissions, stored.topic_permissions)
        return patterns.check(access)


class InternalAuth(AuthBackend):
    name = "internal"

    def __init__(self) -> None:
        self._context: AuthContext | None = None
        # One User per database entry, shared by that user's connections: its authorizer
        # reads the live entry, so sharing it costs nothing and saves memory per connection.
        self._users: dict[str, tuple[StoredUser, User]] = {}

    def configure(self, settings: Mapping[str, str], context: AuthContext) -> None:
        self._context = context

    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        context = self._configured()
        stored = context.stored_user(username)
        if stored is None:
            return None
        if not stored.password_hash:
            raise AccessRefused(f"user '{username}' has no password")
        if not context.verify_password(stored, password):
            raise AccessRefused(f"user '{username}' - invalid credentials")
        return self._user(context, stored, peer_host)

    async def authenticate_by_certificate(self, username: str, peer_host: str) -> User | None:
        """As RabbitMQ's internal backend: a user of that name must exist; its password is not asked."""
        context = self._configured()
        stored = context.stored_user(username)
        return None if stored is None else self._user(context, stored, peer_host)

    def _configured(self) -> AuthContext:
        if self._context is None:
            raise RuntimeError("the internal auth backend was not configured")
        return self._context

    def _user(self, context: AuthContext, stored: StoredUser, peer_host: str) -> User:
        if self._loopback_only(context, stored.name) and not is_loopback(peer_host):
            raise AccessRefused(f"user '{stored.name}' can only connect via localhost")
        known = self._users.get(stored.name)
        if known is not None and known[0] is stored:
            return known[1]
        user = User(
            stored.name,
            tags=stored.tags,
            permissions=dict(stored.permissions),
            authorizer=StoredUserAuthorizer(context, stored.name),
        )
        self._users[stored.name] = (stored, user)
        return user

    @staticmethod
    def _loopback_only(context: AuthContext, username: str) -> bool:
        settings = context.settings
        return username == settings["default_user"] and bool(settings["default_user_only_loopback"])

    async def update_secret(self, user: User, secret: str) -> User:
        """As RabbitMQ's internal backend: the user stays as it is."""
        return user
