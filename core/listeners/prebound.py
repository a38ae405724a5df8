"""Listening sockets bound once for the life of the process: a cluster node keeps its AMQP
and HTTP ports while it turns from follower to leader and back, and connections that come
in between wait in the kernel's backlog instead of being refused."""

from __future__ import annotations

import os
import socket
from typing import Final

BACKLOG: Final = 512


class PreboundSockets:
    def __init__(self) -> None:
        self._sockets: dict[str, socket.socket] = {}

    def bind(self, name: str, host: str, port: int) -> int:
        """Listen on host:port (0: any free port) under `name`; the port bound."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listening = socket.socket(family, socket.SOCK_STREAM)
        try:
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind((host, port))
            listening.listen(BACKLOG)
        except OSError:
            listening.close()
            raise
        listening.setblocking(False)
        self._sockets[name] = listening
        return int(listening.getsockname()[1])

    def take(self, name: str) -> socket.socket | None:
        """A duplicate of the socket bound as `name`, for a server that closes it when it
        stops; the original stays open, and so does the port."""
        listening = self._sockets.get(name)
        if listening is None:
            return None
        duplicate = socket.socket(fileno=os.dup(listening.fileno()))
        duplicate.setblocking(False)
        return duplicate

    def port(self, name: str) -> int | None:
        listening = self._sockets.get(name)
        return None if listening is None else int(listening.getsockname()[1])

    def close(self) -> None:
        for listening in self._sockets.values():
            listening.close()
        self._sockets.clear()
