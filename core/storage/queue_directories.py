"""The data directories of a vhost's durable queues: `<vhost dir>/<sha1 of the name>`,
each with a `.queue` file that names its queue.

A durable queue is deleted in three steps, so that a crash leaves it whole or gone, never
in part: its directory is renamed to `<sha1>.deleted` (synced), the delete is recorded in
the definitions log (the commit point), then the renamed directory is removed. At
start-up `settle` finishes what a crash interrupted, and moves directories that no
definition claims into `orphans/`, where a later declare of the same name cannot adopt
their messages.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from lavin.storage import changes
from lavin.storage.disk import ensure_directory, fsync_directory

log = logging.getLogger(__name__)

NAME_FILE = ".queue"
DELETED_SUFFIX = ".deleted"
ORPHANS = "orphans"
_DIGEST_LENGTH = 40


def queue_directory(parent: Path, name: str) -> Path:
    return parent / hashlib.sha1(name.encode()).hexdigest()


def begin_delete(path: Path) -> Path:
    """Rename a queue's directory aside, durably; return where it went."""
    aside = path.with_name(path.name + DELETED_SUFFIX)
    changes.remove_tree(aside)  # left by a delete that could not finish
    try:
        changes.rename(path, aside)
    except FileNotFoundError:
        return aside  # nothing on disk
    fsync_directory(path.parent)
    return aside


def finish_delete(aside: Path) -> None:
    changes.remove_tree(aside)


def settle(vhost_dir: Path, queue_names: Iterable[str], vhost_name: str) -> None:
    """Finish the deletes a crash interrupted: undone when the definitions log still has
    the queue, completed otherwise. Then move every queue directory without a definition
    into `orphans/`, with an ERROR naming them."""
    defined = {queue_directory(vhost_dir, name).name for name in queue_names}
    orphans = []
    changed = False
    for entry in sorted(os.listdir(vhost_dir)):
        path = vhost_dir / entry
        digest = entry.removesuffix(DELETED_SUFFIX)
        if len(digest) != _DIGEST_LENGTH or not _is_hex(digest) or not path.is_dir():
            continue
        if entry == digest:
            if digest not in defined:
                orphans.append(path)
            continue
        changed = True
        if digest in defined and not (vhost_dir / digest).exists():
            changes.rename(path, vhost_dir / digest)
            log.warning(
                "vhost %s: the delete of queue '%s' was not recorded before the broker stopped; the queue stays",
                vhost_name,
                _queue_name(vhost_dir / digest),
            )
        else:
            log.info("vhost %s: finishing the delete of queue '%s'", vhost_name, _queue_name(path))
            changes.remove_tree(path)
    if orphans:
        _move_orphans(vhost_dir, orphans, vhost_name)
    if changed or orphans:
        fsync_directory(vhost_dir)


def _move_orphans(vhost_dir: Path, orphans: list[Path], vhost_name: str) -> None:
    target = vhost_dir / ORPHANS
    ensure_directory(target)
    moved = []
    for path in orphans:
        destination = target / path.name
        number = 1
        while destination.exists():
            number += 1
            destination = target / f"{path.name}.{number}"
        changes.rename(path, destination)
        moved.append(f"'{_queue_name(destination)}' ({destination.name})")
    fsync_directory(target)
    log.error(
        "vhost %s: %d queue director%s with no definition in the definitions log moved to %s: %s",
        vhost_name,
        len(moved),
        "y" if len(moved) == 1 else "ies",
        target,
        ", ".join(moved),
    )


def _queue_name(path: Path) -> str:
    try:
        return (path / NAME_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return "?"


def _is_hex(text: str) -> bool:
    return all(character in "0123456789abcdef" for character in text)
