"""The vhost as its exchanges see it: `ExchangeHost`, the port that lets routing do without
the vhost module.

`lavin.broker.vhost.VHost` subclasses it. It extends the queues' port (`QueueHost`), since
one vhost hosts both, and is compiled like the exchange: `exchanges` is read for each
message that falls through to an alternate exchange.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lavin.broker.queues.host import QueueHost

if TYPE_CHECKING:
    from pathlib import Path

    from lavin.broker.routing.exchange import Exchange
    from lavin.storage.toolkit import SegmentStorage


class ExchangeHost(QueueHost):
    """An exchange's vhost: its exchanges by name (alternate exchanges), the directories a
    delayed exchange keeps its hold in (`data_dir` when durable, else `transient_dir`), and
    the storage engines it keeps it with."""

    exchanges: dict[str, Exchange]
    data_dir: Path
    transient_dir: Path
    storage: SegmentStorage
