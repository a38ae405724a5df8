"""`users.json` and `vhosts.json`: the user database and the vhost list, in LavinMQ's
shapes, as pretty JSON an operator may read and edit while the broker is stopped.

```
users.json   [{"name": "guest", "password_hash": "<base64>", "hashing_algorithm": "rabbit_password_hashing_sha256",
               "tags": "administrator",
               "permissions": {"/": {"config": ".*", "write": ".*", "read": ".*"}},
               "topic_permissions": {"/": {"amq.topic": {"write": ".*", "read": ".*"}}}}]
vhosts.json  [{"name": "/", "dir": "<sha1 of the name>", "limits": {"max-connections": 100, "max-queues": 10}}]
```

Each file is rewritten whole on every change, atomically: a crash leaves the old file or
the new one, never a mix. This module checks shapes only; what the values mean (hashes,
patterns) is checked by the broker's access control.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from lavin.api.auth import StoredUser, TopicPermissions, VHostPermissions
from lavin.config import StartupError
from lavin.storage import changes
from lavin.storage.disk import fsync_directory

USERS_FILE: Final = "users.json"
VHOSTS_FILE: Final = "vhosts.json"
# LavinMQ writes no algorithm for users of its oldest files: those hashes are MD5.
LEGACY_ALGORITHM: Final = "rabbit_password_hashing_md5"

T = TypeVar("T")
MISSING: Final = object()  # no file (a JSON `null` in one is invalid, not missing)


class AccessFileError(StartupError):
    """users.json or vhosts.json cannot be read or is not in the expected shape."""


def vhost_directory_name(name: str) -> str:
    """The directory of a vhost's data under the data dir, as LavinMQ names it."""
    return hashlib.sha1(name.encode()).hexdigest()


# ---- users.json ----------------------------------------------------------------------------


def load_users(path: Path) -> list[StoredUser] | None:
    """The users in the file; None when there is no file (the first start)."""
    document = _read(path)
    if document is MISSING:
        return None
    users = [
        _parse_user(path, number, entry) for number, entry in enumerate(_expect(path, document, list, "the file"), 1)
    ]
    _refuse_duplicates(path, users)
    return users


def save_users(path: Path, users: Iterable[StoredUser]) -> None:
    write_json_atomically(path, [_user_document(user) for user in users])


def _parse_user(path: Path, number: int, entry: object) -> StoredUser:
    where = f"user {number}"
    fields = _expect(path, entry, dict, where)
    name = _expect(path, fields.get("name"), str, f"{where}: name")
    where = f"user '{name}'"
    algorithm = fields.get("hashing_algorithm") or LEGACY_ALGORITHM
    tags = fields.get("tags", "")
    if isinstance(tags, list) and all(isinstance(tag, str) for tag in tags):
        tag_names = tuple(tags)
    else:
        tag_names = split_tags(_expect(path, tags, str, f"{where}: tags"))
    permissions = {
        vhost: VHostPermissions(
            configure=_pattern(path, patterns, "config", f"{where}: permissions on '{vhost}'"),
            write=_pattern(path, patterns, "write", f"{where}: permissions on '{vhost}'"),
            read=_pattern(path, patterns, "read", f"{where}: permissions on '{vhost}'"),
        )
        for vhost, patterns in _expect(path, fields.get("permissions", {}), dict, f"{where}: permissions").items()
    }
    topic_permissions = {}
    topic_entries = _expect(path, fields.get("topic_permissions", {}), dict, f"{where}: topic_permissions")
    for vhost, exchanges in topic_entries.items():
        for exchange, patterns in _expect(path, exchanges, dict, f"{where}: topic_permissions of '{vhost}'").items():
            where_exchange = f"{where}: topic_permissions of '{vhost}' exchange '{exchange}'"
            topic_permissions[(vhost, exchange)] = TopicPermissions(
                write=_pattern(path, patterns, "write", where_exchange),
                read=_pattern(path, patterns, "read", where_exchange),
            )
    return StoredUser(
        name=name,
        password_hash=_expect(path, fields.get("password_hash", ""), str, f"{where}: password_hash"),
        hashing_algorithm=_expect(path, algorithm, str, f"{where}: hashing_algorithm"),
        tags=tag_names,
        permissions=permissions,
        topic_permissions=topic_permissions,
    )


