"""A cap on one HTTP listener's open connections: past it, a new socket is closed as soon
as it is accepted, so that idle or slow clients cannot take every file descriptor the
broker has (AMQP connections, queue files, the control socket). Refusals are logged once
per interval, with how many there were, rather than once per socket."""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Final

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL: Final = 60.0  # seconds
# Each HTTP listener may hold an eighth of the open-file limit: with the quarter the queue
# files may hold (storage/segments/open_files.py), half stays for AMQP connections, the
# control socket and the broker's own files.
DESCRIPTOR_SHARE: Final = 8


def capped_to_descriptors(configured: int) -> int:
    """`configured` (http_max_connections), lowered to a listener's share of the open-file
    limit, which start-up has raised as far as the system allows."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or configured <= soft // DESCRIPTOR_SHARE:
        return configured
    share = max(1, soft // DESCRIPTOR_SHARE)
    log.warning(
        "http_max_connections %d lowered to %d per HTTP listener, an eighth of the open file limit (%d)",
        configured,
        share,
        soft,
    )
    return share


class ConnectionGate:
    """One listener's count of open connections against its cap (over all its addresses)."""

    def __init__(self, what: str, limit: int) -> None:
        self.what = what
        self.limit = limit
        self.open = 0
        self._refused_unlogged = 0
        self._next_log_at = 0.0

    def admit(self, protocol: asyncio.Protocol) -> asyncio.Protocol:
        """The protocol for a socket just accepted: `protocol` counted against the cap, or
        one that closes the socket when the listener is full."""
        if self.open >= self.limit:
            self._note_refusal()
            return RefusedConnection()
        # Counted from here rather than from connection_made, which comes a loop turn
        # later: a burst of accepts must not all slip under the cap.
        self.open += 1
        return CountedConnection(self, protocol)

    def _note_refusal(self) -> None:
        self._refused_unlogged += 1
        now = time.monotonic()
        if now >= self._next_log_at:
            log.warning(
                "Refused %d connection(s) to the %s: %d are open, its limit (http_max_connections)",
                self._refused_unlogged,
                self.what,
                self.open,
            )
            self._refused_unlogged = 0
            self._next_log_at = now + REFUSAL_LOG_INTERVAL


class RefusedConnection(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class CountedConnection(asyncio.Protocol):
    """Passes every event on to the listener's own protocol; holds one place in the gate
    from accept to close."""

    def __init__(self, gate: ConnectionGate, inner: asyncio.Protocol) -> None:
        self.gate = gate
        self.inner = inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.open -= 1
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()
