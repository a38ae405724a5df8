"""User-supplied regular expressions (permissions, policies, list and metrics filters).

They are matched by RE2, in time linear in the name: a pattern with nested repetition
(`^(\\w+\\.?)*$`) cannot stall the event loop, as it does under Python's backtracking `re`.
RE2 refuses what it cannot match in linear time (backreferences, lookahead, lookbehind,
possessive quantifiers); a pattern whose compiled program is over MAX_PROGRAM_SIZE
instructions is refused too, since a match costs up to the name's length times the
program's size. Such a pattern is refused where it is given, with the reason.

A request's filter runs over every object of a kind: `matching` runs it in a worker
thread, which RE2 lets run while it matches (it releases the GIL), so the event loop serves
other clients meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from typing import Final

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

# The extension under re2's `re`-like wrapper: the wrapper's search maps byte offsets back
# to characters and builds a match object, six times the cost of the match itself.
_RE2: Final = re2._re2.RE2
_UNANCHORED: Final = _RE2.Anchor.UNANCHORED
# Only whether a pattern matches is asked: no capture groups to track. RE2 would also log
# each refused pattern to stderr; the caller reports it instead.
_OPTIONS: Final = re2.Options()
_OPTIONS.never_capture = True
_OPTIONS.log_errors = False
# Counted repetitions multiply a program: `((a|aa|aaa|a?){1,50}){1,20}x` compiles to about
# 8,000 instructions and costs 25 ms against a 255-byte name. Programs within this bound
# cost about half a millisecond at most in the worst cases measured, and every pattern a user
# writes by hand fits (`\\pL+` is 1,201, `^\\w{1,255}$` 1,021).
MAX_PROGRAM_SIZE: Final = 2_000


def _utf8(text: str) -> bytes:
    # surrogatepass: a JSON body may carry a lone surrogate; RE2 refuses it in a pattern,
    # and it matches nothing in a name, rather than raising here.
    return text.encode("utf-8", "surrogatepass")


class PatternError(ValueError):
    """A pattern RE2 refuses: `reason` is RE2's, the message names the pattern too."""

    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(f"invalid regular expression '{pattern}': {reason}")
        self.pattern = pattern
        self.reason = reason


class Pattern:
    """One compiled pattern, searched unanchored (as `re.search`, and RabbitMQ's `re:run`)."""

    __slots__ = ("_regexp", "text")

    def __init__(self, text: str) -> None:
        regexp = _RE2(_utf8(text), _OPTIONS)
        if not regexp.ok():
            raise PatternError(text, regexp.error().decode("utf-8", "replace"))
        size = regexp.ProgramSize()
        if size > MAX_PROGRAM_SIZE:
            raise PatternError(text, f"pattern too large: {size} instructions, at most {MAX_PROGRAM_SIZE}")
        self._regexp = regexp
        self.text = text

    def search(self, name: str) -> bool:
        """True when the pattern matches somewhere in `name`."""
        encoded = _utf8(name)
        first_span: tuple[int, int] = self._regexp.Match(_UNANCHORED, encoded, 0, len(encoded))[0]
        return first_span[0] != -1

    async def matching(self, names: Iterable[str]) -> set[str]:
        """The names the pattern matches, searched off the event loop."""
        listed = list(names)
        return await asyncio.to_thread(lambda: {name for name in listed if self.search(name)})


# Compiled once per pattern: a permission or a policy is matched against many names. Only
# patterns an administrator stored go through it; a request's filter compiles its own.
compile_pattern = functools.lru_cache(maxsize=1024)(Pattern)
