"""Users, vhosts, permissions and vhost limits: the one service every management path
(the control socket, definitions import, the HTTP API) goes through.

The data lives in `users.json` and `vhosts.json` in the data dir (lavin.storage.metadata.access_files).
Every change is written to its file before it takes effect, so a change that could not
be saved (OSError) changes nothing. On the first start, when a file does not exist yet,
the default vhost and the default user of the config are created.

Running vhosts are the broker's: access control starts, limits and removes them through
the `RunningVHosts` port, which the broker implements.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

from lavin.api.auth import StoredUser, TopicPermissions, VHostPermissions
from lavin.api.patterns import PatternError, compile_pattern
from lavin.api.printable import printable
from lavin.broker.access import passwords
from lavin.config import Config
from lavin.storage import queue_directories
from lavin.storage.metadata.access_files import (
    USERS_FILE,
    VHOSTS_FILE,
    AccessFileError,
    load_users,
    load_vhosts,
    save_users,
    save_vhosts,
    vhost_directory_name,
)

log = logging.getLogger(__name__)

MAX_CONNECTIONS: Final = "max-connections"
MAX_QUEUES: Final = "max-queues"
LIMIT_NAMES: Final = (MAX_CONNECTIONS, MAX_QUEUES)
# connection.open carries the vhost name as a short string.
MAX_VHOST_NAME_BYTES: Final = 255
FULL_PERMISSIONS: Final = VHostPermissions()


class AccessControlError(ValueError):
    """A change refused: bad input, or a name that exists already."""


class NotFoundError(AccessControlError):
    """No user or vhost of that name."""


class RunningVHosts(Protocol):
    """The broker's running vhosts, as access control starts, limits and removes them
    (`lavin.broker.broker.Broker`). A limit is -1 when there is none."""

    def start_vhost(self, name: str, max_connections: int, max_queues: int) -> None: ...

    def stop_vhost(self, name: str) -> None:
        """Close a vhost just started whose creation could not be saved; its data stays."""

    def remove_vhost(self, name: str) -> Path:
        """Close its connections and delete its queues and exchanges; returns its data dir,
        which the caller removes."""

    def apply_vhost_limits(self, name: str, max_connections: int, max_queues: int) -> None: ...


class AccessControl:
    """The broker's user database and vhosts, reachable as `broker.access`."""

    def __init__(self, config: Config, running: RunningVHosts) -> None:
        self.config = config
        self.running = running
        self.users_path = config.data_dir / USERS_FILE
        self.vhosts_path = config.data_dir / VHOSTS_FILE
        self._users: dict[str, StoredUser] = {}
        self._vhost_limits: dict[str, dict[str, int]] = {}
        self._listeners: list[Callable[[str], None]] = []

    # ---- start-up --------------------------------------------------------------------------

    def load(self) -> None:
        """Read both files (creating them on the first start) and start every vhost. A file
        that cannot be read or holds something invalid stops start-up, naming the file: a
        silent reset would lock everyone out or let everyone in."""
        config = self.config
        vhosts = load_vhosts(self.vhosts_path)
        for name, limits in (vhosts or {}).items():
            try:
                _check_vhost(name, limits)
            except AccessControlError as exc:
                raise AccessFileError(f"{self.vhosts_path}: vhost '{name}': {exc}") from exc
        users = load_users(self.users_path)
        for user in users or ():
            try:
                _check_user(user)
            except AccessControlError as exc:
                raise AccessFileError(f"{self.users_path}: user '{user.name}': {exc}") from exc
        if vhosts is None:
            vhosts = {config.default_vhost: {}}
            save_vhosts(self.vhosts_path, vhosts)
            log.info("created vhost '%s'", printable(config.default_vhost))
        if users is None:
            users = [self._default_user()]
            save_users(self.users_path, users)
            log.info("created user '%s'", printable(config.default_user))
        self._vhost_limits = {name: _effective(limits) for name, limits in vhosts.items()}
        self._users = {user.name: user for user in users}
        for name, limits in self._vhost_limits.items():
            self.running.start_vhost(name, limits.get(MAX_CONNECTIONS, -1), limits.get(MAX_QUEUES, -1))

    def _default_user(self) -> StoredUser:
        config = self.config
        return StoredUser(
            name=config.default_user,
            password_hash=passwords.hash_password(config.default_password),
            hashing_algorithm=passwords.DEFAULT_ALGORITHM,
            tags=("administrator",),
            permissions={config.default_vhost: FULL_PERMISSIONS},
            topic_permissions={},
        )

    # ---- listeners -------------------------------------------------------------------------

    def add_listener(self, callback: Callable[[str], None]) -> None:
        """`callback(user name)` whenever that user's tags or permissions change or the
        user is deleted: the core drops what it cached about the user's rights, or closes
        the connections of a user no longer there."""
        self._listeners.append(callback)

    def _notify(self, names: Iterable[str]) -> None:
        for name in names:
            for callback in self._listeners:
                callback(name)

    # ---- users -----------------------------------------------------------------------------

    def user(self, name: str) -> StoredUser | None:
        return self._users.get(name)

    def users(self) -> list[StoredUser]:
        return list(self._users.values())

    def add_user(self, name: str, password: str | None, tags: Sequence[str] = ()) -> None:
        """A new user; `password` None makes a passwordless user, who cannot log in with a
        password (RabbitMQ's way to have a user only other backends authenticate)."""
        password_hash = "" if password is None else passwords.hash_password(password)
        self.add_user_with_hash(name, password_hash, passwords.DEFAULT_ALGORITHM, tags)

    def add_user_with_hash(
        self, name: str, password_hash: str, hashing_algorithm: str, tags: Sequence[str] = ()
    ) -> None:
        """A new user with a hash made elsewhere (RabbitMQ's or LavinMQ's definitions)."""
        if name in self._users:
            raise AccessControlError(f"user '{name}' already exists")
        user = StoredUser(name, password_hash, hashing_algorithm, tuple(tags), {}, {})
        _check_user(user)
        self._save_users({**self._users, name: user})

    def delete_user(self, name: str) -> None:
        self._known_user(name)
        self._save_users({key: user for key, user in self._users.items() if key != name})
        self._notify([name])

    def change_password(self, name: str, password: str | None) -> None:
        """None clears the password: the user can no longer log in with one."""
        user = self._known_user(name)
        password_hash = "" if password is None else passwords.hash_password(password)
        self._replace_user(
            dataclasses.replace(user, password_hash=password_hash, hashing_algorithm=passwords.DEFAULT_ALGORITHM)
        )

    def set_password_hash(self, name: str, password_hash: str, hashing_algorithm: str) -> None:
        """A hash made elsewhere for an existing user (definitions imported again, or RabbitMQ's
        `PUT /api/users/NAME` with `password_hash`)."""
        user = dataclasses.replace(
            self._known_user(name), password_hash=password_hash, hashing_algorithm=hashing_algorithm
        )
        _check_user(user)
        self._replace_user(user)

    def set_user_tags(self, name: str, tags: Sequence[str]) -> None:
        user = dataclasses.replace(self._known_user(name), tags=_checked_tags(tags))
        self._replace_user(user)
        self._notify([name])

    def verify_password(self, user: StoredUser, password: str) -> bool:
        return passwords.verify_password(user.password_hash, user.hashing_algorithm, password)

    def _known_user(self, name: str) -> StoredUser:
        user = self._users.get(name)
        if user is None:
            raise NotFoundError(f"no user '{name}'")
        return user

    def _replace_user(self, user: StoredUser) -> None:
        self._save_users({**self._users, user.name: user})

    def _save_users(self, users: dict[str, StoredUser]) -> None:
        save_users(self.users_path, users.values())
        self._users = users

    # ---- permissions -----------------------------------------------------------------------

    def set_permissions(self, user: str, vhost: str, permissions: VHostPermissions) -> None:
        stored = self._known_user(user)
        self._known_vhost(vhost)
        _check_patterns(permissions.configure, permissions.write, permissions.read)
        self._replace_user(dataclasses.replace(stored, permissions={**stored.permissions, vhost: permissions}))
        self._notify([user])

    def clear_permissions(self, user: str, vhost: str) -> None:
        stored = self._known_user(user)
        self._known_vhost(vhost)
        if vhost in stored.permissions:
            remaining = {key: value for key, value in stored.permissions.items() if key != vhost}
            self._replace_user(dataclasses.replace(stored, permissions=remaining))
            self._notify([user])

    def permissions(self) -> list[tuple[str, str, VHostPermissions]]:
        """(user, vhost, permissions) for every user with permissions on a vhost."""
        return [(user.name, vhost, perms) for user in self._users.values() for vhost, perms in user.permissions.items()]

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, permissions: TopicPermissions) -> None:
        stored = self._known_user(user)
        self._known_vhost(vhost)
        _check_patterns(permissions.write, permissions.read)
        topic_permissions = {**stored.topic_permissions, (vhost, exchange): permissions}
        self._replace_user(dataclasses.replace(stored, topic_permissions=topic_permissions))
        self._notify([user])

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """Those on one exchange, or (exchange None) on every exchange of the vhost."""
        stored = self._known_user(user)
        self._known_vhost(vhost)
        remaining = {
            key: value
            for key, value in stored.topic_permissions.items()
            if key[0] != vhost or (exchange is not None and key[1] != exchange)
        }
        if len(remaining) != len(stored.topic_permissions):
            self._replace_user(dataclasses.replace(stored, topic_permissions=remaining))
            self._notify([user])

    def topic_permissions(self) -> list[tuple[str, str, str, TopicPermissions]]:
        """(user, vhost, exchange, permissions) for every topic permission."""
        return [
            (user.name, vhost, exchange, perms)
            for user in self._users.values()
            for (vhost, exchange), perms in user.topic_permissions.items()
        ]

    # ---- vhosts ----------------------------------------------------------------------------

    def vhosts(self) -> list[str]:
        return list(self._vhost_limits)

    def add_vhost(self, name: str, creator: str | None = None) -> None:
        """Create and start a vhost; `creator`, a user, gets full permissions on it (as
        LavinMQ gives the user who creates a vhost)."""
        _check_vhost(name, {})
        if name in self._vhost_limits:
            raise AccessControlError(f"vhost '{name}' already exists")
        if creator is not None:
            self._known_user(creator)
        # Left by a delete a crash interrupted after it was recorded: not this vhost's data.
        stale = self.config.data_dir / vhost_directory_name(name)
        queue_directories.finish_delete(queue_directories.begin_delete(stale))
        self.running.start_vhost(name, -1, -1)
        try:
            self._save_vhosts({**self._vhost_limits, name: {}})
        except OSError:
            self.running.stop_vhost(name)
            raise
        log.info("created vhost '%s'", printable(name))
        if creator is not None:
            self.set_permissions(creator, name, FULL_PERMISSIONS)

    async def delete_vhost(self, name: str) -> None:
        """Close its connections (320, RabbitMQ's text), drop its queues, exchanges and
        their data, and every permission on it."""
        self._known_vhost(name)
        self._save_vhosts({key: limits for key, limits in self._vhost_limits.items() if key != name})
        aside = queue_directories.begin_delete(self.running.remove_vhost(name))
        log.info("deleted vhost '%s'", printable(name))
        self._drop_permissions_on(name)
        await asyncio.to_thread(queue_directories.finish_delete, aside)

    def _drop_permissions_on(self, vhost: str) -> None:
        changed = {
            user.name: dataclasses.replace(
                user,
                permissions={key: value for key, value in user.permissions.items() if key != vhost},
                topic_permissions={key: value for key, value in user.topic_permissions.items() if key[0] != vhost},
            )
            for user in self._users.values()
            if vhost in user.permissions or any(key[0] == vhost for key in user.topic_permissions)
        }
        if changed:
            self._save_users({**self._users, **changed})
            self._notify(changed)

    def set_vhost_limits(self, vhost: str, limits: Mapping[str, int]) -> None:
        """Replace the vhost's limits: `max-connections`, `max-queues`; a negative value or
        an absent key means no limit, 0 refuses every new connection or queue."""
        self._known_vhost(vhost)
        _check_vhost(vhost, limits)
        effective = _effective(limits)
        self._save_vhosts({**self._vhost_limits, vhost: effective})
        self.running.apply_vhost_limits(vhost, effective.get(MAX_CONNECTIONS, -1), effective.get(MAX_QUEUES, -1))

    def vhost_limits(self, vhost: str) -> dict[str, int]:
        return dict(self._known_vhost(vhost))

    def _known_vhost(self, name: str) -> dict[str, int]:
        limits = self._vhost_limits.get(name)
        if limits is None:
            raise NotFoundError(f"no vhost '{name}'")
        return limits

    def _save_vhosts(self, vhosts: dict[str, dict[str, int]]) -> None:
        save_vhosts(self.vhosts_path, vhosts)
        self._vhost_limits = vhosts


