"""What a connection's user may do: the permission checks of the protocol, with RabbitMQ's
rules and texts, and the user's authorizer's answers cached per connection.

An authorizer may answer later (an awaitable). A check then raises `NeedsAuthorization`
before the method has done anything; the connection stops reading at that frame, waits
for the answer, which lands in the cache, and parses the frame again.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable
from typing import Final

from lavin.api import errors
from lavin.api.auth import Access, Authorizer, Permission, ResourceKind, User, VHostPermissions
from lavin.api.patterns import Pattern, compile_pattern
from lavin.api.printable import printable

log = logging.getLogger(__name__)

# Answers kept per connection; a full cache starts over (RabbitMQ keeps 12 per channel).
CACHE_SIZE: Final = 1024
# Names whose answer each shared NamePatterns keeps per permission (shared: kept small).
NAME_ANSWERS: Final = 256
# The default exchange's name in permission checks, as in RabbitMQ.
DEFAULT_EXCHANGE: Final = "amq.default"

# An empty pattern allows nothing.
MATCHES_NOTHING: Final = compile_pattern(r"\b\B")

# (kind, name, permission, routing key): what was asked, within the connection's vhost
Question = tuple[ResourceKind, str, Permission, str]


class NeedsAuthorization(Exception):
    """The frame being parsed waits for `answer`: parse it again once that is done."""

    def __init__(self, answer: Awaitable[object]) -> None:
        super().__init__("waiting for an authorizer")
        self.answer = answer


class NamePatterns:
    """An authorizer's configure / write / read patterns on the connection's vhost, matched
    here: RabbitMQ's rule (an unanchored search; an empty pattern allows nothing)."""

    def __init__(self, permissions: VHostPermissions) -> None:
        self.configure = self._compile(permissions.configure)
        self.write = self._compile(permissions.write)
        self.read = self._compile(permissions.read)
        # Answers by name, per permission: an RE2 search costs several dict lookups, and a
        # publisher moving between exchanges asks about the same few names again.
        self._configure_answers: dict[str, bool] = {}
        self._write_answers: dict[str, bool] = {}
        self._read_answers: dict[str, bool] = {}

    @staticmethod
    def _compile(pattern: str) -> Pattern | None:
        """None for ".*" (RabbitMQ's default, which every name matches): no search then."""
        if pattern == ".*":
            return None
        return compile_pattern(pattern) if pattern else MATCHES_NOTHING

    def allows(self, permission: Permission, name: str) -> bool:
        if permission == "configure":
            pattern, answers = self.configure, self._configure_answers
        elif permission == "write":
            pattern, answers = self.write, self._write_answers
        else:
            pattern, answers = self.read, self._read_answers
        if pattern is None:
            return True
        answer = answers.get(name)
        if answer is None:
            if len(answers) >= NAME_ANSWERS:  # a full cache starts over
                answers.clear()
            answer = answers[name] = pattern.search(name)
        return answer


# Connections with the same permissions share one NamePatterns.
shared_name_patterns = functools.lru_cache(maxsize=256)(NamePatterns)


class Authorization:
    """The permission checks of one connection."""

    def __init__(self, user: User) -> None:
        self.user = user
        self.vhost = ""  # set by connection.open
        # The authorizer's patterns on the vhost, when it answers by them alone: a queue or
        # exchange name is then matched here, without a call or a cache entry per name.
        self._patterns: NamePatterns | None = None
        # Allowed answers, and refusals that came late: a late refusal is read once, by the
        # frame parsed again for it, so that a refusal is never kept (as in RabbitMQ). Made
        # on first use: with an authorizer's patterns most connections never keep one.
        self._answers: dict[Question, bool] | None = None
        # Bumped when permissions change, so that an answer asked for before is not kept.
        self._generation = 0

    def forget(self) -> None:
        """Permissions changed: ask the authorizer again from now on."""
        self._answers = None
        self._generation += 1
        if self.vhost:
            self._patterns = self._vhost_patterns()

    def _vhost_patterns(self) -> NamePatterns | None:
        try:
            permissions = self._authorizer().vhost_permissions(self.vhost)
            return None if permissions is None else shared_name_patterns(permissions)
        except Exception:  # a broken authorizer or pattern: ask `check`, which refuses
            log.exception("authorizer of user '%s' failed on vhost permissions", printable(self.user.name))
            return None

    # ---- the checks ----------------------------------------------------------------------

    def require_vhost(self, vhost: str) -> None:
        """connection.open: 530 unless the user may use `vhost`."""
        self.vhost = vhost
        if not self._allows(("vhost", vhost, "access", "")):
            raise errors.NotAllowed(f"access to vhost '{vhost}' refused for user '{self.user.name}'", 10, 40)
        self._patterns = self._vhost_patterns()

    def require(self, kind: ResourceKind, name: str, permission: Permission) -> None:
        """403 unless the user may `permission` the queue or exchange `name`."""
        if kind == "exchange" and not name:
            name = DEFAULT_EXCHANGE
        patterns = self._patterns
        if patterns is not None:
            allowed = patterns.allows(permission, name)
        else:
            allowed = self._allows((kind, name, permission, ""))
        if not allowed:
            raise errors.AccessRefused(
                f"access to {kind} '{name}' in vhost '{self.vhost}' refused for user '{self.user.name}'"
            )

    def require_topic(self, exchange: str, permission: Permission, routing_key: str) -> None:
        """403 unless the user may `permission` (write: publish, read: bind) with
        `routing_key` on the topic exchange `exchange` (RabbitMQ's topic permissions)."""
        if not self._allows(("topic", exchange, permission, routing_key)):
            raise errors.AccessRefused(
                f"access to topic '{routing_key}' in exchange '{exchange}' in vhost '{self.vhost}' "
                f"refused for user '{self.user.name}'"
            )

    # ---- answers -------------------------------------------------------------------------

    def _allows(self, question: Question) -> bool:
        answers = self._answers
        if answers is not None:
            answer = answers.get(question)
            if answer is not None:
                if not answer:
                    del answers[question]
                return answer
        kind, name, permission, routing_key = question
        access = Access(self.vhost, kind, name, permission, routing_key)
        try:
            # object: a plugin's answer is not trusted to be of the declared type
            result: object = self._authorizer().check(access)
        except Exception:  # a broken authorizer refuses, and costs this check only
            log.exception("authorizer of user '%s' failed on %s", printable(self.user.name), printable(repr(access)))
            return False
        if isinstance(result, bool):
            allowed = result
        elif inspect.isawaitable(result):
            raise NeedsAuthorization(self._fetch(question, access, result))
        else:
            allowed = bool(result)
        if allowed and kind != "vhost":  # asked once per connection: not worth its memory
            self._keep(question, True)
        return allowed

    async def _fetch(self, question: Question, access: Access, pending: Awaitable[object]) -> None:
        generation = self._generation
        try:
            answer = bool(await pending)
        except Exception:  # as above: a refusal
            log.exception("authorizer of user '%s' failed on %s", printable(self.user.name), printable(repr(access)))
            answer = False
        if generation == self._generation:  # else permissions changed meanwhile: ask again
            self._keep(question, answer)

    def _keep(self, question: Question, answer: bool) -> None:
        answers = self._answers
        if answers is None or len(answers) >= CACHE_SIZE:  # a full cache starts over
            answers = self._answers = {}
        answers[question] = answer

    def _authorizer(self) -> Authorizer:
        authorizer = self.user.authorizer
        assert authorizer is not None  # User.__post_init__ sets one
        return authorizer
