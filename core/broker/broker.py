"""The broker: vhosts, connections, authentication and the group-commit writer."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lavin import errors
from lavin.amqp.connection import Connection
from lavin.amqp.direct_reply import ReplyRegistry
from lavin.api import AuthBackend, User
from lavin.broker.group_commit import GroupCommit, SyncWaiter
from lavin.broker.vhost import VHost

if TYPE_CHECKING:
    from lavin.config import Config
    from lavin.plugin_registry import Registry

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 2.0


class Broker:
    def __init__(self, config: Config, registry: Registry) -> None:
        self.config = config
        self.registry = registry
        self.loop = asyncio.get_event_loop()
        self.connections: set[Connection] = set()
        self.vhosts: dict[str, VHost] = {}
        self.group_commit = GroupCommit(self.loop)
        self.replies = ReplyRegistry()
        self.auth_backends: list[AuthBackend] = []
        for name in config.auth_backends:
            backend_class = registry.auth_backends.get(name)
            if backend_class is None:
                raise ValueError(f"unknown auth backend '{name}'")
            self.auth_backends.append(backend_class())

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.group_commit.loop = self.loop
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        vhost = VHost(self, self.config.default_vhost)
        vhost.start()
        self.vhosts[vhost.name] = vhost

    def protocol_factory(self) -> Connection:
        return Connection(self)

    async def shutdown(self) -> None:
        for connection in list(self.connections):
            connection.close(320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
        deadline = self.loop.time() + SHUTDOWN_GRACE
        while self.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        await self.group_commit.drain()
        for vhost in self.vhosts.values():
            vhost.close()

    def authenticate(self, username: str, password: str, peer_host: str, mechanism: str) -> User:
        for backend in self.auth_backends:
            try:
                user = backend.authenticate(username, password, peer_host)
            except errors.AccessRefused as exc:
                log.warning("login of user '%s' from %s refused: %s", username, peer_host, exc.text)
                raise _login_refused(mechanism) from None
            if user is not None:
                return user
        log.warning("login of unknown user '%s' from %s refused", username, peer_host)
        raise _login_refused(mechanism)

    def wait_for_sync(self, waiter: SyncWaiter) -> None:
        self.group_commit.wait_for_sync(waiter)


def _login_refused(mechanism: str) -> errors.ConnectionAccessRefused:
    """RabbitMQ's reply to any failed login: the reason goes to the log, not the client."""
    return errors.ConnectionAccessRefused(
        f"Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
    )
