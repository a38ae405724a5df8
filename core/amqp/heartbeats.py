"""Heartbeats on one client connection, as RabbitMQ's rabbit_heartbeat does them: a tick
every half interval sends a heartbeat when nothing else went out since the last, and a
client that sent nothing for two intervals is dropped."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lavin.amqp import codec
from lavin.amqp.handshake import CLOSED

if TYPE_CHECKING:
    from lavin.amqp.connection import Connection

log = logging.getLogger(__name__)


class Heartbeats:
    """A connection's heartbeat ticks, from tune-ok until it closes."""

    __slots__ = ("_missed", "_timer", "connection", "interval")  # one per connection: no dict

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.interval = 0  # seconds, as tune-ok negotiated it; 0: no heartbeats
        self._missed = 0
        self._timer: asyncio.TimerHandle | None = None

    def start(self, interval: int) -> None:
        """tune-ok: the client's interval in seconds, 0 for none."""
        self.interval = interval
        if interval > 0:
            self._timer = self.connection.loop.call_later(interval / 2, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        connection = self.connection
        if connection.state == CLOSED:
            return
        output = connection.output
        # While the broker does not read the socket the client's heartbeats wait unread (as
        # RabbitMQ, which pauses its heartbeat monitor for a blocked connection); a client
        # that went away meanwhile is found when the heartbeats sent to it fail.
        if connection.received_since_tick or output.reading_paused_by:
            self._missed = 0
        else:
            self._missed += 1
            if self._missed >= 4:  # ticks are half an interval: two intervals of silence
                connection.close_reason = f"missed heartbeats from client, timeout: {self.interval}s"
                if connection.vhost is None:  # an opened connection logs it when it is gone
                    log.warning("connection %s: %s", connection.name, connection.close_reason)
                connection.abort()
                return
        connection.received_since_tick = False
        if not output.sent_since_tick:
            output.send(codec.HEARTBEAT_FRAME)
            # Written now, so that the heartbeat itself is not taken for traffic at the next
            # tick: a silent connection gets one every half interval, as from RabbitMQ.
            output.flush()
        output.sent_since_tick = False
        self._timer = connection.loop.call_later(self.interval / 2, self._tick)
