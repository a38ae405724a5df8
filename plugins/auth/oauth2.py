"""RabbitMQ's OAuth 2.0 backend (rabbitmq_auth_backend_oauth2): the password is a JWT.

The token is verified against the keys of a JWKS (a file, or a URL fetched and cached),
must not have expired, and must name `resource_server_id` in `aud` (unless `verify_aud`
is false) and `issuer` in `iss` (when set). The user name is the first of
`preferred_username_claims` the token holds as a string; the AMQP user name is ignored.

What the user may do comes from the token's scopes (the `scope` claim, a space-separated
string or a list). Only scopes that begin with `scope_prefix` (`<resource_server_id>.` by
default) count, the prefix removed:

- `read:VHOST/NAME`, `write:VHOST/NAME`, `configure:VHOST/NAME`: that permission on the
  queues and exchanges NAME of vhost VHOST; any such scope opens VHOST;
- `read:VHOST/EXCHANGE/ROUTING_KEY`, `write:...`: routing keys on a topic exchange (only
  three-part scopes grant topic access, as in RabbitMQ);
- `tag:TAG`: a user tag (`tag:administrator`).

Patterns are RabbitMQ's wildcards: `*` matches any text, everything else itself, the whole
name; each part is URL-decoded (`%2F` for the vhost "/"). A pattern with a bad `%` escape
matches nothing.

PyJWT is imported when the backend is configured, so a broker that does not use this
backend does not pay for the import (nor aiohttp's, when the keys come from a file).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus, urlsplit

from lavin.api import Access, AccessRefused, AuthBackend, AuthContext, Authorizer, User, printable
from lavin.api.patterns import Pattern, PatternError

if TYPE_CHECKING:
    import jwt

log = logging.getLogger(__name__)

SETTINGS = (
    "resource_server_id",
    "scope_prefix",
    "verify_aud",
    "issuer",
    "algorithms",
    "jwks_file",
    "jwks_url",
    "default_key",
    "preferred_username_claims",
)
DEFAULT_ALGORITHMS = ("RS256",)
DEFAULT_USERNAME_CLAIMS = ("sub", "client_id")
MAX_SCOPES = 2048  # RabbitMQ's limit
JWKS_TIMEOUT = 15.0
# An unknown key id makes the backend fetch jwks_url again (the provider rotated its keys),
# at most this often: a flood of tokens with made-up key ids must not become a flood of
# requests to the provider.
JWKS_REFETCH_INTERVAL = 30.0
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")  # base64url, three parts
REFUSED = "Authentication using an OAuth 2/JWT token failed"
PERMISSIONS = ("read", "write", "configure")


class OAuth2Auth(AuthBackend):
    name = "oauth2"

    def __init__(self) -> None:
        self.resource_server_id = ""
        self.scope_prefix = ""
        self.verify_aud = True
        self.issuer: str | None = None
        self.algorithms: list[str] = list(DEFAULT_ALGORITHMS)
        self.username_claims: tuple[str, ...] = DEFAULT_USERNAME_CLAIMS
        self.default_key: str | None = None
        self.jwks_url: str | None = None
        self._keys: dict[str, jwt.PyJWK] = {}  # key id ("" for a key without one) -> key
        self._fetched_at: float | None = None
        self._fetching: asyncio.Future[None] | None = None

    def configure(self, settings: Mapping[str, str], context: AuthContext) -> None:
        import jwt
        from jwt.algorithms import get_default_algorithms

        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
        self.resource_server_id = settings.get("resource_server_id", "")
        if not self.resource_server_id:
            raise ValueError("resource_server_id must be set: the audience tokens must name")
        self.scope_prefix = settings.get("scope_prefix", f"{self.resource_server_id}.")
        self.verify_aud = _boolean(settings, "verify_aud", default=True)
        self.issuer = settings.get("issuer") or None
        self.algorithms = _names(settings, "algorithms", DEFAULT_ALGORITHMS)
        supported = get_default_algorithms()
        for algorithm in self.algorithms:
            if algorithm not in supported or algorithm == "none":
                raise ValueError(f"algorithm {algorithm!r} is not supported; known: {', '.join(sorted(supported))}")
        self.username_claims = tuple(_names(settings, "preferred_username_claims", DEFAULT_USERNAME_CLAIMS))
        self.default_key = settings.get("default_key") or None
        jwks_file, self.jwks_url = settings.get("jwks_file"), settings.get("jwks_url")
        if (jwks_file is None) == (self.jwks_url is None):
            raise ValueError("exactly one of jwks_file and jwks_url must be set")
        if jwks_file is not None:
            try:
                self._keys = _key_set(json.loads(Path(jwks_file).read_text()))
            except (OSError, ValueError, jwt.PyJWTError) as exc:
                raise ValueError(f"cannot read the keys in jwks_file {jwks_file}: {exc}") from exc
        else:
            assert self.jwks_url is not None
            if urlsplit(self.jwks_url).scheme not in ("http", "https"):
                raise ValueError(f"jwks_url must be an http:// or https:// URL, not {self.jwks_url!r}")
            import aiohttp  # noqa: F401 - a missing install stops start-up here, not at the first login

    async def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        if not TOKEN_SHAPE.fullmatch(password):
            return None  # not a JWT: a password for the next backend
        try:
            return await self.user_from_token(password)
        except AccessRefused as exc:
            # As in RabbitMQ a refusal is not final: the next backend is asked.
            log.info("OAuth 2 login (user name '%s') from %s refused: %s", printable(username), peer_host, exc.text)
            return None

    async def update_secret(self, user: User, secret: str) -> User:
        updated = await self.user_from_token(secret)
        if updated.name != user.name:
            raise AccessRefused("Not allowed to change username on refreshed token")
        return updated

    async def user_from_token(self, token: str) -> User:
        """The user a token speaks for; AccessRefused (with the reason) if it is not valid."""
        claims = self._verify(token, await self._key(token))
        scopes = self._scopes(claims)
        name = next((claims[c] for c in self.username_claims if isinstance(claims.get(c), str)), "unknown")
        grants = tuple(grant for grant in map(ScopeGrant.parse, scopes) if grant is not None)
        tags = tuple(sorted({scope.removeprefix("tag:") for scope in scopes if scope.startswith("tag:")}))
        # exp is wall-clock time; the core watches the monotonic clock.
        expires_at = time.monotonic() + (float(claims["exp"]) - time.time())
        return User(name, tags=tags, authorizer=ScopeAuthorizer(grants), expires_at=expires_at)

    def _verify(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        import jwt

        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=self.algorithms,
                audience=self.resource_server_id if self.verify_aud else None,
                issuer=self.issuer,
                options={"require": ["exp"], "verify_aud": self.verify_aud},
            )
        except jwt.PyJWTError as exc:
            raise AccessRefused(f"{REFUSED}: {exc}") from None
        return claims

    async def _key(self, token: str) -> jwt.PyJWK:
        """The key the token's header names (`kid`), or `default_key`, or the only key."""
        import jwt

        try:
            key_id = jwt.get_unverified_header(token).get("kid") or self.default_key or ""
        except jwt.PyJWTError as exc:
            raise AccessRefused(f"{REFUSED}: {exc}") from None
        if not isinstance(key_id, str):
            raise AccessRefused(f"{REFUSED}: the kid header is not a string")
        if self.jwks_url is not None and key_id not in self._keys and (self._fetching is not None or self._may_fetch()):
            await self._fetch_keys()
        key = self._keys.get(key_id)
        if key is None and not key_id and len(self._keys) == 1:
            (key,) = self._keys.values()
        if key is None:
            raise AccessRefused(f"{REFUSED}: no signing key {key_id!r}" if key_id else f"{REFUSED}: no signing key")
        return key

    def _may_fetch(self) -> bool:
        return self._fetched_at is None or time.monotonic() - self._fetched_at >= JWKS_REFETCH_INTERVAL

    async def _fetch_keys(self) -> None:
        """Fetch jwks_url once, however many logins wait for it."""
        if self._fetching is None:
            self._fetching = asyncio.ensure_future(self._download_keys())
        await asyncio.shield(self._fetching)

    async def _download_keys(self) -> None:
        import aiohttp
        import jwt

        assert self.jwks_url is not None
        self._fetched_at = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=JWKS_TIMEOUT)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(self.jwks_url) as response:
                response.raise_for_status()
                self._keys = _key_set(json.loads(await response.read()))
        except (TimeoutError, aiohttp.ClientError, ValueError, jwt.PyJWTError) as exc:
            log.warning(
                "cannot fetch the OAuth 2 signing keys from %s: %s", self.jwks_url, str(exc) or type(exc).__name__
            )
        finally:
            self._fetching = None

    def _scopes(self, claims: Mapping[str, Any]) -> list[str]:
        """The token's scopes for this resource server, the prefix removed."""
        scope = claims.get("scope", [])
        listed = scope.split() if isinstance(scope, str) else scope
        if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
            raise AccessRefused(f"{REFUSED}: the scope claim is neither a string nor a list of strings")
        mine = sorted({item.removeprefix(self.scope_prefix) for item in listed if item.startswith(self.scope_prefix)})
        if len(mine) > MAX_SCOPES:
            raise AccessRefused(f"{REFUSED}: too many scopes")
        return mine


