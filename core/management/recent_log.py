"""The broker's last log lines, kept in memory for `lavin ctl log_tail` (the broker logs to
stderr, which the control socket cannot read back)."""

from __future__ import annotations

import logging
from collections import deque
from typing import Final

KEPT_LINES: Final = 1000
# A log line can quote client input; a long one is cut so the buffer stays bounded.
MAX_LINE_CHARS: Final = 4096


class RecentLog(logging.Handler):
    """A logging handler that keeps the last `KEPT_LINES` formatted lines."""

    def __init__(self) -> None:
        super().__init__()
        self._lines: deque[str] = deque(maxlen=KEPT_LINES)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(self.format(record)[:MAX_LINE_CHARS])
        except Exception:  # noqa: BLE001 - logging must never fail its caller; logging.Handler's own rule
            self.handleError(record)

    def tail(self, count: int) -> list[str]:
        """The last `count` lines, oldest first."""
        return list(self._lines)[-count:] if count > 0 else []


RECENT_LOG: Final = RecentLog()
