"""Broker settings and the INI loader (settings.py), and which plugins are installed.

These are the names the rest of Lavin imports from `lavin.config`.
"""

from lavin.config.settings import (
    ALWAYS_ON_GROUPS,
    AUTH_GROUP,
    DISABLED_PORT,
    EVENT_LOOPS,
    EXCHANGE_GROUP,
    HOOK_PLUGIN_GROUP,
    INI_KEYS,
    LOG_LEVELS,
    PLUGIN_GROUPS,
    QUEUE_GROUP,
    Config,
    InstalledPlugin,
    MiB,
    StartupError,
    installed_plugins,
    parse_bytes,
    read_config_file,
    resolve_config,
)

__all__ = [
    "ALWAYS_ON_GROUPS",
    "AUTH_GROUP",
    "DISABLED_PORT",
    "EVENT_LOOPS",
    "EXCHANGE_GROUP",
    "HOOK_PLUGIN_GROUP",
    "INI_KEYS",
    "LOG_LEVELS",
    "PLUGIN_GROUPS",
    "QUEUE_GROUP",
    "Config",
    "InstalledPlugin",
    "MiB",
    "StartupError",
    "installed_plugins",
    "parse_bytes",
    "read_config_file",
    "resolve_config",
]
