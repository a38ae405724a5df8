"""Declare arguments as plugins read them, and the way errors about them are worded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from lavin.api.errors import PreconditionFailed

Arguments = Mapping[str, Any]


class InvalidArgument(PreconditionFailed):
    """A declare argument a queue type refuses. The core names the queue in the reply, as
    RabbitMQ does: "invalid arg 'x-max-age' for queue 'q' in vhost '/': invalid_max_age"."""

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"invalid arg '{argument}': {reason}")
        self.argument = argument
        self.reason = reason


def field_type(value: object) -> str:
    """The AMQP field type RabbitMQ names in errors (clients send small ints as signedint)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "longstr"


_DAY_MS: Final = 86_400_000
_DURATION_UNIT_MS: Final = {"Y": 365 * _DAY_MS, "M": 30 * _DAY_MS, "D": _DAY_MS, "h": 3_600_000, "m": 60_000, "s": 1000}


def parse_duration(text: str) -> int | None:
    """Milliseconds of a RabbitMQ duration: a positive integer and one unit of Y M D h m s
    (`7D`, `12h`; a month is 30 days, a year 365). None when `text` is not one."""
    digits, unit = text[:-1], text[-1:]
    if not (digits.isascii() and digits.isdigit()) or unit not in _DURATION_UNIT_MS or not int(digits):
        return None
    return int(digits) * _DURATION_UNIT_MS[unit]
