"""An HTTP listener: one aiohttp application (the management API and web UI, or the
Prometheus endpoint) on a TCP address, over TLS, on a unix socket, or any of these.
Port 0 takes any free port (`port` and `tls_port` then say which); None: no plain HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from aiohttp import web
from lavin.config import StartupError
from lavin.transport.tls import TlsCertificates
from lavin.transport.tls_stream import TlsServerProtocol
from lavin.transport.unix import bind_unix_socket, unlink_socket

log = logging.getLogger(__name__)

BACKLOG = 128


class TlsSite(web.BaseSite):
    """HTTPS with the broker's own TLS layer, so that a certificate reload reaches new
    connections and failed handshakes are logged as on the AMQPS port."""

    def __init__(self, runner: web.AppRunner, bind: str, port: int, certificates: TlsCertificates) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self.bind = bind
        self.port = port
        self.certificates = certificates

    @property
    def name(self) -> str:
        return f"https://{self.bind}:{self.port}"

    async def start(self) -> None:
        await super().start()
        handler = self._runner.server
        assert handler is not None  # set up by the runner before its sites start
        certificates = self.certificates
        self._server = server = await asyncio.get_running_loop().create_server(
            lambda: TlsServerProtocol(certificates, handler()),
            self.bind,
            self.port,
            backlog=self._backlog,
            reuse_address=True,
        )
        self.port = server.sockets[0].getsockname()[1]


class HttpListener:
    def __init__(
        self,
        app: web.Application,
        bind: str,
        port: int | None,
        what: str,
        *,
        tls: tuple[int, TlsCertificates] | None = None,
        unix_path: Path | None = None,
    ) -> None:
        self.bind = bind
        self.port = port
        self.what = what
        self.tls = tls
        self.tls_port: int | None = None
        self.unix_path = unix_path
        self._unix_inode: int | None = None
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
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
        if self.port is not None:
            site = web.TCPSite(self._runner, self.bind, self.port, backlog=BACKLOG, reuse_address=True)
            await self._start_site(site, f"{self.bind}:{self.port}")
            host, self.port = self._runner.addresses[0][:2]
            log.info("Listening on http://%s:%s (%s)", host, self.port, self.what)
        if self.tls is not None:
            port, certificates = self.tls
            tls_site = TlsSite(self._runner, self.bind, port, certificates)
            await self._start_site(tls_site, f"{self.bind}:{port}")
            self.tls_port = tls_site.port
            log.info("Listening on https://%s:%s (%s)", self.bind, self.tls_port, self.what)
        if self.unix_path is not None:
            listening = bind_unix_socket(self.unix_path, f"{self.what} unix socket")
            self._unix_inode = os.stat(self.unix_path).st_ino
            await web.SockSite(self._runner, listening, backlog=BACKLOG).start()
            log.info("Listening on http+unix://%s (%s)", self.unix_path, self.what)

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
