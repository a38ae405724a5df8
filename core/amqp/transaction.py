"""A transactional channel's pending work: publishes and acks held until tx.commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lavin.amqp import codec
from lavin.api import errors
from lavin.api.message import Message
from lavin.broker.runtime.group_commit import PublishesSynced
from pamqp import commands

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel

# What a commit traces while the group commit traces publishes (see GroupCommit.trace_publish).
_SETTLEMENTS = 0
_PUBLISHES = 1


class Transaction:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._publishes: list[tuple[str, bool, Message]] = []
        # (delivery tag, multiple, requeue); requeue None means an ack
        self._settlements: list[tuple[int, bool, bool | None]] = []

    @property
    def publishes(self) -> int:
        """Publishes waiting for the commit."""
        return len(self._publishes)

    @property
    def settlements(self) -> int:
        """Acks, nacks and rejects waiting for the commit."""
        return len(self._settlements)

    def add_publish(self, exchange: str, mandatory: bool, message: Message) -> None:
        self._publishes.append((exchange, mandatory, message))

    def add_settlement(self, tag: int, multiple: bool, requeue: bool | None) -> None:
        self._settlements.append((tag, multiple, requeue))

    def commit(self) -> None:
        """Settle, then publish; commit-ok waits for the fsync when a publish needs one.

        A publish that could not be written fails the commit as RabbitMQ fails it: the
        channel closes with 406 "partial tx completion" (the rest stays committed)."""
        channel = self.channel
        group_commit = channel.connection.broker.group_commit
        settlements, self._settlements = self._settlements, []
        publishes, self._publishes = self._publishes, []
        for tag, multiple, requeue in settlements:
            if requeue is None:
                channel.ack_now(tag, multiple)
            else:
                channel.reject_now(tag, multiple, requeue)
        tracing = group_commit.tracing
        if tracing:  # what the settlements marked is not the publishes'
            group_commit.trace_publish(self, _SETTLEMENTS)
        needs_sync = False
        for exchange, mandatory, message in publishes:
            needs_sync |= channel.route(exchange, mandatory, message)
        if not needs_sync:
            channel.output.send(codec.method_frame(channel.id, commands.Tx.CommitOk()))
            return
        if tracing:
            group_commit.trace_publish(self, _PUBLISHES)
        group_commit.wait_for_publishes(self)

    def prepare_sync(self) -> PublishesSynced:
        return self._synced

    def _synced(self, unwritten: Sequence[int] | None) -> None:
        channel = self.channel
        if channel.closing:
            return
        if unwritten is None or _PUBLISHES in unwritten:
            channel.close_with_error(errors.PreconditionFailed("partial tx completion", 90, 20))
        else:
            channel.output.send(codec.method_frame(channel.id, commands.Tx.CommitOk()))

    def rollback(self) -> None:
        self._publishes.clear()
        self._settlements.clear()
