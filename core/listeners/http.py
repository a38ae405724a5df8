"""An HTTP listener: one aiohttp application (the management API and web UI, or the
Prometheus endpoint) on a TCP address, over TLS, on a unix socket, or any of these.
Port 0 takes any free port (`port` and `tls_port` then say which); None: no plain HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import http_exceptions, web
from lavin.api.printable import printable
from lavin.config import StartupError
from lavin.listeners.connection_gate import ConnectionGate
from lavin.listeners.prebound import PreboundSockets, ServingPort
from lavin.transport.tls import TlsCertificates
from lavin.transport.tls_stream import TlsServerProtocol
from lavin.transport.unix import bind_unix_socket, unlink_socket

log = logging.getLogger(__name__)

BACKLOG = 128


class OneLineBadRequests(logging.Filter):
    """aiohttp logs a request it cannot parse (oversized headers, a bad request line) with
    its traceback: a client's mistake is one warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, http_exceptions.HttpProcessingError):
            record.msg, record.args = "%s: %s", (record.getMessage(), printable(exc.message))
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


# The logger of aiohttp's request handlers on our listeners.
request_log = logging.getLogger(f"{__name__}.requests")
request_log.addFilter(OneLineBadRequests())


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int  # open at once, over all of the listener's addresses
    idle_timeout: float  # seconds for a request's headers to come in


ProtocolFactory = Callable[[], asyncio.Protocol]


class GatedSite(web.BaseSite):
    """One address of a listener whose every accepted socket passes the listener's
    connection gate; `tls` puts the broker's own TLS layer in front of HTTP, so that a
    certificate reload reaches new connections and failed handshakes are logged as on the
    AMQPS port."""

    def __init__(
        self,
        runner: web.AppRunner,
        name: str,
        gate: ConnectionGate,
        serve: Callable[[ProtocolFactory], Awaitable[ServingPort]],
        *,
        tls: TlsCertificates | None = None,
    ) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self._name = name
        self.gate = gate
        self.serve = serve
        self.tls = tls
        self.listening: ServingPort | None = None

    @property
    def name(self) -> str:
        return self._name

    async def start(self) -> None:
        await super().start()
        handler = self._runner.server
        assert handler is not None  # set up by the runner before its sites start
        gate, certificates = self.gate, self.tls
        if certificates is None:
            server = await self.serve(lambda: gate.admit(handler()))
        else:
            server = await self.serve(lambda: gate.admit(TlsServerProtocol(certificates, handler())))
        self._server = self.listening = server

    @property
    def port(self) -> int:
        """The TCP port listened on (port 0 takes any free one)."""
        assert self.listening is not None  # started
        return int(self.listening.sockets[0].getsockname()[1])


class HttpListener:
    def __init__(
        self,
        app: web.Application,
        bind: str,
        port: int | None,
        what: str,
        limits: HttpLimits,
        *,
        tls: tuple[int, TlsCertificates] | None = None,
        unix_path: Path | None = None,
        prebound: tuple[PreboundSockets, str] | None = None,
    ) -> None:
        """`prebound`: a cluster node's listener (and its name there), bound for the node's
        life, served instead of binding `port`."""
        self.prebound = prebound
        self.bind = bind
        self.port = port
        self.what = what
        self.tls = tls
        self.tls_port: int | None = None
        self.unix_path = unix_path
        self._unix_inode: int | None = None
        self.gate = ConnectionGate(what, limits.max_connections)
        # aiohttp closes a connection whose request headers are not all in within this
        # many seconds of its opening or of the previous response: an idle keep-alive, a
        # socket that never sends, and a slow-loris alike.
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, keepalive_timeout=limits.idle_timeout, logger=request_log
        )
        self._started = False

    async def start(self) -> None:
        await self._runner.setup()
        self._started = True
        try:
            await self._start_sites()
        except BaseException:
            await self.stop()
            raise

    async def _start_sites(self) -> None:
        loop = asyncio.get_running_loop()

        def on_tcp_port(port: int) -> Callable[[ProtocolFactory], Awaitable[ServingPort]]:
            return lambda factory: loop.create_server(factory, self.bind, port, backlog=BACKLOG, reuse_address=True)

        if self.port is not None:
            port = self.port
            serve = on_tcp_port(port) if self.prebound is None else self._attach(*self.prebound)
            site = self._site(f"http://{self.bind}:{port}", serve)
            await self._start_site(site, f"{self.bind}:{port}")
            self.port = site.port
            log.info("Listening on http://%s:%s (%s)", self.bind, self.port, self.what)
        if self.tls is not None:
            tls_port, certificates = self.tls
            tls_site = self._site(f"https://{self.bind}:{tls_port}", on_tcp_port(tls_port), tls=certificates)
            await self._start_site(tls_site, f"{self.bind}:{tls_port}")
            self.tls_port = tls_site.port
            log.info("Listening on https://%s:%s (%s)", self.bind, self.tls_port, self.what)
        if self.unix_path is not None:
            listening = bind_unix_socket(self.unix_path, f"{self.what} unix socket")
            self._unix_inode = os.stat(self.unix_path).st_ino
            unix_site = self._site(
                f"http://unix:{self.unix_path}:",
                lambda factory: loop.create_unix_server(factory, sock=listening, backlog=BACKLOG),
            )
            await unix_site.start()
            log.info("Listening on http+unix://%s (%s)", self.unix_path, self.what)

    @staticmethod
    def _attach(prebound: PreboundSockets, name: str) -> Callable[[ProtocolFactory], Awaitable[ServingPort]]:
        async def attach(factory: ProtocolFactory) -> ServingPort:
            attachment = prebound.attach(name, factory)
            if attachment is None:
                raise StartupError(f"no {name} listener was bound")
            return attachment

        return attach

    def _site(
        self,
        name: str,
        serve: Callable[[ProtocolFactory], Awaitable[ServingPort]],
        *,
        tls: TlsCertificates | None = None,
    ) -> GatedSite:
        return GatedSite(self._runner, name, self.gate, serve, tls=tls)

    async def _start_site(self, site: web.BaseSite, address: str) -> None:
        try:
            await site.start()
        except OSError as exc:
            raise StartupError(f"cannot listen on {address} ({self.what}): {exc}") from exc

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._runner.cleanup()
        if self.unix_path is not None and self._unix_inode is not None:
            unlink_socket(self.unix_path, self._unix_inode)
            self._unix_inode = None
