"""The control socket: the management API on a unix socket that only the broker's own user
(and root) may open, as LavinMQ's `control_unix_path`. Whoever can open it is trusted, so
it asks for no password; `lavin ctl` talks to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
from pathlib import Path

from aiohttp import web
from lavin.broker.broker import Broker
from lavin.config import StartupError
from lavin.management.app import build_app

log = logging.getLogger(__name__)

SOCKET_MODE = 0o600
BACKLOG = 16
# A unix socket's path is at most 107 bytes (sun_path, with its terminating NUL).
MAX_PATH_BYTES = 107


class ControlSocket:
    """The management API on the control socket. A path set on purpose (`configured`) that
    is too long for a unix socket stops start-up; the default one, in a deep data dir, only
    leaves the broker without a control socket, with a warning."""

    def __init__(self, broker: Broker, path: Path, *, configured: bool) -> None:
        self.path = path
        self.configured = configured
        self._runner = web.AppRunner(build_app(broker, trusted=True), access_log=None, handle_signals=False)
        self._inode: int | None = None

    async def start(self) -> None:
        if len(os.fsencode(self.path)) > MAX_PATH_BYTES and not self.configured:
            log.warning(
                "No control socket (lavin ctl): %s is longer than %d bytes; set [main] control_unix_path",
                self.path,
                MAX_PATH_BYTES,
            )
            return
        listening = bind_private_socket(self.path)
        self._inode = os.stat(self.path).st_ino
        await self._runner.setup()
        await web.SockSite(self._runner, listening, backlog=BACKLOG).start()
        log.info("Control socket at %s", self.path)

    async def stop(self) -> None:
        if self._inode is None:
            return
        await self._runner.cleanup()
        # Only our own file: another broker may have taken the path since.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_ino == self._inode:
                self.path.unlink()


def bind_private_socket(path: Path) -> socket.socket:
    """A unix socket bound at `path` with mode 0600 from the start (no moment at which
    others could connect); a socket file left by a broker that died is replaced."""
    remove_stale_socket(path)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous_umask = os.umask(0o777 & ~SOCKET_MODE)
    try:
        listening.bind(str(path))
    except OSError as exc:
        listening.close()
        raise StartupError(f"cannot create control socket {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(previous_umask)
    os.chmod(path, SOCKET_MODE)
    return listening


def remove_stale_socket(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise StartupError(f"control socket path {path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody listens: left by a broker that died
            return
    raise StartupError(f"control socket {path} is in use by another process")
