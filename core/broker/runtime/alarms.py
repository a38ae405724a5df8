"""Memory and disk alarms, as RabbitMQ raises them.

Every second the broker compares its resident memory with the high watermark, and the free
space of the data directory's file system with the free-disk limit. While either alarm is
on, a connection that sends message content is blocked: it is told with
`connection.blocked` (when it advertised the capability) and is not read until every alarm
has cleared, when it gets `connection.unblocked`. Connections that only consume keep going,
so that queues can drain.

The bytes of messages still being received count toward memory at once: between two
samples a client streaming large bodies could otherwise take the broker gigabytes past the
watermark.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import socket
from typing import Final, Protocol

from lavin.broker.runtime.allocator import release_free_memory
from lavin.config import Config, MiB

log = logging.getLogger(__name__)

CHECK_INTERVAL: Final = 1.0  # seconds between samples of memory and free disk space
MEMORY: Final = "memory"
DISK: Final = "disk"
_PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE")
_STATM_MAX_BYTES: Final = 256  # seven counts of pages


class BlockedPublisher(Protocol):
    """A connection an alarm blocked (the protocol layer's)."""

    def unblock(self) -> None:
        """Every alarm has cleared: tell the client and read from it again."""


def resident_memory() -> int:
    """Bytes of this process's memory in RAM (RabbitMQ's `rss` calculation strategy)."""
    return int(os.pread(_statm(), _STATM_MAX_BYTES, 0).split()[1]) * _PAGE_SIZE


@functools.cache
def _statm() -> int:
    """/proc/self/statm, opened once: a broker whose clients took every descriptor it may
    open still samples its memory, and the memory alarm stays armed."""
    return os.open("/proc/self/statm", os.O_RDONLY)


def total_memory() -> int:
    """Bytes of RAM in the machine."""
    return os.sysconf("SC_PHYS_PAGES") * _PAGE_SIZE


def memory_high_watermark(config: Config) -> int:
    """The memory alarm's threshold in bytes."""
    if config.vm_memory_high_watermark_absolute is not None:
        return config.vm_memory_high_watermark_absolute
    return int(config.vm_memory_high_watermark * total_memory())


class ResourceAlarms:
    """The broker's alarms, and the connections they blocked."""

    def __init__(self, config: Config) -> None:
        self.memory_limit = memory_high_watermark(config)
        self.disk_free_limit = config.disk_free_limit
        self.data_dir = config.data_dir
        self.node = f"lavin@{socket.gethostname()}"
        self.active: set[str] = set()  # the alarms that are on
        self.partial_bodies = 0  # bytes of message bodies being received, on every connection
        # Bytes of bodies allocated whole but not received yet: not resident until they are
        # written (the buffers are not zeroed), but as good as used.
        self.unfilled_bodies = 0
        self._sampled_memory = 0  # resident memory at the last check
        self._sampled_partial = 0  # partial_bodies then
        self._blocked: set[BlockedPublisher] = set()
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        total = total_memory()
        log.info(
            "Memory high watermark set to %d MiB (%d bytes) of %d MiB (%d bytes) total",
            self.memory_limit // MiB,
            self.memory_limit,
            total // MiB,
            total,
        )
        log.info("Disk free limit set to %d MB", self.disk_free_limit // 1_000_000)
        self._check(loop)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def reason(self) -> str:
        """RabbitMQ's connection.blocked reason: `low on memory`, `low on disk` or both."""
        return "low on " + " & ".join(alarm for alarm in (MEMORY, DISK) if alarm in self.active)

    # ---- blocked publishers --------------------------------------------------------------

    def hold(self, publisher: BlockedPublisher) -> None:
        """`publisher` stopped reading because of an alarm: unblock it once all have cleared."""
        self._blocked.add(publisher)

    def release(self, publisher: BlockedPublisher) -> None:
        """`publisher` went away."""
        self._blocked.discard(publisher)

    # ---- messages being received ---------------------------------------------------------

    def body_grew(self, size: int) -> None:
        """`size` more bytes of a message body are held while the rest is received."""
        self.partial_bodies += size
        if MEMORY in self.active:
            return
        estimate = self._estimate()
        if estimate > self.memory_limit:
            self._set(MEMORY, f"memory used about {estimate}, allowed {self.memory_limit}")

    def has_room_for(self, size: int) -> bool:
        """Whether `size` more bytes of bodies stay under the memory watermark."""
        return self._estimate() + size <= self.memory_limit

    def _estimate(self) -> int:
        """Memory used now: the last sample, plus what partial bodies added since."""
        return self._sampled_memory + self.partial_bodies - self._sampled_partial

    def body_released(self, size: int) -> None:
        """A body of `size` bytes was completed or dropped."""
        self.partial_bodies -= size

    # ---- checks --------------------------------------------------------------------------

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(CHECK_INTERVAL, self._check, loop)
        release_free_memory()  # what the tuned allocator keeps for reuse does not count
        used = resident_memory() + self.unfilled_bodies
        self._sampled_memory = used
        self._sampled_partial = self.partial_bodies
        self._update(MEMORY, used > self.memory_limit, f"memory used {used}, allowed {self.memory_limit}")
        free = shutil.disk_usage(self.data_dir).free
        self._update(DISK, free < self.disk_free_limit, f"free bytes {free}, limit {self.disk_free_limit}")

    def _update(self, alarm: str, over: bool, detail: str) -> None:
        if over and alarm not in self.active:
            self._set(alarm, detail)
        elif not over and alarm in self.active:
            self._clear(alarm, detail)

    def _set(self, alarm: str, detail: str) -> None:
        self.active.add(alarm)
        log.warning(
            "%s resource limit alarm set on node %s (%s). Publishers will be blocked until this alarm clears",
            alarm,
            self.node,
            detail,
        )

    def _clear(self, alarm: str, detail: str) -> None:
        self.active.discard(alarm)
        log.warning("%s resource limit alarm cleared on node %s (%s)", alarm, self.node, detail)
        if self.active:
            return
        blocked, self._blocked = self._blocked, set()
        for publisher in blocked:
            publisher.unblock()
