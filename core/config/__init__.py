"""Broker settings: one declaration per setting (settings.py), the INI loader (loader.py), the
table of settings in docs/configuration.md (reference.py), and which plugins are installed
(plugin_groups.py).

These are the names the rest of Lavin imports from `lavin.config`.
"""

from lavin.config.checks import OneOf, Within
from lavin.config.declaration import Flag, Setting
from lavin.config.errors import StartupError
from lavin.config.loader import INI_KEYS, read_config_file, resolve_config
from lavin.config.plugin_groups import (
    ALWAYS_ON_GROUPS,
    AUTH_GROUP,
    EXCHANGE_GROUP,
    HOOK_PLUGIN_GROUP,
    PLUGIN_GROUPS,
    QUEUE_GROUP,
    SHOVEL_DESTINATION_GROUP,
    SHOVEL_SOURCE_GROUP,
    InstalledPlugin,
    installed_plugins,
)
from lavin.config.settings import CONFIG_FILE_FLAG, DISABLED_PORT, READY_FILE_FLAG, SETTINGS, Config, MiB
from lavin.config.values import parse_bytes

__all__ = [
    "ALWAYS_ON_GROUPS",
    "AUTH_GROUP",
    "CONFIG_FILE_FLAG",
    "DISABLED_PORT",
    "EXCHANGE_GROUP",
    "HOOK_PLUGIN_GROUP",
    "INI_KEYS",
    "PLUGIN_GROUPS",
    "QUEUE_GROUP",
    "READY_FILE_FLAG",
    "SETTINGS",
    "SHOVEL_DESTINATION_GROUP",
    "SHOVEL_SOURCE_GROUP",
    "Config",
    "Flag",
    "InstalledPlugin",
    "MiB",
    "OneOf",
    "Setting",
    "StartupError",
    "Within",
    "installed_plugins",
    "parse_bytes",
    "read_config_file",
    "resolve_config",
]
