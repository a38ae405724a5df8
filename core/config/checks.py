"""The rules a setting's value must follow, each with the message that says it was broken.

Checks are data, not bare functions: `lavin serve` gives a flag the bounds of `Within` and
the choices of `OneOf` as its click type (lavin.cli), so a flag refuses what the config file
would. A message may name the setting as `{name}` and the value as `{value}`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Check(ABC):
    """A rule for the value of one setting."""

    @abstractmethod
    def complaint(self, name: str, value: Any, config: object) -> str | None:
        """What is wrong with `value` as setting `name` of `config`, or None if nothing is."""


@dataclass(frozen=True)
class OneOf(Check):
    """One of a few names."""

    choices: tuple[str, ...]
    # The flag takes any case too; the setting's convert lower-cases what the file or code gives.
    ignore_case: bool = False

    def complaint(self, name: str, value: Any, config: object) -> str | None:
        return None if value in self.choices else f"{name} must be one of {', '.join(self.choices)}"


@dataclass(frozen=True)
class Within(Check):
    """A number from `low` to `high` (no upper bound when None); a flag with this check takes
    a whole number."""

    low: int
    high: int | None
    message: str

    def complaint(self, name: str, value: Any, config: object) -> str | None:
        if value < self.low or (self.high is not None and value > self.high):
            return self.message.format(name=name, value=value)
        return None


@dataclass(frozen=True)
class Rule(Check):
    """A condition on the value alone (`bool`: it is not empty)."""

    condition: Callable[[Any], bool]
    message: str

    def complaint(self, name: str, value: Any, config: object) -> str | None:
        return None if self.condition(value) else self.message.format(name=name, value=value)


@dataclass(frozen=True)
class EveryItem(Check):
    """A condition on each item of a list; the message may name the first that fails as `{item}`."""

    condition: Callable[[str], bool]
    message: str

    def complaint(self, name: str, value: Any, config: object) -> str | None:
        failing = next((item for item in value if not self.condition(item)), None)
        return None if failing is None else self.message.format(name=name, item=failing)


@dataclass(frozen=True)
class Needs(Check):
    """While this setting is on, setting `other` must be set too."""

    other: str
    message: str

    def complaint(self, name: str, value: Any, config: object) -> str | None:
        return self.message.format(name=name, value=value) if value and not getattr(config, self.other) else None
