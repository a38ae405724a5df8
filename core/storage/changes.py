"""The process-wide tap on every change the storage layer makes under the data dir.

Clustering installs a sink on `CHANGES.sink` to stream the changes to followers; with no
sink (the normal case) each store pays one attribute load and `is not None` test per file
operation or flush. Every change is position-based and idempotent: applying it twice, or
to a file copied after some later changes were made, ends in the same file. So an append
is reported with the offset it landed at, and an atomic rewrite once, as the final file's
whole content, after its rename (its temporary file is never reported).

Paths are the absolute paths the store used. See docs/storage.md, "Changes for
replication".
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final, Protocol

StrPath = str | os.PathLike[str]


class ChangeSink(Protocol):
    def written(self, path: StrPath, offset: int, data: bytes) -> None:
        """These bytes now sit at `offset` of the file (created if missing)."""

    def truncated(self, path: StrPath, size: int) -> None:
        """The file now has `size` bytes (created if missing)."""

    def replaced(self, path: StrPath, data: bytes) -> None:
        """The file's whole content is now `data` (an atomic rewrite)."""

    def removed(self, path: StrPath) -> None:
        """A file or a directory tree is gone."""

    def renamed(self, source: StrPath, target: StrPath) -> None:
        """Moved: a directory set aside before its removal, ..."""


class Changes:
    """Holds the sink, if any; one instance, `CHANGES`."""

    __slots__ = ("sink",)

    def __init__(self) -> None:
        self.sink: ChangeSink | None = None


CHANGES: Final = Changes()


# File operations that report themselves: the places that remove, move or atomically
# rewrite files call these rather than os's, so none of them forgets its report.


def remove_file(path: Path, *, missing_ok: bool = False) -> None:
    path.unlink(missing_ok=missing_ok)
    sink = CHANGES.sink
    if sink is not None:
        sink.removed(path)


def remove_tree(path: Path) -> None:
    """Remove a directory tree; whatever cannot be removed is left (as rmtree's ignore_errors)."""
    shutil.rmtree(path, ignore_errors=True)
    sink = CHANGES.sink
    if sink is not None:
        sink.removed(path)


def rename(source: Path, target: Path) -> None:
    os.rename(source, target)
    sink = CHANGES.sink
    if sink is not None:
        sink.renamed(source, target)


def append(fd: int, path: Path, data: bytes) -> None:
    """Write all of `data` to an O_APPEND fd; reported as a write at the offset it landed at."""
    sink = CHANGES.sink
    offset = os.fstat(fd).st_size if sink is not None else 0
    with memoryview(data) as unwritten:
        written = 0
        while written < len(data):  # a write may store part: the next one says why it stopped
            written += os.write(fd, unwritten[written:])
    if sink is not None:
        sink.written(path, offset, data)


def write_whole(path: Path, data: bytes) -> None:
    """Write a small file whole, in place (not atomically: for files whose loss a start
    repairs, as a `.queue` name file)."""
    path.write_bytes(data)
    sink = CHANGES.sink
    if sink is not None:
        sink.replaced(path, data)


def install(temporary: Path, path: Path, data: bytes) -> None:
    """Move a fully written temporary file over `path` (the commit of an atomic rewrite);
    `data` is its content."""
    os.replace(temporary, path)
    sink = CHANGES.sink
    if sink is not None:
        sink.replaced(path, data)
