"""The write side of one client connection, and the reasons its socket is not read.

Frames are queued and go out in one write per loop tick. The two sides are one object
because output is itself a reason to stop reading: a client that does not read what it is
sent must not be able to ask for more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

# Output beyond this many bytes waiting for the socket pauses the connection: deliveries
# stop and its own input is not read, so nothing it asks for can pile up in memory.
WRITE_BUFFER_HIGH: Final = 4 * 1024 * 1024
WRITE_BUFFER_LOW: Final = 1024 * 1024

# Why the client's socket is not read; reading resumes once no reason is left.
PAUSED_FOR_LOGIN: Final = 1  # the auth backends are asked, or a refused login waits for its answer
PAUSED_FOR_FLOW: Final = 2  # a queue it publishes to holds it (PublisherFlow)
PAUSED_FOR_OUTPUT: Final = 4  # what we write to it is over the high-water mark: it does not read
PAUSED_FOR_ALARM: Final = 8  # a resource alarm blocks it as a publisher
PAUSED_FOR_AUTHORIZATION: Final = 16  # a frame waits for an authorizer's answer (NeedsAuthorization)


def _nothing() -> None:
    pass


class Output:
    """What a connection writes, buffered until the end of the loop tick, and whether it
    reads. Channels and consumers hold it and call `send` themselves."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None  # from connection_made on
        self.writable = True  # False while more than WRITE_BUFFER_HIGH waits for the socket
        self.reading_paused_by = 0  # PAUSED_FOR_* bits
        self.sent_since_tick = False  # written since the last heartbeat tick
        self.send_oct = 0  # bytes written (statistics: one addition per socket write)
        self.send_cnt = 0  # socket writes
        self._out: list[bytes | memoryview] = []
        self._gather = False  # _out holds a large delivery's pieces: written without a join
        self._queued = 0  # bytes in _out
        self._tick_full = False  # _out holds more than the high-water mark: deliveries wait
        self._transport_full = False  # the transport's own high-water mark
        self.on_writable: Callable[[], None] = _nothing  # the connection resumes its deliveries
        self._flush_scheduled = False

    def attach(self, transport: asyncio.Transport) -> None:
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        self.transport = transport

    # ---- writing -------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue bytes for the socket; one write per loop tick carries them all."""
        self._out.append(data)
        self._queued += len(data)
        if self._queued > WRITE_BUFFER_HIGH and not self._tick_full:
            self._fill_tick()
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def send_parts(self, parts: list[bytes | memoryview]) -> None:
        """Queue a large delivery's pieces: they go out in one gathered write, not joined."""
        self._out += parts
        self._gather = True
        self._queued += sum(len(part) for part in parts)
        if self._queued > WRITE_BUFFER_HIGH and not self._tick_full:
            self._fill_tick()
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def _fill_tick(self) -> None:
        """A tick's frames reached the high-water mark: a queue's batch of deliveries stops
        here, rather than at the end of the batch (256 deliveries of any size)."""
        self._tick_full = True
        self._update_writable()

    def flush(self) -> None:
        """Write what is queued now."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            out.clear()
            self._queued = 0
            return
        self.sent_since_tick = True
        self.send_cnt += 1
        self.send_oct += self._queued
        self._queued = 0
        if self._gather:
            self._gather = False
            transport.writelines(out)
            self._out = []
        else:
            data = b"".join(out)
            out.clear()
            transport.write(data)
        if self._tick_full:  # written: the transport's own mark says whether it may go on
            self._tick_full = False
            self._update_writable()

    def close(self) -> None:
        """Write what is queued, then close the socket."""
        self.flush()
        if self.transport is not None:
            self.transport.close()

    # ---- the transport's flow control ----------------------------------------------------

    def pause_writing(self) -> None:
        self._transport_full = True
        self._update_writable()

    def resume_writing(self) -> None:
        self._transport_full = False
        self._update_writable()

    def _update_writable(self) -> None:
        writable = not (self._transport_full or self._tick_full)
        if writable == self.writable:
            return
        self.writable = writable
        if writable:
            self.resume_reading(PAUSED_FOR_OUTPUT)
            self.on_writable()
        else:
            self.pause_reading(PAUSED_FOR_OUTPUT)

    # ---- reading -------------------------------------------------------------------------

    def pause_reading(self, reason: int) -> None:
        if not self.reading_paused_by and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self.reading_paused_by |= reason

    def resume_reading(self, reason: int) -> None:
        if not self.reading_paused_by & reason:
            return
        self.reading_paused_by &= ~reason
        if not self.reading_paused_by and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def pause_for_flow(self) -> None:
        """PublisherFlow's pause: a queue published to holds this connection."""
        self.pause_reading(PAUSED_FOR_FLOW)

    def resume_for_flow(self) -> None:
        self.resume_reading(PAUSED_FOR_FLOW)