def _user_document(user: StoredUser) -> dict[str, Any]:
    topic_permissions: dict[str, dict[str, dict[str, str]]] = {}
    for (vhost, exchange), topic in user.topic_permissions.items():
        topic_permissions.setdefault(vhost, {})[exchange] = {"write": topic.write, "read": topic.read}
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": user.hashing_algorithm,
        "tags": ",".join(user.tags),
        "permissions": {
            vhost: {"config": patterns.configure, "write": patterns.write, "read": patterns.read}
            for vhost, patterns in user.permissions.items()
        },
        "topic_permissions": topic_permissions,
    }


def split_tags(text: str) -> tuple[str, ...]:
    """RabbitMQ's comma-separated tags."""
    return tuple(tag.strip() for tag in text.split(",") if tag.strip())


def _pattern(path: Path, patterns: object, key: str, where: str) -> str:
    return _expect(path, _expect(path, patterns, dict, where).get(key), str, f"{where}: {key}")


# ---- vhosts.json ---------------------------------------------------------------------------


def load_vhosts(path: Path) -> dict[str, dict[str, int]] | None:
    """vhost name -> its limits; None when there is no file (the first start)."""
    document = _read(path)
    if document is MISSING:
        return None
    vhosts: dict[str, dict[str, int]] = {}
    for number, entry in enumerate(_expect(path, document, list, "the file"), 1):
        fields = _expect(path, entry, dict, f"vhost {number}")
        name = _expect(path, fields.get("name"), str, f"vhost {number}: name")
        limits = _expect(path, fields.get("limits", {}), dict, f"vhost '{name}': limits")
        for key, value in limits.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise AccessFileError(f"{path}: vhost '{name}': limit {key} is not an integer")
        if name in vhosts:
            raise AccessFileError(f"{path}: vhost '{name}' appears twice")
        vhosts[name] = dict(limits)
    return vhosts


def save_vhosts(path: Path, vhosts: Mapping[str, Mapping[str, int]]) -> None:
    write_json_atomically(
        path,
        [{"name": name, "dir": vhost_directory_name(name), "limits": dict(limits)} for name, limits in vhosts.items()],
    )


# ---- reading and writing -------------------------------------------------------------------


def write_json_atomically(path: Path, document: object) -> None:
    """Write to a temporary file, sync it, rename it over `path`, sync the directory. The
    file holds password hashes: only the broker's user may read it. The document must hold
    only what `lavin.storage.metadata.storable` lets through; callers check that first."""
    data = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")  # fails before any write
    temporary = path.with_name(path.name + ".tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        changes.install(temporary, path, data)
    except BaseException:
        temporary.unlink(missing_ok=True)  # a failed write leaves the old file and nothing beside it
        raise
    fsync_directory(path.parent)


def _read(path: Path) -> object:
    return read_json_document(path, AccessFileError, MISSING)


def read_json_document(path: Path, error: type[StartupError], missing: object) -> object:
    """The file's JSON, or `missing` when there is no file; a file that cannot be read or
    parsed raises `error` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return missing
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {path}: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(f"{path} is not valid JSON: {exc}") from exc


def _refuse_duplicates(path: Path, users: list[StoredUser]) -> None:
    seen: set[str] = set()
    for user in users:
        if user.name in seen:
            raise AccessFileError(f"{path}: user '{user.name}' appears twice")
        seen.add(user.name)


def _expect(path: Path, value: object, kind: type[T], where: str) -> T:
    if not isinstance(value, kind):
        expected = {"list": "a list", "dict": "an object", "str": "a string"}[kind.__name__]
        raise AccessFileError(f"{path}: {where} must be {expected}")
    return value
