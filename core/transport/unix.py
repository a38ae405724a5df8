"""Unix domain socket listeners: binding the path (taking over a stale socket file, never
anything else) and removing it again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
from pathlib import Path
from typing import Any

from lavin.config import StartupError

# How a unix socket's client is named, having no address: a local one, so that the
# loopback-only rule lets it in (LavinMQ does the same).
UNIX_CLIENT: tuple[str, int] = ("127.0.0.1", 0)


def client_address(transport: asyncio.BaseTransport) -> tuple[Any, ...]:
    """The client's (host, port), UNIX_CLIENT for a unix socket's."""
    peername = transport.get_extra_info("peername")
    return peername if isinstance(peername, tuple) else UNIX_CLIENT


def local_address(transport: asyncio.BaseTransport) -> tuple[Any, ...]:
    """The listener's (host, port); (path, 0) for a unix socket."""
    sockname = transport.get_extra_info("sockname")
    return sockname if isinstance(sockname, tuple) else (sockname, 0)


def describe(address: tuple[Any, ...]) -> str:
    return f"{address[0]}:{address[1]}"


def bind_unix_socket(path: Path, what: str, mode: int | None = None) -> socket.socket:
    """A unix socket bound at `path`; with `mode`, it has that mode from the start (no
    moment at which others could connect). A socket file nobody listens on is replaced."""
    remove_stale_socket(path, what)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous_umask = os.umask(0o777 & ~mode) if mode is not None else None
    try:
        listening.bind(str(path))
    except OSError as exc:
        listening.close()
        raise StartupError(f"cannot create {what} {path}: {exc.strerror or exc}") from None
    finally:
        if previous_umask is not None:
            os.umask(previous_umask)
    if mode is not None:
        os.chmod(path, mode)
    return listening


def remove_stale_socket(path: Path, what: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise StartupError(f"{what} path {path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody listens: left by a broker that died
            return
    raise StartupError(f"{what} {path} is in use by another process")


def unlink_socket(path: Path, inode: int) -> None:
    """Remove our socket file; another broker may have taken the path since."""
    with contextlib.suppress(FileNotFoundError):
        if os.stat(path).st_ino == inode:
            path.unlink()
