"""The `sample-auth` auth backend: users listed in a JSON file.

A third-party auth backend that imports nothing from Lavin but `lavin.api`. Enable it and
put it first in the chain, with its file in its own section of the config file:

    [main]
    plugins = sample-auth
    auth_backends = sample-auth, internal

    [plugin.sample-auth]
    users_file = /etc/lavin/users.json

The file maps user names to the SHA-256 of the password (hex), tags, and RabbitMQ-style
permission patterns per vhost:

    {"carol": {"password_sha256": "5e88...", "tags": ["monitoring"],
               "permissions": {"/": {"configure": "^carol\\\\.", "write": ".*", "read": ".*"}}}}

A user the file does not list is left to the next backend; a listed user with the wrong
password is refused outright.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lavin.api import AccessRefused, AuthBackend, AuthContext, User, VHostPermissions


@dataclass(frozen=True)
class ListedUser:
    password_sha256: str
    tags: tuple[str, ...]
    permissions: dict[str, VHostPermissions]


class StaticUsersAuth(AuthBackend):
    name = "sample-auth"

    def __init__(self) -> None:
        self.users: dict[str, ListedUser] = {}

    def configure(self, settings: Mapping[str, str], context: AuthContext) -> None:
        # Read once, before the broker takes connections: authenticate never touches the disk.
        path = settings.get("users_file")
        if path is None:
            raise ValueError("users_file must be set")
        document = json.loads(Path(path).read_text())
        self.users = {name: parse_user(name, entry) for name, entry in document.items()}

    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        listed = self.users.get(username)
        if listed is None:
            return None
        digest = hashlib.sha256(password.encode("utf-8", "surrogateescape")).hexdigest()
        if not hmac.compare_digest(digest, listed.password_sha256):
            raise AccessRefused(f"wrong password for user '{username}'")
        return User(username, tags=listed.tags, permissions=dict(listed.permissions))


def parse_user(name: str, entry: Mapping[str, object]) -> ListedUser:
    password, tags, permissions = entry.get("password_sha256"), entry.get("tags", []), entry.get("permissions", {})
    if not isinstance(password, str) or not isinstance(tags, list) or not isinstance(permissions, dict):
        raise ValueError(f"user {name!r}: password_sha256 (text), tags (a list) and permissions (an object) expected")
    return ListedUser(
        password.lower(),
        tuple(str(tag) for tag in tags),
        {vhost: VHostPermissions(**patterns) for vhost, patterns in permissions.items()},
    )
