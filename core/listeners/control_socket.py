"""The control socket: the management API on a unix socket that only the broker's own user
(and root) may open, as LavinMQ's `control_unix_path`. Whoever can open it is trusted, so
it asks for no password; `lavin ctl` talks to it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from aiohttp import web
from lavin.transport.unix import bind_unix_socket, unlink_socket

log = logging.getLogger(__name__)

SOCKET_MODE = 0o600
BACKLOG = 16
# A unix socket's path is at most 107 bytes (sun_path, with its terminating NUL).
MAX_PATH_BYTES = 107


class ControlSocket:
    """The management API on the control socket. A path set on purpose (`configured`) that
    is too long for a unix socket stops start-up; the default one, in a deep data dir, only
    leaves the broker without a control socket, with a warning."""

    def __init__(self, app: web.Application, path: Path, *, configured: bool) -> None:
        self.path = path
        self.configured = configured
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._inode: int | None = None

    async def start(self) -> None:
        if len(os.fsencode(self.path)) > MAX_PATH_BYTES and not self.configured:
            log.warning(
                "No control socket (lavin ctl): %s is longer than %d bytes; set [main] control_unix_path",
                self.path,
                MAX_PATH_BYTES,
            )
            return
        listening = bind_unix_socket(self.path, "control socket", SOCKET_MODE)
        self._inode = os.stat(self.path).st_ino
        await self._runner.setup()
        await web.SockSite(self._runner, listening, backlog=BACKLOG).start()
        log.info("Control socket at %s", self.path)

    async def stop(self) -> None:
        if self._inode is None:
            return
        await self._runner.cleanup()
        unlink_socket(self.path, self._inode)
