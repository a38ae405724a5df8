"""Who may read on a follower: the login and permission checks of a follower's read
session, answered from the data dir the follower replicates (users.json, vhosts.json)
with the broker's reply codes and texts. The files are read on every login, in a worker
thread: a user or permission changed on the leader applies to the next read session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lavin.amqp.authorization import NamePatterns
from lavin.amqp.handshake import password_credentials
from lavin.api import errors
from lavin.api.auth import StoredUser
from lavin.broker.access.passwords import verify_password
from lavin.broker.broker import login_refused
from lavin.config import Config, StartupError
from lavin.plugins.auth.guest import is_loopback
from lavin.storage.metadata.access_files import USERS_FILE, VHOSTS_FILE, load_users, load_vhosts


@dataclass(frozen=True)
class Reader:
    """A logged-in user of a read session, with its read pattern on the opened vhost."""

    name: str
    user: StoredUser
    read: NamePatterns | None = None  # set once a vhost is open

    def require_read(self, vhost: str, queue: str) -> None:
        if self.read is None or not self.read.allows("read", queue):
            raise errors.AccessRefused(f"access to queue '{queue}' in vhost '{vhost}' refused for user '{self.name}'")


def login(config: Config, mechanism: str, response: str, peer_host: str) -> Reader:
    """The user a start-ok logs in, as the broker's internal backend decides (blocking: the
    users file is read); ConnectionAccessRefused with the broker's text otherwise."""
    username, password = password_credentials(mechanism, response)
    stored = _stored_user(config.data_dir, username)
    if stored is None or not verify_password(stored.password_hash, stored.hashing_algorithm, password):
        raise login_refused(mechanism)
    if username == config.default_user and config.default_user_only_loopback and not is_loopback(peer_host):
        raise login_refused(mechanism)
    return Reader(username, stored)


def open_vhost(config: Config, reader: Reader, vhost: str) -> Reader:
    """The reader with its permissions on `vhost` (blocking: the vhosts file is read);
    NotAllowed (530) as connection.open answers otherwise."""
    try:
        vhosts = load_vhosts(config.data_dir / VHOSTS_FILE) or {}
    except StartupError:  # being replaced, or damaged: as if the vhost were not there
        vhosts = {}
    if vhost not in vhosts:
        raise errors.NotAllowed(f"vhost {vhost} not found", 10, 40)
    permissions = reader.user.permissions.get(vhost)
    if permissions is None:
        raise errors.NotAllowed(f"access to vhost '{vhost}' refused for user '{reader.name}'", 10, 40)
    return Reader(reader.name, reader.user, NamePatterns(permissions))


def _stored_user(data_dir: Path, name: str) -> StoredUser | None:
    try:
        users = load_users(data_dir / USERS_FILE) or []
    except StartupError:
        return None
    return next((user for user in users if user.name == name), None)
