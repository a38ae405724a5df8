"""How a setting's text in the config file becomes its value, and how a value given in code
is brought to the field's type."""

from __future__ import annotations

import configparser
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# LavinMQ's level names, so its config files work unchanged.
LOG_LEVEL_ALIASES: Mapping[str, str] = {"warn": "warning", "fatal": "critical"}


def optional_path(value: str | os.PathLike[str] | None) -> Path | None:
    """A path, or None for an empty value: the setting is off."""
    return Path(value) if value else None


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def every_comma_item(values: str | Iterable[str]) -> tuple[str, ...]:
    """A list setting whose flag may be repeated and whose items may each hold several,
    comma-separated (`--x a,b --x c`)."""
    texts = (values,) if isinstance(values, str) else values
    return tuple(item for text in texts for item in comma_list(text))


def parse_boolean(text: str) -> bool:
    """INI booleans as configparser reads them: true/false, yes/no, on/off, 1/0."""
    value = configparser.ConfigParser.BOOLEAN_STATES.get(text.lower())
    if value is None:
        raise ValueError("expected true or false")
    return value


# RabbitMQ's information units, in any case: decimal (kB, MB, ...) and binary (K, Ki, KiB, ...).
BYTE_UNITS: Mapping[str, int] = {
    "": 1,
    **{letter + "b": 1000**power for power, letter in enumerate("kmgt", 1)},
    **{letter + suffix: 1024**power for power, letter in enumerate("kmgt", 1) for suffix in ("", "i", "ib")},
}


def parse_bytes(text: str) -> int:
    """A number of bytes with an optional unit, as RabbitMQ's config takes it: `50000000`,
    `50MB` (10^6 each), `512MiB`, `512Mi` or `512M` (2^20 each)."""
    match = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text)
    if match is None or match[2].lower() not in BYTE_UNITS:
        raise ValueError("expected a number of bytes with an optional unit (kB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    return int(match[1]) * BYTE_UNITS[match[2].lower()]


def is_octal_mask(text: str) -> bool:
    """A umask as the shell writes it: octal digits, at most 0777 (`027`, `0027`)."""
    return re.fullmatch(r"[0-7]{1,4}", text) is not None and int(text, 8) <= 0o777


def log_level_name(name: str) -> str:
    return LOG_LEVEL_ALIASES.get(name.lower(), name.lower())


def tls_version_number(version: str) -> str:
    """`TLSv1.2` as `1.2`: both spellings are read."""
    return version.removeprefix("TLSv")


def is_address_or_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True
