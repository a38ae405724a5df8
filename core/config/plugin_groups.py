"""Which plugins are installed, read from package metadata only: `lavin plugins` lists them
without importing any plugin code, and the plugin registry picks from them."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

EXCHANGE_GROUP = "lavin.exchanges"
QUEUE_GROUP = "lavin.queues"
AUTH_GROUP = "lavin.auth"
SHOVEL_SOURCE_GROUP = "lavin.shovel.sources"
SHOVEL_DESTINATION_GROUP = "lavin.shovel.destinations"
HOOK_PLUGIN_GROUP = "lavin.plugins"
# Lavin's own entry points in these groups are loaded without being enabled: the core
# exchange types, queue types, auth backends and shovel endpoints, as RabbitMQ's core
# types need no plugin (its shovel plugin does: Lavin's shovels are always there).
ALWAYS_ON_GROUPS = (EXCHANGE_GROUP, QUEUE_GROUP, AUTH_GROUP, SHOVEL_SOURCE_GROUP, SHOVEL_DESTINATION_GROUP)
# The entry-point groups plugins are installed in: `lavin plugins` lists them and the
# `plugins` setting may name any of their entry points.
PLUGIN_GROUPS = (
    EXCHANGE_GROUP,
    QUEUE_GROUP,
    AUTH_GROUP,
    HOOK_PLUGIN_GROUP,
    SHOVEL_SOURCE_GROUP,
    SHOVEL_DESTINATION_GROUP,
)
CORE_DISTRIBUTION = "lavin"


@dataclass(frozen=True)
class InstalledPlugin:
    """One entry point of a plugin group, read from package metadata without importing it."""

    group: str
    name: str
    distribution: str
    version: str

    @property
    def always_on(self) -> bool:
        """Loaded whatever the `plugins` setting says; every other plugin must be named there."""
        return self.distribution == CORE_DISTRIBUTION and self.group in ALWAYS_ON_GROUPS


def installed_plugins() -> list[InstalledPlugin]:
    """Every entry point of every plugin group, by group (in PLUGIN_GROUPS order), then name."""
    found = []
    for group in PLUGIN_GROUPS:
        for entry_point in sorted(entry_points(group=group), key=lambda ep: ep.name):
            dist = entry_point.dist
            name, version = (dist.name, dist.version) if dist is not None else ("?", "?")
            found.append(InstalledPlugin(group, entry_point.name, name, version))
    return found
