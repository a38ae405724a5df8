"""What one setting declares, in one place: a field of `Config` made by `setting(...)`.

From these declarations come the config file's keys (lavin.config.loader), the options of
`lavin serve` (lavin.cli), the checks every `Config` passes, and the table of every setting in
docs/configuration.md (lavin.config.reference, redrawn by lavin.reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar

from lavin.config.checks import Check
from lavin.config.errors import StartupError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
# The key of a Config field's metadata that holds its Setting.
SETTING: Final = "lavin.setting"


@dataclass(frozen=True)
class IniKey(Generic[T_co]):
    """`[section] key` in the config file, and how its text is read."""

    section: str
    key: str
    parse: Callable[[str], T_co]


@dataclass(frozen=True)
class Flag:
    """A `lavin serve` option. Its env var is LAVIN_ and the option's name: `--amqp-port`,
    LAVIN_AMQP_PORT."""

    name: str
    placeholder: str  # what the docs write after the name: `--data-dir DIR`
    help: str | None = None  # in `lavin serve --help`
    path: Literal["directory", "file"] | None = None  # click refuses a file for a directory, and the reverse

    @property
    def env_var(self) -> str:
        return "LAVIN_" + self.name.removeprefix("--").replace("-", "_").upper()


@dataclass(frozen=True)
class Setting:
    """Everything known about one setting besides its name, which is the field's."""

    default: Any
    meaning: str  # the docs table's last column, Markdown
    ini: IniKey[Any] | None = None
    flag: Flag | None = None
    # A value given in code (or by click) to the field's type, before it is checked.
    convert: Callable[[Any], Any] | None = None
    check: Check | None = None  # not run while the value is None: the setting is off
    # The docs table's default, when the value alone would say too little.
    shown_default: str | None = None


def setting(
    default: T,
    meaning: str,
    *,
    ini: IniKey[T] | None = None,
    flag: Flag | None = None,
    convert: Callable[[Any], T] | None = None,
    check: Check | None = None,
    shown_default: str | None = None,
) -> T:
    """A field of `Config` with its declaration (typed as the value, as `dataclasses.field` is)."""
    declared = Setting(default, meaning, ini, flag, convert, check, shown_default)
    return field(default=default, metadata={SETTING: declared})


def declared_settings(cls: type[DataclassInstance]) -> dict[str, Setting]:
    """The settings of a dataclass by field name, in field order."""
    return {item.name: item.metadata[SETTING] for item in fields(cls) if SETTING in item.metadata}


def settle(config: DataclassInstance) -> None:
    """Bring every setting of `config` to its type, then check each: the first complaint is
    raised as a StartupError. Checks run after every conversion, as some read other settings."""
    declared = declared_settings(type(config))
    for name, each in declared.items():
        if each.convert is not None:
            setattr(config, name, each.convert(getattr(config, name)))
    for name, each in declared.items():
        value = getattr(config, name)
        complaint = each.check.complaint(name, value, config) if each.check and value is not None else None
        if complaint is not None:
            raise StartupError(complaint)
