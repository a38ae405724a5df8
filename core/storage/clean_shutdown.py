"""The mark a clean shutdown leaves in the data dir: every store was written, synced and
closed, and nothing has changed the files since.

After a crash the last records of a segment may be torn, so recovery checks every record's
crc. After a clean shutdown it only walks the length fields (`segment_files.scan_segment`),
which is what a restart with a hundred million messages queued waits for. The mark is taken
away, durably, before the broker writes anything: a crash after that start finds none.

A cluster node never leaves one: a follower's files are changed by replication while no
broker runs on them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

from lavin.storage.disk import fsync_directory

CLEAN_SHUTDOWN_FILE: Final = ".clean_shutdown"


def take_clean_shutdown_mark(data_dir: Path) -> bool:
    """Whether the last broker on `data_dir` shut down cleanly; the mark is removed and the
    removal synced before this returns, so that no later crash can leave it standing."""
    try:
        os.unlink(data_dir / CLEAN_SHUTDOWN_FILE)
    except FileNotFoundError:
        return False
    fsync_directory(data_dir)
    return True


def leave_clean_shutdown_mark(data_dir: Path) -> None:
    """Called once every store is closed. Not synced: a mark lost to a power cut only makes
    the next start check every crc."""
    with contextlib.suppress(OSError):  # no mark: the next start is careful, nothing worse
        os.close(os.open(data_dir / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT, 0o644))
