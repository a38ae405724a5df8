"""Publisher confirms of one channel: sequence numbers, nacks, and waiting for the disk.

A confirm for a persistent message in a durable queue goes out only after the group
commit's fsync covered it; a publish that went into a store that could not write it, or
whose fsync failed, is nacked. Confirms are sent at the end of each socket read,
cumulative (`multiple`) where possible.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from lavin.amqp import codec
from lavin.broker.queues.queue import NEEDS_SYNC, REJECTED
from lavin.broker.runtime.group_commit import PublishesSynced

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel


class PublisherConfirms:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.group_commit = channel.connection.broker.group_commit
        self.publish_seq = 0
        self._confirmed = 0
        self._nacks: list[int] = []  # ascending, all above _confirmed
        self._sync_needed_upto = 0
        self._synced_upto = 0
        self._sync_registered = False

    @property
    def confirmed(self) -> int:
        """Publishes confirmed or nacked so far (the channel's `confirm` statistic)."""
        return self._confirmed

    @property
    def unconfirmed(self) -> int:
        """Publishes neither confirmed nor nacked yet."""
        return self.publish_seq - self._confirmed

    def published(self, status: int) -> None:
        """Count one publish with its VHost.publish status."""
        self.publish_seq += 1
        if status & REJECTED:
            self._nacks.append(self.publish_seq)
        if status & NEEDS_SYNC:
            self._sync_needed_upto = self.publish_seq
            if not self._sync_registered:
                self._sync_registered = True
                self.group_commit.wait_for_publishes(self)
        if self.group_commit.tracing:
            self.group_commit.trace_publish(self, self.publish_seq)

    def prepare_sync(self) -> PublishesSynced:
        self._sync_registered = False
        seq = self.publish_seq
        return lambda unwritten: self._on_synced(seq, unwritten)

    def _on_synced(self, seq: int, unwritten: Sequence[int] | None) -> None:
        channel = self.channel
        if channel.closing or channel.output.transport is None:
            return
        if unwritten is None:
            self._nack(range(max(self._confirmed, self._synced_upto) + 1, seq + 1))
        elif unwritten:
            self._nack(unwritten)
        self._synced_upto = max(self._synced_upto, seq)
        self.send_due()

    def _nack(self, seqs: Iterable[int]) -> None:
        confirmed = self._confirmed
        self._nacks = sorted({*self._nacks, *[seq for seq in seqs if seq > confirmed]})

    def send_due(self) -> None:
        """Send the confirms that may go out now, cumulative where possible."""
        target = self.publish_seq if self._sync_needed_upto <= self._synced_upto else self._synced_upto
        if target <= self._confirmed:
            return
        channel_id = self.channel.id
        send = self.channel.output.send
        nacks = self._nacks
        while nacks and nacks[0] <= target:
            nacked = nacks.pop(0)
            if nacked - 1 > self._confirmed:
                send(codec.confirm_frame(channel_id, nacked - 1, nacked - 1 - self._confirmed > 1))
            send(codec.confirm_frame(channel_id, nacked, False, ack=False))
            self._confirmed = nacked
        if target > self._confirmed:
            send(codec.confirm_frame(channel_id, target, target - self._confirmed > 1))
            self._confirmed = target
