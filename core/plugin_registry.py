"""Find plugins once at start-up: stevedore for named implementations, pluggy for events.

What is loaded: Lavin's own exchange types, queue types and auth backends always (as in
RabbitMQ, the core types need no plugin); any other entry point of a plugin group only
when enabled by name, with `--plugin NAME` or `[main] plugins`. A type that is installed
but not enabled is absent from the maps built here, so declaring it is refused exactly as
declaring an unknown type is. Lifecycle plugins (entry points of group lavin.plugins, or
dotted module paths) are registered with a pluggy PluginManager whose `.hook` relay the
broker calls.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType, ModuleType
from typing import Any, NoReturn, TypeVar

import pluggy
from lavin import __version__
from lavin.api import AuthBackend, ExchangeType, MessageStore, ShovelDestination, ShovelSource
from lavin.api import hooks as hookspecs
from lavin.config import (
    AUTH_GROUP,
    EXCHANGE_GROUP,
    HOOK_PLUGIN_GROUP,
    PLUGIN_GROUPS,
    QUEUE_GROUP,
    SHOVEL_DESTINATION_GROUP,
    SHOVEL_SOURCE_GROUP,
    InstalledPlugin,
    StartupError,
    installed_plugins,
)
from stevedore import ExtensionManager, NamedExtensionManager
from stevedore.extension import Extension

log = logging.getLogger(__name__)

PluginClass = TypeVar("PluginClass", ExchangeType, MessageStore, AuthBackend, ShovelSource, ShovelDestination)
HOOK_NAMES = tuple(name for name in vars(hookspecs) if name.startswith("lavin_"))
NO_SETTINGS: Mapping[str, Mapping[str, str]] = MappingProxyType({})


class PluginError(StartupError):
    """A plugin is missing, fails to load, or breaks the plugin rules."""


@dataclass(frozen=True)
class LoadedPlugin:
    """A plugin the broker runs with, as the start-up log names it."""

    group: str
    name: str
    origin: str  # "distribution version", or the file of a plugin module
    state: str  # "built-in" or "enabled"

    def describe(self) -> str:
        return f"plugin {self.group} {self.name} from {self.origin} {self.state}"


@dataclass(frozen=True)
class Registry:
    """Everything the broker runs with, fixed from start-up to shutdown."""

    exchange_types: Mapping[str, type[ExchangeType]]
    queue_types: Mapping[str, type[MessageStore]]
    auth_backends: Mapping[str, type[AuthBackend]]
    # By URI scheme: where shovels and federation links take messages from and put them.
    shovel_sources: Mapping[str, type[ShovelSource]]
    shovel_destinations: Mapping[str, type[ShovelDestination]]
    hooks: pluggy.HookRelay
    plugin_manager: pluggy.PluginManager
    loaded: tuple[LoadedPlugin, ...]

    def startup_report(self) -> list[str]:
        """Lines for the start-up log: Lavin's version, then one per loaded plugin."""
        return [f"Lavin {__version__}", *(plugin.describe() for plugin in self.loaded)]


def load_registry(
    plugin_names: Sequence[str] = (),
    *,
    plugin_settings: Mapping[str, Mapping[str, str]] = NO_SETTINGS,
    auth_backends: Sequence[str] = (),
) -> Registry:
    """Load the always-on types and the plugins `plugin_names` enables, then hand each
    lifecycle plugin its `[plugin.NAME]` section from `plugin_settings`. Every name in
    `auth_backends` (`[main] auth_backends`) must be a loaded backend."""
    installed = installed_plugins()
    names = list(dict.fromkeys(plugin_names))
    enabled = [plugin for plugin in installed if plugin.always_on or plugin.name in names]
    plugin_manager = load_hook_plugins(hook_plugin_names(names, installed))
    # The ignores: mypy accepts only concrete classes where type[T] is expected (python/mypy#4717),
    # and these abstract bases serve scan_group for issubclass checks only.
    registry = Registry(
        exchange_types=scan_group(EXCHANGE_GROUP, ExchangeType, enabled),  # type: ignore[type-abstract]
        queue_types=scan_group(QUEUE_GROUP, MessageStore, enabled),  # type: ignore[type-abstract]
        auth_backends=scan_group(AUTH_GROUP, AuthBackend, enabled),  # type: ignore[type-abstract]
        shovel_sources=scan_group(SHOVEL_SOURCE_GROUP, ShovelSource, enabled),  # type: ignore[type-abstract]
        shovel_destinations=scan_group(SHOVEL_DESTINATION_GROUP, ShovelDestination, enabled),  # type: ignore[type-abstract]
        hooks=plugin_manager.hook,
        plugin_manager=plugin_manager,
        loaded=loaded_plugins(enabled, plugin_manager),
    )
    check_auth_backends(auth_backends, registry.auth_backends, installed)
    # An auth backend's section reaches it through AuthBackend.configure, when the broker starts.
    hook_settings = {name: section for name, section in plugin_settings.items() if name not in registry.auth_backends}
    configure_plugins(plugin_manager, hook_settings)
    return registry


