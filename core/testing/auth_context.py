"""An `AuthContext` for testing an auth backend in-process, without a broker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lavin.api.auth import AuthContext, StoredUser


class EmptyAuthContext(AuthContext):
    """What a broker with an empty user database hands a backend's `configure`: no stored
    users, and the given broker-wide settings (the default user limited to loopback)."""

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self._settings = dict(settings) if settings is not None else {"default_user_only_loopback": True}

    def stored_user(self, name: str) -> StoredUser | None:
        return None

    def verify_password(self, user: StoredUser, password: str) -> bool:
        return False

    @property
    def settings(self) -> Mapping[str, Any]:
        return self._settings
