"""The in-sync replicas (ISR): the followers a publisher confirm waits for.

A follower joins once it is within JOIN_LAG seconds of the stream: from then on every
confirm waits for it too, and once it has acknowledged everything up to where the stream
stood when it joined, etcd's ISR names it (so every message confirmed before is on it: it
may be elected). A follower that disconnects or falls MAX_LAG seconds behind is first
struck from etcd's ISR, and only then stops holding confirms back: a follower that etcd
still names has every confirmed message. Without etcd nobody leaves the ISR, and confirms
wait (the lease runs out soon after, and the leader steps down).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from lavin.clustering.stream import ChangeStream

log = logging.getLogger(__name__)

MAX_LAG: Final = 3.0  # seconds behind the stream before a follower leaves the ISR
JOIN_LAG: Final = 0.5  # seconds behind the stream, at most, to join it
CHECK_INTERVAL: Final = 0.2

# Writes the ISR to etcd (this leader first, then its in-sync followers); False when etcd
# refused (this node is not the leader any more) or could not be reached.
PublishIsr = Callable[[list[str]], Awaitable[bool]]


class Replica(Protocol):
    node: str
    acknowledged: int  # stream position written and fsynced on the follower
    streaming: bool  # done with its full sync
    connected: bool
    in_sync: bool  # told to the follower, which then may stand for election


class InSyncReplicas:
    """A `GroupCommit.replication` barrier, and who is in sync."""

    def __init__(self, stream: ChangeStream, leader: str, publish: PublishIsr) -> None:
        self.stream = stream
        self.leader = leader
        self._publish = publish
        self.replicas: dict[str, Replica] = {}  # every connected follower, by node name
        self.members: dict[str, Replica] = {}  # those confirms wait for
        self.joining: dict[str, int] = {}  # member -> position it must reach before etcd names it
        self.published: tuple[str, ...] = (leader,)  # the ISR as etcd holds it
        self._waiters: deque[tuple[int, Callable[[], None]]] = deque()
        self._lock = asyncio.Lock()  # one etcd write at a time, in order

    @property
    def position(self) -> int:
        return self.stream.position

    def replicated(self) -> int:
        """The stream position every member has written."""
        members = self.members
        if not members:
            return self.stream.position
        return min(replica.acknowledged for replica in members.values())

    def when_replicated(self, position: int, callback: Callable[[], None]) -> None:
        if position <= self.replicated() and not self._waiters:
            callback()
        else:
            self._waiters.append((position, callback))

    def release(self) -> None:
        """Run the callbacks of every position all members have written."""
        replicated = self.replicated()
        waiters = self._waiters
        while waiters and waiters[0][0] <= replicated:
            waiters.popleft()[1]()
        self.stream.forget_before(min((r.acknowledged for r in self.replicas.values()), default=replicated))

    def connected(self, replica: Replica) -> None:
        """A follower logged in; an older link of the same node is struck by the next check."""
        self.replicas[replica.node] = replica

    def lag(self, replica: Replica) -> tuple[int, float]:
        """(bytes, seconds) behind the stream."""
        return self.stream.position - replica.acknowledged, self.stream.age(replica.acknowledged)

    async def watch(self) -> None:
        """Join and strike followers, for as long as this node leads."""
        while True:
            await asyncio.sleep(CHECK_INTERVAL)
            await self.check()

    async def check(self) -> None:
        for node, member in list(self.members.items()):
            current = self.replicas.get(node)
            if current is not member or not member.connected:
                await self._strike(node, "disconnected")
            elif self.stream.age(member.acknowledged) > MAX_LAG:
                await self._strike(node, f"more than {MAX_LAG:g} s behind")
        for node, replica in list(self.replicas.items()):
            if not replica.connected:
                if self.replicas.get(node) is replica:
                    del self.replicas[node]
                continue
            if node not in self.members and replica.streaming and self.stream.age(replica.acknowledged) < JOIN_LAG:
                self.members[node] = replica
                self.joining[node] = self.stream.position
        for node, position in list(self.joining.items()):
            joined = self.members.get(node)
            if joined is not None and joined.acknowledged >= position:
                await self._admit(node)

    async def _strike(self, node: str, why: str) -> None:
        async with self._lock:
            if node in self.published:
                wanted = [name for name in self.published if name != node]
                if not await self._publish(wanted):
                    return  # confirms keep waiting for it: it may still be elected
                self.published = tuple(wanted)
            member = self.members.pop(node, None)
            self.joining.pop(node, None)
            if member is not None:
                member.in_sync = False
            log.warning("Follower %s left the in-sync replicas: %s", node, why)
        self.release()

    async def _admit(self, node: str) -> None:
        async with self._lock:
            wanted = [*self.published, node]
            if not await self._publish(wanted):
                return
            self.published = tuple(wanted)
            del self.joining[node]
            self.members[node].in_sync = True
            log.info("Follower %s is in sync", node)
