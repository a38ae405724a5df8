"""A transactional channel's pending work: publishes and acks held until tx.commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lavin.amqp import codec
from lavin.api.message import Message
from pamqp import commands

if TYPE_CHECKING:
    from lavin.amqp.channel import Channel


class Transaction:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._publishes: list[tuple[str, bool, Message]] = []
        # (delivery tag, multiple, requeue); requeue None means an ack
        self._settlements: list[tuple[int, bool, bool | None]] = []

    def add_publish(self, exchange: str, mandatory: bool, message: Message) -> None:
        self._publishes.append((exchange, mandatory, message))

    def add_settlement(self, tag: int, multiple: bool, requeue: bool | None) -> None:
        self._settlements.append((tag, multiple, requeue))

    def commit(self) -> None:
        """Settle, then publish; commit-ok waits for the fsync when a publish needs one."""
        channel = self.channel
        settlements, self._settlements = self._settlements, []
        publishes, self._publishes = self._publishes, []
        for tag, multiple, requeue in settlements:
            if requeue is None:
                channel.ack_now(tag, multiple)
            else:
                channel.reject_now(tag, multiple, requeue)
        needs_sync = False
        for exchange, mandatory, message in publishes:
            needs_sync |= channel.route(exchange, mandatory, message)
        commit_ok = codec.method_frame(channel.id, commands.Tx.CommitOk())
        if not needs_sync:
            channel.connection.send(commit_ok)
            return

        def prepare() -> Callable[[bool], None]:
            return lambda ok: None if channel.closing else channel.connection.send(commit_ok)

        channel.connection.broker.wait_for_sync(prepare)

    def rollback(self) -> None:
        self._publishes.clear()
        self._settlements.clear()
