"""An HTTP listener on a TCP address: the management API and web UI, or the Prometheus
endpoint. Port 0 takes any free port (`port` then says which)."""

from __future__ import annotations

import logging

from aiohttp import web
from lavin.config import StartupError

log = logging.getLogger(__name__)

BACKLOG = 128


class HttpListener:
    def __init__(self, app: web.Application, bind: str, port: int, what: str) -> None:
        self.bind = bind
        self.port = port
        self.what = what
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._started = False

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.bind, self.port, backlog=BACKLOG, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise StartupError(f"cannot listen on {self.bind}:{self.port} ({self.what}): {exc}") from exc
        self._started = True
        for address in self._runner.addresses:
            host, self.port = address[:2]
            log.info("Listening on http://%s:%s (%s)", host, self.port, self.what)

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._runner.cleanup()
