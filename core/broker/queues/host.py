"""The vhost as its queues see it: `QueueHost`, the port through which a queue reaches what
is not its own business, so that the queues package imports neither the vhost nor routing.

`lavin.broker.vhost.VHost` subclasses it (through `lavin.broker.routing.host.ExchangeHost`).
It is a class rather than a Protocol, compiled like the queue, so that `dead_letter`, called
for each message that dies, goes through a vtable as cheaply as a direct call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from lavin.api.message import Message
    from lavin.broker.queues.queue import Queue
    from lavin.broker.runtime.group_commit import GroupCommit


class QueueHost:
    """A queue's vhost: its name (for texts), the event loop and group commit its queues
    share, and the things a queue asks of it."""

    name: str
    loop: asyncio.AbstractEventLoop
    group_commit: GroupCommit

    def delete_queue(self, queue: Queue) -> int:
        """Remove a queue that deletes itself (auto-delete, x-expires): cancel its
        consumers, unbind it, drop its data; returns its message count."""
        raise NotImplementedError

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """Route a copy of a message that died in `queue` to the queue's dead-letter
        exchange, if it has one."""
        raise NotImplementedError

    def dropped(self, queue: Queue, reason: str) -> None:
        """A message died in `queue`, which has no dead-letter exchange: counted only."""
        raise NotImplementedError