@dataclass(frozen=True, slots=True)
class ScopeGrant:
    """One permission scope: `PERMISSION:VHOST/NAME[/ROUTING_KEY]`, as patterns."""

    permission: str
    vhost: Pattern | None  # None: a pattern that matches nothing
    name: Pattern | None
    routing_key: Pattern | None
    has_routing_key: bool

    @classmethod
    def parse(cls, scope: str) -> ScopeGrant | None:
        """The grant a scope makes; None for a tag or anything else."""
        permission, colon, resource = scope.partition(":")
        parts = resource.split("/")
        if not colon or permission not in PERMISSIONS or len(parts) not in (2, 3):
            return None
        patterns = [wildcard(part) for part in parts]
        routing_key = patterns[2] if len(parts) == 3 else None
        return cls(permission, patterns[0], patterns[1], routing_key, len(parts) == 3)

    def opens(self, vhost: str) -> bool:
        return _matches(self.vhost, vhost)

    def allows(self, access: Access) -> bool:
        if access.permission != self.permission or not (self.opens(access.vhost) and _matches(self.name, access.name)):
            return False
        if access.kind == "topic":
            return self.has_routing_key and _matches(self.routing_key, access.routing_key)
        return True


class ScopeAuthorizer(Authorizer):
    """What a token's scopes allow; answered at once."""

    def __init__(self, grants: tuple[ScopeGrant, ...]) -> None:
        self.grants = grants

    def check(self, access: Access) -> bool:
        if access.kind == "vhost":
            return any(grant.opens(access.vhost) for grant in self.grants)
        return any(grant.allows(access) for grant in self.grants)


