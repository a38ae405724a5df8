"""Authentication backends: who a user is, and what the user may do."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass
class User:
    name: str
    tags: tuple[str, ...] = ()
    # vhost -> (configure, write, read) regular expressions
    permissions: dict[str, tuple[str, str, str]] = field(default_factory=dict)


class AuthBackend(ABC):
    """Answers who a user is. The backends named in `[main] auth_backends` are asked in
    that order; the first that returns a user wins.

    `authenticate` is a coroutine, awaited on the broker's event loop while the connection
    waits: a backend that asks a server (HTTP, LDAP, OAuth) awaits it instead of blocking,
    and other clients go on meanwhile.
    """

    name: ClassVar[str]

    @abstractmethod
    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        """Return the user; None for "not mine" (the next backend is asked); raise
        AccessRefused to refuse the login outright (the reason goes to the log only)."""
