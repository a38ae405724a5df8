"""What the metadata files can hold, checked before anything is applied.

Definitions, policies, parameters and users are written to disk before they take effect;
a value that cannot be written must be refused first, with a reason, rather than fail
half-way through a write. One checker serves every file: values nest at most as deep as an
AMQP field table may (`MAX_DEPTH`), every string is valid UTF-8 (no lone surrogates), and
names and table keys fit an AMQP short string. The walk is iterative, so a value nested
deeper than the interpreter's recursion limit is refused like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from lavin.api.field_table import MAX_DEPTH

MAX_NAME_BYTES: Final = 255  # an AMQP short string


class UnstorableValue(ValueError):
    """A value the metadata files cannot hold; its text names the value and says why."""


def check_name(name: object, what: str) -> None:
    """A queue, exchange or other object name, or a routing key: a short string."""
    if not isinstance(name, str):
        raise UnstorableValue(f"{what} must be a string")
    if len(_utf8(name, what)) > MAX_NAME_BYTES:
        raise UnstorableValue(f"{what} must be at most {MAX_NAME_BYTES} bytes")


def check_value(value: object, what: str, *, field_table: bool = False) -> None:
    """A JSON-like value (dicts, lists, scalars) to be stored as `what`. With `field_table`,
    keys must also fit a field table's short-string keys, as declare arguments must."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            _utf8(item, what)
        elif isinstance(item, Mapping | list):
            if depth >= MAX_DEPTH:
                raise UnstorableValue(f"{what}: nested more than {MAX_DEPTH} deep")
            if isinstance(item, list):
                pending.extend((element, depth + 1) for element in item)
                continue
            for key, element in item.items():
                if not isinstance(key, str):
                    raise UnstorableValue(f"{what}: key {key!r} is not a string")
                if field_table:
                    check_name(key, f"{what}: key")
                else:
                    _utf8(key, what)
                pending.append((element, depth + 1))


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnstorableValue(f"{what}: not valid UTF-8 (a lone surrogate)") from None
