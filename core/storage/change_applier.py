"""A follower applies the leader's storage changes (lavin.storage.changes) to its own data
dir. Every change is idempotent, so one applied twice, or to a file fetched after it was
made, leaves the same file. `sync` makes what was applied durable before it is acked.
"""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from pathlib import Path, PurePosixPath

from lavin.storage.data_dir_index import is_replicated
from lavin.storage.disk import fsync_directory

MAX_OPEN_FILES = 256
_FILE_MODE = 0o600  # the same for every file: some hold password hashes


class UnsafePath(ValueError):
    """A path a follower refuses: absolute, with `..`, outside its data dir, or one that
    is not replicated (the follower's `.lock`, `transient/`, ...)."""


class ChangeApplier:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._fds: OrderedDict[Path, int] = OrderedDict()  # least recently used first
        self._dirty_files: set[Path] = set()
        self._dirty_dirs: set[Path] = set()

    def write(self, path: str, offset: int, data: bytes) -> None:
        if offset < 0:
            raise ValueError(f"negative offset {offset} for {path}")
        fd = self._fd(self._resolve(path))
        with memoryview(data) as view:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, view[written:], offset + written)

    def truncate(self, path: str, size: int) -> None:
        if size < 0:
            raise ValueError(f"negative size {size} for {path}")
        os.ftruncate(self._fd(self._resolve(path)), size)

    def replace(self, path: str, data: bytes) -> None:
        """Temporary file, fsync, rename: a crash leaves the old content or the new."""
        target = self._resolve(path)
        self._forget(target)
        self._make_parents(target)
        temporary = target.with_name(target.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
        try:
            with memoryview(data) as view:
                written = 0
                while written < len(data):
                    written += os.write(fd, view[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, target)
        self._dirty_dirs.add(target.parent)

    def remove(self, path: str) -> None:
        """A file or a directory tree; already gone is fine."""
        target = self._resolve(path)
        self._forget_under(target)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
        self._dirty_dirs.add(target.parent)

    def rename(self, source: str, target: str) -> None:
        """A missing source is fine: the rename was applied already."""
        source_path, target_path = self._resolve(source), self._resolve(target)
        if not source_path.exists():
            return
        self._forget_under(source_path)
        self._forget_under(target_path)
        self._make_parents(target_path)
        if target_path.is_dir() and not target_path.is_symlink():
            shutil.rmtree(target_path)  # os.rename cannot replace a non-empty directory
        os.rename(source_path, target_path)
        self._dirty_dirs.update((source_path.parent, target_path.parent))

    def sync(self) -> None:
        """fsync every file and directory changed since the last sync."""
        for path in self._dirty_files:
            fd = self._fds.get(path)
            if fd is not None:
                os.fsync(fd)
        self._dirty_files.clear()
        for directory in sorted(self._dirty_dirs, key=lambda path: len(path.parts), reverse=True):
            try:
                fsync_directory(directory)
            except FileNotFoundError:  # removed by a later change
                continue
        self._dirty_dirs.clear()

    def close(self) -> None:
        for path in list(self._fds):
            self._forget(path)

    # -- paths and fds ---------------------------------------------------------------------

    def _resolve(self, path: str) -> Path:
        relative = PurePosixPath(path)
        if relative.is_absolute() or not relative.parts or ".." in relative.parts or "\0" in path:
            raise UnsafePath(f"unsafe path {path!r}")
        if not is_replicated(path):
            raise UnsafePath(f"path {path!r} is not replicated")
        target = self.root.joinpath(*relative.parts)
        # A symlink inside the data dir must not lead a change out of it.
        if not target.parent.resolve().is_relative_to(self.root):
            raise UnsafePath(f"path {path!r} leads outside the data dir")
        return target

    def _make_parents(self, target: Path) -> None:
        parent = target.parent
        if not parent.is_dir():
            parent.mkdir(parents=True, exist_ok=True)
            for directory in (parent, *parent.parents):
                self._dirty_dirs.add(directory)
                if directory == self.root:
                    break

    def _fd(self, target: Path) -> int:
        fd = self._fds.get(target)
        if fd is not None:
            self._fds.move_to_end(target)
        else:
            self._make_parents(target)
            created = not target.exists()
            fd = os.open(target, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), _FILE_MODE)
            if created:
                self._dirty_dirs.add(target.parent)
            if len(self._fds) >= MAX_OPEN_FILES:
                self._forget(next(iter(self._fds)))
            self._fds[target] = fd
        self._dirty_files.add(target)
        return fd

    def _forget(self, path: Path) -> None:
        """Close a cached fd, syncing it first when it has unsynced changes."""
        fd = self._fds.pop(path, None)
        if fd is None:
            return
        try:
            if path in self._dirty_files:
                os.fsync(fd)
                self._dirty_files.discard(path)
        finally:
            os.close(fd)

    def _forget_under(self, path: Path) -> None:
        for cached in [cached for cached in self._fds if cached == path or cached.is_relative_to(path)]:
            self._forget(cached)
