"""Damaged files are kept for inspection, never deleted: `<name>.corrupt` next to the
original (`<name>.corrupt.2`, ... when that is taken). Recovery never lists these names."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lavin.storage.changes import CHANGES
from lavin.storage.disk import fsync_directory

CORRUPT_SUFFIX = ".corrupt"


def corrupt_path(path: Path) -> Path:
    """The first free name for a damaged copy of `path`."""
    candidate = path.with_name(path.name + CORRUPT_SUFFIX)
    number = 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}{CORRUPT_SUFFIX}.{number}")
    return candidate


def set_aside(path: Path) -> Path:
    """Rename a damaged file out of the way; return its new path."""
    kept = corrupt_path(path)
    os.rename(path, kept)
    sink = CHANGES.sink
    if sink is not None:  # damaged copies stay on this node: for a follower the file is gone
        sink.removed(path)
    fsync_directory(path.parent)
    return kept


def copy_aside(path: Path) -> Path:
    """Copy a damaged file before recovery repairs it in place; return the copy's path."""
    kept = corrupt_path(path)
    shutil.copyfile(path, kept)
    return kept
