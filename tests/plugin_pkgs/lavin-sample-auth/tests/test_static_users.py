"""sample-auth's own tests: its entry point, and logins against a users file."""

from __future__ import annotations

import asyncio
import hashlib
import json
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from lavin.api import Access, AccessRefused
from lavin.testing import EmptyAuthContext
from lavin_sample_auth import StaticUsersAuth

CAROL = {
    "password_sha256": hashlib.sha256(b"carol-pw").hexdigest(),
    "tags": ["monitoring"],
    "permissions": {"/": {"configure": "^carol\\.", "write": ".*", "read": ".*"}},
}


@pytest.fixture
def backend(tmp_path: Path) -> StaticUsersAuth:
    users_file = tmp_path / "users.json"
    users_file.write_text(json.dumps({"carol": CAROL}))
    backend = StaticUsersAuth()
    backend.configure({"users_file": str(users_file)}, EmptyAuthContext())
    return backend


def test_name_matches_its_entry_point() -> None:
    (entry,) = entry_points(group="lavin.auth", name=StaticUsersAuth.name)
    assert entry.load() is StaticUsersAuth


def test_a_listed_user_gets_its_tags_and_permissions(backend: StaticUsersAuth) -> None:
    user = asyncio.run(backend.authenticate("carol", "carol-pw", "127.0.0.1"))
    assert user is not None and user.tags == ("monitoring",)
    assert user.authorizer is not None
    assert user.authorizer.check(Access("/", "queue", "carol.jobs", "configure")) is True
    assert user.authorizer.check(Access("/", "queue", "jobs", "configure")) is False
    assert user.authorizer.check(Access("other", "vhost")) is False


def test_a_wrong_password_is_refused_and_others_are_left_alone(backend: StaticUsersAuth) -> None:
    with pytest.raises(AccessRefused, match="wrong password for user 'carol'"):
        asyncio.run(backend.authenticate("carol", "guest", "127.0.0.1"))
    assert asyncio.run(backend.authenticate("guest", "guest", "127.0.0.1")) is None
