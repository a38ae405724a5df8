"""What a connection's user may do: the permission checks of the protocol, with RabbitMQ's
rules and texts, and the user's authorizer's answers cached per connection.

An authorizer may answer later (an awaitable). A check then raises `NeedsAuthorization`
before the method has done anything; the connection stops reading at that frame, waits
for the answer, which lands in the cache, and parses the frame again.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable
from typing import Final

from lavin.api import errors
from lavin.api.auth import Access, Authorizer, Permission, ResourceKind, User
from lavin.api.printable import printable

log = logging.getLogger(__name__)

# Answers kept per connection; a full cache starts over (RabbitMQ keeps 12 per channel).
CACHE_SIZE: Final = 1024
# The default exchange's name in permission checks, as in RabbitMQ.
DEFAULT_EXCHANGE: Final = "amq.default"

# (kind, name, permission, routing key): what was asked, within the connection's vhost
Question = tuple[ResourceKind, str, Permission, str]


class NeedsAuthorization(Exception):
    """The frame being parsed waits for `answer`: parse it again once that is done."""

    def __init__(self, answer: Awaitable[object]) -> None:
        super().__init__("waiting for an authorizer")
        self.answer = answer


class Authorization:
    """The permission checks of one connection."""

    def __init__(self, user: User) -> None:
        self.user = user
        self.vhost = ""  # set by connection.open
        # Allowed answers, and refusals that came late: a late refusal is read once, by the
        # frame parsed again for it, so that a refusal is never kept (as in RabbitMQ).
        self._answers: dict[Question, bool] = {}
        # Bumped when permissions change, so that an answer asked for before is not kept.
        self._generation = 0

    def forget(self) -> None:
        """Permissions changed: ask the authorizer again from now on."""
        self._answers.clear()
        self._generation += 1

    # ---- the checks ----------------------------------------------------------------------

    def require_vhost(self, vhost: str) -> None:
        """connection.open: 530 unless the user may use `vhost`."""
        self.vhost = vhost
        if not self._allows(("vhost", vhost, "access", "")):
            raise errors.NotAllowed(f"access to vhost '{vhost}' refused for user '{self.user.name}'", 10, 40)

    def require(self, kind: ResourceKind, name: str, permission: Permission) -> None:
        """403 unless the user may `permission` the queue or exchange `name`."""
        if kind == "exchange" and not name:
            name = DEFAULT_EXCHANGE
        if not self._allows((kind, name, permission, "")):
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
        answer = answers.get(question)
        if answer is not None:
            if not answer:
                del answers[question]
            return answer
        kind, name, permission, routing_key = question
        access = Access(self.vhost, kind, name, permission, routing_key)
        try:
            result = self._authorizer().check(access)
        except Exception:  # a broken authorizer refuses, and costs this check only
            log.exception("authorizer of user '%s' failed on %s", printable(self.user.name), printable(repr(access)))
            return False
        if inspect.isawaitable(result):
            raise NeedsAuthorization(self._fetch(question, access, result))
        if result and kind != "vhost":  # asked once per connection: not worth its memory
            self._keep(question, True)
        return bool(result)

    async def _fetch(self, question: Question, access: Access, pending: Awaitable[bool]) -> None:
        generation = self._generation
        try:
            answer = bool(await pending)
        except Exception:  # as above: a refusal
            log.exception("authorizer of user '%s' failed on %s", printable(self.user.name), printable(repr(access)))
            answer = False
        if generation == self._generation:  # else permissions changed meanwhile: ask again
            self._keep(question, answer)

    def _keep(self, question: Question, answer: bool) -> None:
        if len(self._answers) >= CACHE_SIZE:
            self._answers.clear()
        self._answers[question] = answer

    def _authorizer(self) -> Authorizer:
        authorizer = self.user.authorizer
        assert authorizer is not None  # User.__post_init__ sets one
        return authorizer