def hook_plugin_names(names: Sequence[str], installed: Sequence[InstalledPlugin]) -> list[str]:
    """The names to register with pluggy: entry points of group lavin.plugins, and names
    that are no entry point at all (dotted module paths, or unknown)."""
    type_names = {plugin.name for plugin in installed if plugin.group != HOOK_PLUGIN_GROUP}
    hook_entry_points = {plugin.name for plugin in installed if plugin.group == HOOK_PLUGIN_GROUP}
    return [name for name in names if name in hook_entry_points or name not in type_names]


def loaded_plugins(
    enabled: Sequence[InstalledPlugin], plugin_manager: pluggy.PluginManager
) -> tuple[LoadedPlugin, ...]:
    entry_point_plugins = [
        LoadedPlugin(
            plugin.group,
            plugin.name,
            f"{plugin.distribution} {plugin.version}",
            "built-in" if plugin.always_on else "enabled",
        )
        for plugin in enabled
    ]
    hook_entry_points = enabled_names(HOOK_PLUGIN_GROUP, enabled)
    modules = [
        LoadedPlugin(HOOK_PLUGIN_GROUP, name, str(getattr(plugin, "__file__", plugin)), "enabled")
        for name, plugin in plugin_manager.list_name_plugin()
        if name not in hook_entry_points
    ]
    return (*entry_point_plugins, *modules)


def distribution_name(entry_point: EntryPoint) -> str:
    """For error messages. stevedore's cached entry points lack `dist`, so look it up."""
    if entry_point.dist is not None:
        return entry_point.dist.name
    for candidate in entry_points(group=entry_point.group, name=entry_point.name):
        if candidate.value == entry_point.value and candidate.dist is not None:
            return candidate.dist.name
    return "an unknown distribution"


def installed_listing(installed: Iterable[InstalledPlugin]) -> str:
    """What `lavin plugins` shows, one line per group, for error messages."""
    by_group: dict[str, list[str]] = {group: [] for group in PLUGIN_GROUPS}
    for plugin in installed:
        label = plugin.name if plugin.always_on else f"{plugin.name} ({plugin.distribution})"
        by_group[plugin.group].append(label)
    lines = [f"  {group}: {', '.join(labels) or '-'}" for group, labels in by_group.items()]
    return "\n".join(["Installed plugins (those with a distribution named need --plugin NAME):", *lines])


def _refuse_load_failure(_manager: ExtensionManager[Any], entry_point: EntryPoint, error: BaseException) -> NoReturn:
    # stevedore only logs failures by default; a type that silently vanishes is worse.
    raise PluginError(
        f"plugin {entry_point.name!r} in group {entry_point.group} from "
        f"{distribution_name(entry_point)} failed to load: {error}"
    ) from error


def _refuse_conflict(namespace: str, name: str, extensions: Iterable[Extension[Any]]) -> NoReturn:
    owners = ", ".join(sorted(distribution_name(ext.entry_point) for ext in extensions))
    raise PluginError(f"more than one distribution provides {name!r} in {namespace}: {owners}")


def load_extensions(group: str, names: Sequence[str]) -> dict[str, Extension[Any]]:
    """Import the named entry points of a group; a name two distributions provide, or an
    entry point that fails to import, stops start-up."""
    manager: NamedExtensionManager[Any] = NamedExtensionManager(
        group,
        names=list(names),
        on_load_failure_callback=_refuse_load_failure,
        on_missing_entrypoints_callback=lambda _names: None,  # callers check their names
        conflict_resolver=_refuse_conflict,
    )
    by_name: dict[str, list[Extension[Any]]] = {}
    for extension in manager.extensions:
        by_name.setdefault(extension.name, []).append(extension)
    for name, extensions in by_name.items():
        if len(extensions) > 1:
            # stevedore's own check only sees adjacent duplicates and only on lookup by name.
            _refuse_conflict(group, name, extensions)
    return {name: extensions[0] for name, extensions in by_name.items()}


def enabled_names(group: str, enabled: Iterable[InstalledPlugin]) -> list[str]:
    return [plugin.name for plugin in enabled if plugin.group == group]


