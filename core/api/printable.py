"""Client-supplied text made safe for a log line.

User names, vhost, queue and exchange names, reply texts and client properties come from
the network. Logged as they are, a newline in one starts a line the client wrote (a forged
entry) and an escape sequence rewrites the operator's terminal.
"""

from __future__ import annotations

from typing import Final

_NAMED_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(value: object) -> str:
    """`value` as text with every non-printable character written as an escape (`\\n`,
    `\\x1b`, `\\u2028`); printable text comes back unchanged."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
