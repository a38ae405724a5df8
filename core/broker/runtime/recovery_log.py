"""What the log says while a vhost recovers its queues: a progress line every few seconds
when there are many (or large ones), and a summary once it is done."""

from __future__ import annotations

import logging
import time
from typing import Final

from lavin.api.printable import printable

log = logging.getLogger(__name__)

PROGRESS_INTERVAL: Final = 5.0  # seconds between progress lines


class RecoveryLog:
    def __init__(self, vhost: str, queues: int) -> None:
        self.vhost = printable(vhost)
        self.queues = queues
        self.done = 0
        self.recovered = 0
        self.messages = 0
        self.started = self.last_report = time.monotonic()

    def queue_recovered(self, messages: int | None) -> None:
        """One more queue is done, holding `messages` (None: it could not be recovered)."""
        self.done += 1
        if messages is not None:
            self.recovered += 1
            self.messages += messages
        now = time.monotonic()
        if now - self.last_report >= PROGRESS_INTERVAL:
            self.last_report = now
            log.info(
                "vhost '%s': recovering queues, %d of %d done (%d messages) after %.1f s",
                self.vhost,
                self.done,
                self.queues,
                self.messages,
                now - self.started,
            )

    def finished(self) -> None:
        log.info(
            "vhost '%s': recovered %d queues with %d messages in %.3f s",
            self.vhost,
            self.recovered,
            self.messages,
            time.monotonic() - self.started,
        )