# ---- checks ------------------------------------------------------------------------------------


def _check_user(user: StoredUser) -> None:
    if not user.name:
        raise AccessControlError("a user name must not be empty")
    try:
        passwords.check_hash(user.password_hash, user.hashing_algorithm)
    except ValueError as exc:
        raise AccessControlError(str(exc)) from None
    _checked_tags(user.tags)
    for permissions in user.permissions.values():
        _check_patterns(permissions.configure, permissions.write, permissions.read)
    for topic in user.topic_permissions.values():
        _check_patterns(topic.write, topic.read)


def _checked_tags(tags: Sequence[str]) -> tuple[str, ...]:
    if isinstance(tags, str):  # a str is a Sequence[str] too: "administrator" is one tag, not 13
        raise AccessControlError("tags must be a list of names")
    for tag in tags:
        if not tag or "," in tag or tag != tag.strip():
            raise AccessControlError(f"invalid tag '{tag}': a tag is a name without commas or surrounding spaces")
    return tuple(tags)


def _check_patterns(*patterns: str) -> None:
    for pattern in patterns:
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            raise AccessControlError(str(exc)) from None


def _check_vhost(name: str, limits: Mapping[str, int]) -> None:
    if not name:
        raise AccessControlError("a vhost name must not be empty")
    if len(name.encode()) > MAX_VHOST_NAME_BYTES:
        raise AccessControlError(f"a vhost name is at most {MAX_VHOST_NAME_BYTES} bytes")
    for key, value in limits.items():
        if key not in LIMIT_NAMES:
            raise AccessControlError(f"unknown vhost limit '{key}'; known: {', '.join(LIMIT_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise AccessControlError(f"vhost limit '{key}' must be an integer")


def _effective(limits: Mapping[str, int]) -> dict[str, int]:
    """The limits that limit something: a negative value means none."""
    return {key: value for key, value in limits.items() if value >= 0}
