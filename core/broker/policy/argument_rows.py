"""What a row of the argument tables (`lavin.broker.policy.queue_arguments`) is made of.

A row declares one `x-` argument: the kind of value it takes, whether a redeclare must
repeat it, the policy key that may set it (and whether an operator policy may), which side
wins when both the argument and a policy set it, and the queue types that refuse it. A
kind of value knows three things: how the core checks the argument at declare (with
RabbitMQ's reasons), whether a policy's JSON value fits, and how the docs describe it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from lavin.api.arguments import Arguments, InvalidArgument, field_type, parse_duration


class ValueKind(ABC):
    """The kind of value an argument or policy key takes."""

    @abstractmethod
    def describe(self) -> str:
        """The kind in a few words, for the docs' table."""

    @abstractmethod
    def fits_policy(self, value: Any) -> bool:
        """Whether a policy may set this JSON value."""

    def parse(self, arguments: Arguments, name: str) -> Any:
        """The argument as the core acts on it; InvalidArgument with RabbitMQ's reason.
        Only the kinds of the arguments the core acts on (a row with a `setting`) have one."""
        raise TypeError(f"the core does not parse {type(self).__name__} arguments")


@dataclass(frozen=True)
class Integer(ValueKind):
    """An integer of at least `minimum`; `maximum` bounds what a policy may set (a queue type
    checks its own arguments' upper bounds). `unit` is for the docs."""

    minimum: int
    maximum: int | None = None
    unit: str = ""

    def describe(self) -> str:
        bounds = f"≥ {self.minimum}" if self.maximum is None else f"{self.minimum} to {self.maximum:,}"
        return f"integer {bounds}" + (f" ({self.unit})" if self.unit else "")

    def fits_policy(self, value: Any) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value >= self.minimum
            and (self.maximum is None or value <= self.maximum)
        )

    def parse(self, arguments: Arguments, name: str) -> int | None:
        value = arguments.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(name, f'"expected integer, got {field_type(value)}"')
        if value < self.minimum:
            raise InvalidArgument(name, f"{{value_negative,{value}}}" if value < 0 else f"{{value_zero,{value}}}")
        return value


@dataclass(frozen=True)
class Text(ValueKind):
    """A string (a long string in AMQP, which must be UTF-8)."""

    def describe(self) -> str:
        return "string"

    def fits_policy(self, value: Any) -> bool:
        return isinstance(value, str)

    def parse(self, arguments: Arguments, name: str) -> str | None:
        value = arguments.get(name)
        if value is None:
            return None
        if isinstance(value, bytes):  # a long string that is not UTF-8
            raise InvalidArgument(name, "invalid_utf8")
        if not isinstance(value, str):
            raise InvalidArgument(name, f"{{unacceptable_type,{field_type(value)}}}")
        return value


@dataclass(frozen=True)
class OneOf(ValueKind):
    """One of a few values. At declare it is a string, and an empty one counts as absent
    (`default`); `invalid` is RabbitMQ's reason for any other string."""

    choices: tuple[str | int, ...]
    default: str | None = None
    invalid: str = ""

    def describe(self) -> str:
        quoted = [f"`{choice}`" for choice in self.choices]
        return ", ".join(quoted[:-1]) + f" or {quoted[-1]}"

    def fits_policy(self, value: Any) -> bool:
        return not isinstance(value, bool) and value in self.choices

    def parse(self, arguments: Arguments, name: str) -> str | None:
        value = Text().parse(arguments, name) or self.default
        if value is not None and value not in self.choices:
            raise InvalidArgument(name, self.invalid)
        return value


@dataclass(frozen=True)
class Flag(ValueKind):
    """A boolean. Present with no value (void) it is refused, not taken as absent."""

    default: bool = False

    def describe(self) -> str:
        return "boolean"

    def fits_policy(self, value: Any) -> bool:
        return isinstance(value, bool)

    def parse(self, arguments: Arguments, name: str) -> bool:
        value = arguments.get(name, self.default)
        if not isinstance(value, bool):
            raise InvalidArgument(name, f"{{unacceptable_type,{field_type(value)}}}")
        return value


@dataclass(frozen=True)
class Duration(ValueKind):
    """RabbitMQ's duration: a positive integer and one unit of Y M D h m s (`7D`)."""

    def describe(self) -> str:
        return "duration (`7D`, `12h`)"

    def fits_policy(self, value: Any) -> bool:
        return isinstance(value, str) and parse_duration(value) is not None


class Precedence(Enum):
    """Which value a queue acts on when its argument and the effective policy both set one."""

    LOWEST = "the lower"
    ARGUMENT = "the argument"
    POLICY = "the policy"


class Requirement(NamedTuple):
    """Another argument this one needs, and RabbitMQ's reason when it is missing."""

    argument: str
    reason: str


@dataclass(frozen=True)
class Argument:
    """One row: everything the broker knows about one declare argument."""

    name: str
    kind: ValueKind
    checked_by: str = "core"  # who checks it at declare, for the docs: the core, a queue type, or no one
    setting: str | None = None  # the `QueueSettings` field the core parses it into
    compared: bool = False  # a redeclare must repeat it (RabbitMQ's equivalence check)
    requires: Requirement | None = None
    policy_key: str | None = None  # the key a policy sets it with
    policy_reason: str = ""  # RabbitMQ's text after a policy value that does not fit `kind`
    operator_policy: bool = False  # an operator policy may set it too (a cap: the lower value wins)
    precedence: Precedence | None = None  # None: a policy's value is stored and has no effect
    precedence_by_type: tuple[tuple[str, Precedence | None], ...] = ()  # exceptions, by queue type
    refused_by: frozenset[str] = frozenset()  # queue types (`stream`: every stream) that refuse it

    def precedence_for(self, type_name: str) -> Precedence | None:
        return dict(self.precedence_by_type).get(type_name, self.precedence)