def wildcard(pattern: str) -> Pattern | None:
    """RabbitMQ's wildcard pattern as a regular expression matched against a whole name:
    `*` is any text; the text between is URL-decoded. RE2 matches it in linear time (a
    scope of many stars would backtrack for minutes on a long name). None when a `%`
    escape is bad, or the text is not valid Unicode."""
    parts = pattern.split("*")
    if not all(_BAD_ESCAPE.search(part) is None for part in parts):
        return None
    try:
        return Pattern("^(?s:" + ".*".join(_literal(unquote_plus(part)) for part in parts) + ")$")
    except PatternError:
        return None


_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _literal(text: str) -> str:
    """`text` as RE2 syntax that matches exactly it: all but letters and digits as `\\x{...}`."""
    return "".join(char if char.isalnum() else f"\\x{{{ord(char):x}}}" for char in text)


def _matches(pattern: Pattern | None, name: str) -> bool:
    return pattern is not None and pattern.search(name)


def _key_set(document: object) -> dict[str, jwt.PyJWK]:
    import jwt

    if not isinstance(document, dict):
        raise ValueError("a JWKS is a JSON object with a keys list")
    return {key.key_id or "": key for key in jwt.PyJWKSet.from_dict(document).keys}


def _boolean(settings: Mapping[str, str], key: str, *, default: bool) -> bool:
    text = settings.get(key)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, not {text!r}")
    return text.lower() == "true"


def _names(settings: Mapping[str, str], key: str, default: tuple[str, ...]) -> list[str]:
    text = settings.get(key)
    names = [name.strip() for name in text.split(",") if name.strip()] if text is not None else list(default)
    if not names:
        raise ValueError(f"{key} must name at least one")
    return names
