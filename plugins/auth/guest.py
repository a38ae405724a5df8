"""The built-in `guest` user, as RabbitMQ ships it: full rights on "/", loopback peers only."""

from __future__ import annotations

import hmac
import ipaddress

from lavin.api import AccessRefused, AuthBackend, User, VHostPermissions

GUEST = "guest"
# The text RabbitMQ sends for a bad password: it deliberately says nothing about why.
LOGIN_REFUSED = "Login was refused using authentication mechanism PLAIN. For details see the broker logfile."


def is_loopback(peer_host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback; False for anything unparsable."""
    host = peer_host.strip("[]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


class GuestAuth(AuthBackend):
    name = "guest"

    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        if username != GUEST:
            return None
        if not hmac.compare_digest(password.encode("utf-8", "surrogateescape"), GUEST.encode()):
            raise AccessRefused(LOGIN_REFUSED)
        if not is_loopback(peer_host):
            raise AccessRefused(f"user '{GUEST}' can only connect via localhost")
        return User(GUEST, tags=("administrator",), permissions={"/": VHostPermissions()})
