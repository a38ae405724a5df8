"""JSON from outside the broker (management request bodies, definitions files), decoded
with the bounds the rest of the broker relies on.

- Nesting: at most MAX_DEPTH objects and arrays inside each other, the bound of AMQP field
  tables. Code that walks a decoded value (the definitions writer, the field table encoder,
  the policy checks) recurses; without the bound a document 5,000 deep ended in a
  RecursionError and thousands of lines of traceback. The check is one pass of an RE2
  automaton over the bytes (depth at most N is a regular language), linear in the size:
  about a fifth of what json.loads itself takes.
- Text: UTF-8 only, and no lone surrogate escape (`"\\ud800"`). json.loads accepts one,
  but the str it gives cannot be encoded to UTF-8, so writing it to a file or the wire
  failed later, after the object had been half made.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information
from lavin.api.field_table import MAX_DEPTH


class RefusedJSON(ValueError):
    """Valid JSON the broker does not take: nested too deep, or not Unicode text."""


TOO_DEEP: Final = f"JSON nested more than {MAX_DEPTH} deep"


def _depth_automaton(bound: int) -> Any:
    """A pattern matching exactly the JSON texts whose objects and arrays nest at most
    `bound` deep: strings are skipped whole, so brackets in them do not count."""
    string = r'"(?:[^"\\]+|\\.)*"'
    flat = r'[^"\[\]{}]+'
    level = f"(?:{string}|{flat})*"
    for _ in range(bound):
        level = rf"(?:{string}|{flat}|[\[{{]{level}[\]}}])*"
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1  # bytes: UTF-8 was checked before
    options.dot_nl = True
    options.never_capture = True
    options.max_mem = 64 << 20  # the program is about 2,000 states; the rest is DFA cache
    return re2.compile(level.encode(), options)


_WITHIN_DEPTH: Final = _depth_automaton(MAX_DEPTH)
# Any escape of a surrogate: the cheap test a document passes when it holds none.
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")
# Escapes read left to right: an escaped backslash, a valid pair, or a lone surrogate
# (group 1). The backslash alternative keeps `\\ud800` (a backslash, then text) out.
_ESCAPES: Final = re.compile(
    rb"\\(?:\\|u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(u[dD][89a-fA-F][0-9a-fA-F]{2}))"
)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")  # json.loads takes NaN and Infinity; RFC 8259 does not


def parse_json(data: bytes) -> Any:
    """The value `data` holds. Raises RefusedJSON (naming why) for a document nested over
    MAX_DEPTH deep or holding a lone surrogate, another ValueError for text that is not
    JSON (NaN and Infinity included) or not UTF-8."""
    text = data.decode("utf-8")
    try:
        value = json.loads(text, parse_constant=_not_json)
    except RecursionError:  # json's own recursion bound (about 1,000) passed
        raise RefusedJSON(TOO_DEEP) from None
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and not _WITHIN_DEPTH.fullmatch(data):
        raise RefusedJSON(TOO_DEEP)
    if _SURROGATE_ESCAPE.search(data):
        for escape in _ESCAPES.finditer(data):
            if escape[1]:
                lone = escape[1].decode()
                raise RefusedJSON(f"JSON string with a lone surrogate \\{lone}: not Unicode text")
    return value
