"""The broker's lifetime counters that belong to no object that lives as long: queues and
channels opened and gone, messages dead-lettered, and the sizes of messages published.

They only ever grow, so Prometheus' rates over them hold across deleted queues and closed
channels. All are counted off the per-message path except the message sizes, which every
channel adds to (`lavin.broker.runtime.message_sizes`, compiled).
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from lavin.broker.runtime.message_sizes import MessageSizes

# RabbitMQ's dead-letter strategies: where a message that died could go. Lavin has no
# at-least-once dead-lettering.
DISABLED: Final = "disabled"  # no dead-letter exchange, or one that does not exist
AT_MOST_ONCE: Final = "at_most_once"
DEAD_LETTER_STRATEGIES: Final = (DISABLED, AT_MOST_ONCE)


class BrokerCounters:
    """Counts since start-up; `dead_lettered` by (queue type, dead-letter strategy, reason)."""

    def __init__(self) -> None:
        self.queues_declared = 0
        self.queues_created = 0
        self.queues_deleted = 0
        self.channels_opened = 0
        self.channels_closed = 0
        self.dead_lettered: Counter[tuple[str, str, str]] = Counter()
        self.message_sizes = MessageSizes()
