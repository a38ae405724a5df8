"""The config file, INI in LavinMQ's layout, and the order in which settings are taken.

Precedence is command line > environment > config file > defaults. The CLI resolves the
first two (click knows where each value came from) and hands them to `resolve_config`.
"""

from __future__ import annotations

import configparser
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

from lavin.config.errors import StartupError
from lavin.config.settings import SETTINGS, Config

log = logging.getLogger(__name__)

# `[plugin.NAME]` sections of the INI file hold the settings of plugin NAME.
PLUGIN_SECTION_PREFIX: Final = "plugin."

# INI (section, key) -> Config field and how to parse the text.
INI_KEYS: Final[Mapping[tuple[str, str], tuple[str, Callable[[str], Any]]]] = {
    (declared.ini.section, declared.ini.key): (name, declared.ini.parse)
    for name, declared in SETTINGS.items()
    if declared.ini is not None
}


def read_config_file(path: Path) -> dict[str, Any]:
    """Config field values set in an INI file. Unknown keys are logged and skipped, so a
    LavinMQ config file with settings Lavin lacks still loads."""
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    try:
        with open(path, encoding="utf-8") as file:
            parser.read_file(file)
    except (OSError, configparser.Error) as exc:
        raise StartupError(f"cannot read config file {path}: {exc}") from exc
    values: dict[str, Any] = {}
    plugin_settings: dict[str, dict[str, str]] = {}
    for section in parser.sections():
        if section.startswith(PLUGIN_SECTION_PREFIX):
            name = section.removeprefix(PLUGIN_SECTION_PREFIX)
            plugin_settings[name] = {key: text.strip() for key, text in parser.items(section)}
        else:
            values.update(_known_settings(path, section, parser.items(section)))
    if plugin_settings:
        values["plugin_settings"] = plugin_settings
    return values


def _known_settings(path: Path, section: str, items: Iterable[tuple[str, str]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, text in items:
        target = INI_KEYS.get((section, key))
        if target is None:
            log.warning("%s: ignoring unknown setting [%s] %s", path, section, key)
            continue
        field_name, parse = target
        try:
            values[field_name] = parse(text.strip())
        except ValueError as exc:
            raise StartupError(f"{path}: [{section}] {key} = {text!r}: {exc}") from exc
    return values


def resolve_config(explicit: Mapping[str, Any], config_file: Path | None = None) -> Config:
    """Defaults, overlaid by the config file, overlaid by explicit (CLI or env) values."""
    known = {f.name for f in fields(Config)}
    unknown = set(explicit) - known
    if unknown:
        raise StartupError(f"unknown settings: {', '.join(sorted(unknown))}")
    values = read_config_file(config_file) if config_file is not None else {}
    values.update(explicit)
    return Config(**values)
