"""The built-in guest user, tested as a plain object without a broker."""

from __future__ import annotations

import asyncio
from importlib.metadata import entry_points

import pytest
from lavin.api import AccessRefused, VHostPermissions
from lavin.plugins.auth.guest import GuestAuth

LOGIN_REFUSED = "Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
LOOPBACK_ONLY = "user 'guest' can only connect via localhost"


def test_entry_point_loads_the_backend() -> None:
    (entry,) = [e for e in entry_points(group="lavin.auth") if e.name == "guest"]
    assert entry.load() is GuestAuth
    assert GuestAuth.name == "guest"


@pytest.mark.parametrize("peer_host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "::ffff:127.0.0.1", "::1%lo"])
def test_guest_from_loopback_gets_full_rights_on_default_vhost(peer_host: str) -> None:
    user = asyncio.run(GuestAuth().authenticate("guest", "guest", peer_host))
    assert user is not None
    assert user.name == "guest"
    assert user.tags == ("administrator",)
    assert user.permissions == {"/": VHostPermissions()}


@pytest.mark.parametrize(
    "peer_host",
    ["10.0.0.1", "192.168.1.20", "::ffff:10.0.0.1", "2001:db8::1", "128.0.0.1", "localhost", ""],
)
def test_guest_from_elsewhere_is_refused(peer_host: str) -> None:
    with pytest.raises(AccessRefused) as raised:
        asyncio.run(GuestAuth().authenticate("guest", "guest", peer_host))
    assert raised.value.text == LOOPBACK_ONLY


@pytest.mark.parametrize("password", ["", "Guest", "guest ", "wrong", "gu\udcffest"])
def test_wrong_password_is_refused_without_detail(password: str) -> None:
    for peer_host in ("127.0.0.1", "10.0.0.1"):
        with pytest.raises(AccessRefused) as raised:
            asyncio.run(GuestAuth().authenticate("guest", password, peer_host))
        assert raised.value.text == LOGIN_REFUSED
        assert raised.value.reply_text == f"ACCESS_REFUSED - {LOGIN_REFUSED}"


@pytest.mark.parametrize("username", ["admin", "Guest", "", "guest2"])
def test_other_users_are_left_to_other_backends(username: str) -> None:
    assert asyncio.run(GuestAuth().authenticate(username, "guest", "127.0.0.1")) is None
