"""The broker: vhosts, connections, authentication, storage engines and the group-commit writer."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from lavin.api import errors
from lavin.api.auth import AuthBackend, AuthContext, StoredUser, User
from lavin.api.printable import printable
from lavin.api.shovel import EndpointFailure, LocalBroker
from lavin.broker.access.access_control import AccessControl
from lavin.broker.links.endpoints import EndpointClasses
from lavin.broker.policy.global_parameters import GlobalParameters
from lavin.broker.routing.direct_reply import ReplyRegistry
from lavin.broker.runtime.alarms import ResourceAlarms
from lavin.broker.runtime.cluster_status import ClusterStatusSource
from lavin.broker.runtime.group_commit import GroupCommit
from lavin.broker.runtime.stats import MessageStats, ObservedConnection
from lavin.broker.vhost import VHost
from lavin.config import Config, StartupError
from lavin.plugin_registry import Registry
from lavin.storage.clean_shutdown import leave_clean_shutdown_mark, take_clean_shutdown_mark
from lavin.storage.toolkit import SegmentStorage

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 2.0


class ClientConnection(ObservedConnection, Protocol):
    """A client connection as the broker sees it (the protocol layer's); the statistics
    read its `snapshot`."""

    @property
    def user(self) -> User | None:
        """Who logged in on it; None before the login."""

    def close(self, reply_code: int, reply_text: str) -> None:
        """Send connection.close and wait briefly for close-ok."""

    def abort(self) -> None:
        """Drop the socket now."""

    def permissions_changed(self, user_name: str) -> None:
        """The permissions of `user_name` changed: a connection of that user asks its
        authorizer again from now on."""


class Broker(AuthContext):
    def __init__(self, config: Config, registry: Registry) -> None:
        self.config = config
        self.registry = registry
        self.loop = asyncio.get_event_loop()
        self.connections: set[ClientConnection] = set()
        self.vhosts: dict[str, VHost] = {}
        self.group_commit = GroupCommit(self.loop)
        self.replies = ReplyRegistry()
        self.alarms = ResourceAlarms(config)
        self.stats = MessageStats(config.collect_statistics_interval / 1000, self.connections, self.vhosts)
        # (protocol, address, port) of each listener, for the management API: set by the server.
        self.listeners: list[tuple[str, str, int]] = []
        # The cluster this broker leads, for the management API and the metrics: set by the
        # clustering node before the listeners open; None for a single node.
        self.cluster: ClusterStatusSource | None = None
        self.storage = SegmentStorage(config.segment_size)
        self.auth_backends: list[AuthBackend] = []
        for name in config.auth_backends:
            backend_class = registry.auth_backends.get(name)
            if backend_class is None:
                raise ValueError(f"unknown auth backend '{name}'")
            self.auth_backends.append(backend_class())
        self.shovel_endpoints = EndpointClasses(registry.shovel_sources, registry.shovel_destinations)
        # How links reach this broker (`amqp://` with no host): set by the server with the
        # listeners. Links start once it is (`start_links`).
        self.local: LocalBroker | None = None
        self.links_running = False
        # Names this broker's queues on federation upstreams: the node, and the data dir,
        # so that two brokers of one host federating from one upstream do not share a queue.
        data_dir_hash = hashlib.sha1(str(config.data_dir.resolve()).encode()).hexdigest()[:8]
        self.downstream_id = f"{self.alarms.node} {data_dir_hash}"
        self.access = AccessControl(config, self)
        self.global_parameters = GlobalParameters(config.data_dir)
        self.access.add_listener(self._user_changed)
        self._auth_settings: Mapping[str, Any] = MappingProxyType(
            {
                "default_user": config.default_user,
                "default_user_only_loopback": config.default_user_only_loopback,
            }
        )

    async def start(self) -> None:
        """Start every vhost, then hand the auth backends their settings."""
        self.loop = asyncio.get_running_loop()
        self.group_commit.loop = self.loop
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        closed_cleanly = take_clean_shutdown_mark(self.config.data_dir)
        self.storage.closed_cleanly = closed_cleanly and self.cluster is None
        self.global_parameters.load()
        try:
            self.access.load()  # starts the vhosts, which recover their queues
        finally:
            self.storage.closed_cleanly = False
        for backend in self.auth_backends:
            try:
                backend.configure(MappingProxyType(dict(self.config.plugin_settings.get(backend.name, {}))), self)
            except Exception as exc:
                raise StartupError(f"auth backend '{backend.name}' refused its settings: {exc}") from exc
        self.alarms.start(self.loop)
        self.stats.start(self.loop)

    def start_links(self, local: LocalBroker) -> None:
        """The broker takes connections: start every vhost's shovels."""
        self.local = local
        self.links_running = True
        for vhost in self.vhosts.values():
            vhost.links.start()

    def local_connections(self) -> LocalBroker:
        if self.local is None:
            raise EndpointFailure("the broker is not taking connections yet")
        return self.local

    async def shutdown(self) -> None:
        # Links first: their connections to this broker would otherwise fail and restart.
        self.links_running = False
        await asyncio.gather(*(vhost.links.stop() for vhost in self.vhosts.values()))
        self.alarms.stop()
        await self.stats.stop()
        for connection in list(self.connections):
            connection.close(320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
        deadline = self.loop.time() + SHUTDOWN_GRACE
        while self.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.abort()
        await self.group_commit.drain()
        for vhost in self.vhosts.values():
            vhost.close()
        if self.cluster is None:
            leave_clean_shutdown_mark(self.config.data_dir)
        for backend in self.auth_backends:
            try:
                await backend.close()
            except Exception:  # one broken backend must not keep the others from closing
                log.exception("auth backend '%s' failed to close", backend.name)

    async def authenticate(self, username: str, password: str, peer_host: str, mechanism: str) -> User:
        """Ask the backends in order; the first that knows the user decides."""
        user, _ = await self.login(username, password, peer_host, mechanism)
        return user

    async def login(
        self, username: str, password: str | None, peer_host: str, mechanism: str
    ) -> tuple[User, AuthBackend]:
        """`authenticate` (`authenticate_by_certificate` without a password: SASL EXTERNAL),
        and the backend that knew the user: it checks the user's new secrets
        (connection.update-secret)."""
        for backend in self.auth_backends:
            try:
                if password is None:
                    user = await backend.authenticate_by_certificate(username, peer_host)
                else:
                    user = await backend.authenticate(username, password, peer_host)
            except errors.AccessRefused as exc:
                log.warning(
                    "login of user '%s' from %s refused: %s", printable(username), peer_host, printable(exc.text)
                )
                raise login_refused(mechanism) from None
            if user is not None:
                return user, backend
        log.warning("login of unknown user '%s' from %s refused", printable(username), peer_host)
        raise login_refused(mechanism)

    def _user_changed(self, user_name: str) -> None:
        """Connections of a user whose tags or permissions changed ask again; those of a
        deleted user are closed, as RabbitMQ closes them."""
        if self.access.user(user_name) is not None:
            for connection in self.connections:
                connection.permissions_changed(user_name)
            return
        log.info("closing all connections of user '%s' because it is deleted", printable(user_name))
        forced = errors.ConnectionForced(f"user '{user_name}' is deleted")  # its reply_text fits a shortstr
        # By name, whichever backend logged them in: RabbitMQ tracks connections by user name.
        for connection in list(self.connections):
            if connection.user is not None and connection.user.name == user_name:
                connection.close(forced.reply_code, forced.reply_text)

    # ---- running vhosts (access.RunningVHosts) --------------------------------------------

    def start_vhost(self, name: str, max_connections: int, max_queues: int) -> None:
        vhost = VHost(self, name)
        vhost.set_limits(max_connections, max_queues)
        vhost.start()
        self.vhosts[name] = vhost
        if self.links_running:
            vhost.links.start()

    def stop_vhost(self, name: str) -> None:
        vhost = self.vhosts.pop(name)
        self._stop_links(vhost)
        vhost.close()

    def remove_vhost(self, name: str) -> Path:
        vhost = self.vhosts.pop(name)
        self._stop_links(vhost)
        forced = errors.ConnectionForced(f"vhost '{name}' is deleted")  # its reply_text fits a shortstr
        for connection in list(vhost.connections):
            connection.close(forced.reply_code, forced.reply_text)
        vhost.delete()
        return vhost.data_dir

    def _stop_links(self, vhost: VHost) -> None:
        self.loop.create_task(vhost.links.stop())

    def apply_vhost_limits(self, name: str, max_connections: int, max_queues: int) -> None:
        self.vhosts[name].set_limits(max_connections, max_queues)

    # ---- what auth backends may use (AuthContext) -----------------------------------------

    def stored_user(self, name: str) -> StoredUser | None:
        return self.access.user(name)

    def verify_password(self, user: StoredUser, password: str) -> bool:
        return self.access.verify_password(user, password)

    @property
    def settings(self) -> Mapping[str, Any]:
        return self._auth_settings


def login_refused(mechanism: str) -> errors.ConnectionAccessRefused:
    """RabbitMQ's reply to any failed login: the reason goes to the log, not the client."""
    return errors.ConnectionAccessRefused(
        f"Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
    )
