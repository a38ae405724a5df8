"""RabbitMQ's JSON for users, vhosts, permissions and limits, out of the broker and back in.

The same shapes serve the HTTP endpoints and definition documents, as in RabbitMQ, whose
`PUT /api/users/NAME` and a user of a definitions file go through one function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lavin.api.auth import StoredUser, TopicPermissions, VHostPermissions
from lavin.broker.access.access_control import AccessControl
from lavin.broker.access.passwords import DEFAULT_ALGORITHM


class BadRequest(ValueError):
    """Input the API refuses with 400; the message is the reason RabbitMQ gives."""


def user_json(user: StoredUser) -> dict[str, Any]:
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": user.hashing_algorithm,
        "tags": list(user.tags),
        "limits": {},
    }


def vhost_json(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": "",
        "tags": [],
        "default_queue_type": "classic",
        "metadata": {"description": "", "tags": []},
        "tracing": False,
    }


def permission_json(user: str, vhost: str, permissions: VHostPermissions) -> dict[str, Any]:
    return {
        "user": user,
        "vhost": vhost,
        "configure": permissions.configure,
        "write": permissions.write,
        "read": permissions.read,
    }


def topic_permission_json(user: str, vhost: str, exchange: str, permissions: TopicPermissions) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, "exchange": exchange, "write": permissions.write, "read": permissions.read}


def limits_json(vhost: str, limits: Mapping[str, int]) -> dict[str, Any]:
    return {"vhost": vhost, "value": dict(limits)}


def required(body: Mapping[str, Any], *keys: str) -> list[Any]:
    """The values of `keys`; every one missing is named in the reason, as RabbitMQ does."""
    missing = [key for key in keys if body.get(key) is None]
    if missing:
        raise BadRequest("[" + ",".join(f"{{key_missing,{key}}}" for key in missing) + "]")
    return [body[key] for key in keys]


def text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    return value


def parse_tags(value: Any) -> tuple[str, ...]:
    """Tags as RabbitMQ takes them: a comma-separated string or a list of strings."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise BadRequest("tags must be a comma-separated string or a list of strings")
    return tuple(tag.strip() for tag in value if tag.strip())


def put_user(access: AccessControl, name: str, body: Mapping[str, Any]) -> bool:
    """Create or update a user from `{"password"}` or `{"password_hash", "hashing_algorithm"}`
    (neither: a passwordless user) and `"tags"`. True when the user is new."""
    if "tags" not in body:
        raise BadRequest("tags_not_present")
    tags = parse_tags(body["tags"])
    password, password_hash = body.get("password"), body.get("password_hash")
    if password is not None and password_hash is not None:
        raise BadRequest("both_password_and_password_hash_are_provided")
    created = access.user(name) is None
    if password_hash is not None:
        password_hash = text(password_hash, "password_hash")
        algorithm = text(body.get("hashing_algorithm") or DEFAULT_ALGORITHM, "hashing_algorithm")
        if created:
            access.add_user_with_hash(name, password_hash, algorithm, tags)
        else:
            access.set_password_hash(name, password_hash, algorithm)
            access.set_user_tags(name, tags)
    elif created:
        access.add_user(name, None if password is None else text(password, "password"), tags)
    else:
        access.change_password(name, None if password is None else text(password, "password"))
        access.set_user_tags(name, tags)
    return created


def vhost_permissions(body: Mapping[str, Any]) -> VHostPermissions:
    configure, write, read = required(body, "configure", "write", "read")
    return VHostPermissions(text(configure, "configure"), text(write, "write"), text(read, "read"))


def topic_permissions(body: Mapping[str, Any]) -> tuple[str, TopicPermissions]:
    """The exchange a topic permission is for, and its patterns."""
    exchange, write, read = required(body, "exchange", "write", "read")
    return text(exchange, "exchange"), TopicPermissions(text(write, "write"), text(read, "read"))


def limit_value(body: Mapping[str, Any]) -> int:
    (value,) = required(body, "value")
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest("value must be an integer")
    return value