def scan_group(
    group: str, base: type[PluginClass], enabled: Iterable[InstalledPlugin]
) -> Mapping[str, type[PluginClass]]:
    """Load the enabled entry points of a group into a read-only name -> class map."""
    extensions = load_extensions(group, enabled_names(group, enabled))
    return MappingProxyType({name: checked_class(extension, base) for name, extension in extensions.items()})


def checked_class(extension: Extension[Any], base: type[PluginClass]) -> type[PluginClass]:
    # Whatever the entry point names: stevedore types it as type[T], but a module or a function loads too.
    plugin: object = extension.plugin
    origin = f"{extension.entry_point.value} from {distribution_name(extension.entry_point)}"
    if not (isinstance(plugin, type) and issubclass(plugin, base)):
        raise PluginError(f"{origin} is not a subclass of lavin.api.{base.__name__}")
    declared = getattr(plugin, "name", None)
    if declared != extension.name:
        raise PluginError(f"{origin} is registered as {extension.name!r} but its name attribute is {declared!r}")
    return plugin


def check_auth_backends(
    chosen: Sequence[str],
    available: Mapping[str, type[AuthBackend]],
    installed: Sequence[InstalledPlugin],
) -> None:
    """Refuse a chosen backend that is not loaded, saying whether it needs enabling."""
    for name in chosen:
        if name in available:
            continue
        providers = [p for p in installed if p.group == AUTH_GROUP and p.name == name]
        if providers:
            raise PluginError(
                f"auth backend {name!r} in [main] auth_backends is installed by "
                f"{providers[0].distribution} but not enabled: add --plugin {name}"
            )
        raise PluginError(f"unknown auth backend {name!r} in [main] auth_backends\n{installed_listing(installed)}")


def load_hook_plugins(plugin_names: Sequence[str]) -> pluggy.PluginManager:
    """Register lifecycle plugins: entry points of group lavin.plugins, else dotted module
    paths. Each must implement at least one hook."""
    plugin_manager = pluggy.PluginManager("lavin")
    plugin_manager.add_hookspecs(hookspecs)
    by_entry_point = load_extensions(HOOK_PLUGIN_GROUP, plugin_names)
    for name in plugin_names:
        extension = by_entry_point.get(name)
        plugin = extension.plugin if extension is not None else import_plugin_module(name)
        register_hook_plugin(plugin_manager, name, plugin)
    try:
        plugin_manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"unknown hook: {exc}") from exc
    return plugin_manager


def register_hook_plugin(plugin_manager: pluggy.PluginManager, name: str, plugin: object) -> None:
    try:
        plugin_manager.register(plugin, name=name)
    except ValueError as exc:  # the same plugin given twice
        raise PluginError(f"plugin {name!r}: {exc}") from exc
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {name!r} has an invalid hook: {exc}") from exc
    if not plugin_manager.get_hookcallers(plugin):
        # Accepting it would let a mistyped name or a wrong module pass unnoticed.
        raise PluginError(
            f"plugin {name!r} implements no hook: a lifecycle plugin marks at least one of "
            f"{', '.join(HOOK_NAMES)} with lavin.api.hookimpl. An exchange type, queue type "
            "or auth backend is enabled by its entry-point name (see `lavin plugins`)."
        )


def import_plugin_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise PluginError(
                f"unknown plugin {name!r}: no installed plugin has that name and no module "
                f"of that name can be imported\n{installed_listing(installed_plugins())}"
            ) from exc
        raise PluginError(f"plugin {name!r} failed to import: {exc}") from exc
    except Exception as exc:
        raise PluginError(f"plugin {name!r} failed to import: {exc}") from exc


def configure_plugins(plugin_manager: pluggy.PluginManager, settings: Mapping[str, Mapping[str, str]]) -> None:
    """Call each lifecycle plugin's lavin_configure with its own `[plugin.NAME]` section,
    and no other plugin's: a section may hold secrets."""
    plugins = dict(plugin_manager.list_name_plugin())
    receivers: set[str] = set()
    for name, plugin in plugins.items():
        others = [other for other in plugins.values() if other is not plugin]
        configure = plugin_manager.subset_hook_caller("lavin_configure", remove_plugins=others)
        if configure.get_hookimpls():
            receivers.add(name)
        try:
            configure(name=name, settings=MappingProxyType(dict(settings.get(name, {}))))
        except Exception as exc:
            raise PluginError(f"plugin {name!r} refused its settings: {exc}") from exc
    for name in sorted(set(settings) - receivers):
        log.warning(
            "config section [plugin.%s] is ignored: no enabled lifecycle plugin of that name "
            "implements lavin_configure",
            name,
        )
