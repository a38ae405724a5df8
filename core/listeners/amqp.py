"""The AMQP listeners: plain TCP, TLS (AMQPS) and a unix socket, each with the PROXY
protocol where it is allowed. Plain TCP without the PROXY protocol hands the socket
straight to the AMQP connection: nothing sits between them."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from lavin.amqp.connection import Connection
from lavin.broker.broker import Broker
from lavin.config import DISABLED_PORT, Config, StartupError
from lavin.listeners.prebound import PreboundSockets, ServingPort
from lavin.transport.proxy_protocol import ProxyHeaderReader, TrustedSources
from lavin.transport.tls import TlsCertificates
from lavin.transport.tls_stream import TlsServerProtocol
from lavin.transport.unix import bind_unix_socket, unlink_socket

log = logging.getLogger(__name__)

ProtocolFactory = Callable[[], asyncio.Protocol]
RABBITMQ_PROTOCOL_NAMES = {"amqps": "amqp/ssl"}  # as the API's listeners name them


class AmqpListeners:
    def __init__(
        self,
        broker: Broker,
        config: Config,
        certificates: TlsCertificates | None,
        prebound: PreboundSockets | None = None,
    ) -> None:
        """`prebound`: a cluster node's listeners, bound for its life, served instead of
        binding (by scheme: `amqp`)."""
        self.broker = broker
        self.prebound = prebound
        self.config = config
        self.certificates = certificates
        self.servers: list[ServingPort] = []
        self.tcp: ServingPort | None = None
        self.tls: ServingPort | None = None
        self._unix_socket: tuple[Path, int] | None = None  # path and inode, to remove it on close

    def connection(self) -> Connection:
        return Connection(self.broker)

    async def start(self) -> None:
        """Open every configured listener; if one cannot open, close those that did."""
        try:
            await self._open_all()
        except BaseException:
            self.close()
            raise

    async def _open_all(self) -> None:
        config = self.config
        proxied = TrustedSources(config.proxy_protocol_trusted_sources) if config.tcp_proxy_protocol else None
        self.tcp = await self._listen("amqp", config.amqp_port, self._with_proxy(self.connection, proxied))
        if self.certificates is not None and config.amqps_port != DISABLED_PORT:
            certificates = self.certificates
            over_tls: ProtocolFactory = lambda: TlsServerProtocol(certificates, self.connection())  # noqa: E731
            self.tls = await self._listen("amqps", config.amqps_port, self._with_proxy(over_tls, proxied))
        elif config.amqps_port != DISABLED_PORT:
            log.info("AMQPS listener off: no tls_cert configured")
        if config.amqp_unix_path is not None:
            await self._listen_unix(config.amqp_unix_path)

    @staticmethod
    def _with_proxy(make: ProtocolFactory, trusted: TrustedSources | None) -> ProtocolFactory:
        if trusted is None:
            return make
        return lambda: ProxyHeaderReader(make, trusted)

    async def _listen(self, scheme: str, port: int, factory: ProtocolFactory) -> ServingPort:
        loop = asyncio.get_running_loop()
        bind = self.config.bind
        server: ServingPort | None = None if self.prebound is None else self.prebound.attach(scheme, factory)
        if server is None:
            try:
                server = await loop.create_server(factory, bind, port, reuse_address=True)
            except OSError as exc:
                raise StartupError(f"cannot listen on {bind}:{port} ({scheme}): {exc}") from exc
        self.servers.append(server)
        for listening_socket in server.sockets:
            host, bound_port = listening_socket.getsockname()[:2]
            log.info("Listening on %s://%s:%s", scheme, host, bound_port)
            self.broker.listeners.append((RABBITMQ_PROTOCOL_NAMES.get(scheme, scheme), host, bound_port))
        return server

    async def _listen_unix(self, path: Path) -> None:
        """A unix socket's clients are local processes: they count as loopback clients and
        may send a PROXY header (as on LavinMQ)."""
        listening = bind_unix_socket(path, "AMQP unix socket")
        self._unix_socket = (path, os.stat(path).st_ino)
        everyone = TrustedSources((), everyone=True)
        server = await asyncio.get_running_loop().create_unix_server(
            lambda: ProxyHeaderReader(self.connection, everyone), sock=listening
        )
        self.servers.append(server)
        log.info("Listening on amqp+unix://%s", path)

    @property
    def amqp_port(self) -> int:
        assert self.tcp is not None
        port: int = self.tcp.sockets[0].getsockname()[1]
        return port

    def close(self) -> None:
        for server in self.servers:
            server.close()
        if self._unix_socket is not None:
            unlink_socket(*self._unix_socket)
            self._unix_socket = None

    async def wait_closed(self) -> None:
        for server in self.servers:
            await server.wait_closed()
