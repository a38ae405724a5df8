"""Which files under a data dir are replicated, and an index of them (path, size, sha1)
that a follower compares with its own to find what to fetch and what to delete.

Not replicated: the `.lock` of the broker holding the directory, the files of the node
itself in a cluster (`NODE_FILES`: its name, its mark of an unfinished sync, its control
socket, a clean shutdown's mark), everything under a
vhost's `transient/` directory (non-durable queues, wiped at start), temporary files of
atomic rewrites (`*.tmp`, renamed over their final name once written: only the rename is
reported), and the `*.corrupt` copies of damaged files kept for inspection on the node
that found them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from lavin.storage.changes import StrPath
from lavin.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE
from lavin.storage.quarantine import CORRUPT_SUFFIX

LOCK_FILE = ".lock"
# A cluster node's own: its name, the mark of a full sync under way, the control socket.
NODE_FILES = frozenset(
    (
        LOCK_FILE,
        ".clustering_node",
        ".clustering_node.partial",
        ".clustering_syncing",
        "control.sock",
        CLEAN_SHUTDOWN_FILE,
    )
)
TRANSIENT_DIR = "transient"
TEMPORARY_SUFFIX = ".tmp"
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the data dir, posix-style
    size: int
    checksum: str  # hex sha1 of the content


def is_replicated(relative_path: str) -> bool:
    """Whether a file at this path (relative, posix-style) belongs to the replicated data."""
    parts = PurePosixPath(relative_path).parts
    if not parts or (len(parts) == 1 and parts[0] in NODE_FILES):
        return False
    if TRANSIENT_DIR in parts[:-1]:
        return False
    name = parts[-1]
    return not name.endswith(TEMPORARY_SUFFIX) and CORRUPT_SUFFIX not in name


def relative_path(root: Path, path: StrPath) -> str | None:
    """`path` relative to `root`, posix-style; None when it lies outside `root` or is not
    replicated."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if relative == os.curdir or relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    posix = relative.replace(os.sep, "/")
    return posix if is_replicated(posix) else None


def index_data_dir(root: Path) -> list[FileEntry]:
    """Every replicated file under `root`, sorted by path. Blocking: run it in a thread."""
    entries = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        for name in files:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, root).replace(os.sep, "/")
            if is_replicated(relative) and os.path.isfile(path) and not os.path.islink(path):
                try:
                    entries.append(_entry(path, relative))
                except FileNotFoundError:  # removed by the running broker since the walk saw it
                    continue
    entries.sort(key=lambda entry: entry.path)
    return entries


def _entry(path: str, relative: str) -> FileEntry:
    digest = hashlib.sha1(usedforsecurity=False)
    size = 0
    with open(path, "rb") as file:
        while chunk := file.read(_READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return FileEntry(relative, size, digest.hexdigest())
