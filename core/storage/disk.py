"""Making directory changes durable: a new or renamed file survives a crash only once its
directory is synced too."""

from __future__ import annotations

import os
from pathlib import Path

from lavin.storage import changes


def open_directory(directory: Path) -> int:
    """A read-only fd of `directory`, for fsync."""
    return os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def fsync_directory(directory: Path) -> None:
    fd = open_directory(directory)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_directory(directory: Path) -> None:
    """Create `directory` unless it exists, and sync its parent so that it stays."""
    if not directory.exists():
        directory.mkdir(parents=True)
        fsync_directory(directory.parent)


def recreate_directory(directory: Path) -> None:
    """An empty `directory` for data that need not survive a restart: whatever an earlier
    run left there goes."""
    changes.remove_tree(directory)
    directory.mkdir(parents=True)
