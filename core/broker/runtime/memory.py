"""What of the process's resident memory Lavin can attribute: one reading for
`/api/nodes/{node}/memory` (and `lavin ctl memory_breakdown`) and `/metrics/memory-breakdown`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lavin.broker.runtime.alarms import ResourceAlarms, resident_memory
from lavin.broker.runtime.stats import ConnectionSnapshot
from lavin.storage.segments.decoded_window import window_bytes
from lavin.storage.segments.segment_store import resident_bytes


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes: `queues` are the queues' records held in memory (non-durable ones' not written
    yet) and the decoded messages kept; `connection_readers` message bodies being received;
    `connection_writers` bytes waiting in the sockets' write buffers; `resident` the whole."""

    queues: int
    connection_readers: int
    connection_writers: int
    resident: int

    @property
    def other(self) -> int:
        """The rest: the interpreter, indexes, and buffers Lavin does not count."""
        return max(self.resident - self.queues - self.connection_readers - self.connection_writers, 0)


def memory_breakdown(alarms: ResourceAlarms, connections: Iterable[ConnectionSnapshot]) -> MemoryBreakdown:
    return MemoryBreakdown(
        queues=resident_bytes() + window_bytes(),
        connection_readers=alarms.partial_bodies,
        connection_writers=sum(connection.send_pend for connection in connections),
        resident=resident_memory(),
    )
