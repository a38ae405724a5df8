"""Find plugins once at start-up: stevedore for named implementations, pluggy for events.

A string that selects one implementation (exchange type, queue type, auth backend) is looked
up in an immutable map built here; lifecycle plugins given with `--plugin` are registered
with a pluggy PluginManager whose `.hook` relay the broker calls.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType, ModuleType
from typing import Any, NoReturn, TypeVar

import pluggy
from lavin.api import hooks as hookspecs
from lavin.api import AuthBackend, ExchangeType, MessageStore
from lavin.config import StartupError
from stevedore import ExtensionManager, NamedExtensionManager
from stevedore.extension import Extension

EXCHANGE_GROUP = "lavin.exchanges"
QUEUE_GROUP = "lavin.queues"
AUTH_GROUP = "lavin.auth"
HOOK_PLUGIN_GROUP = "lavin.plugins"

PluginClass = TypeVar("PluginClass", ExchangeType, MessageStore, AuthBackend)


class PluginError(StartupError):
    """A plugin is missing, fails to load, or breaks the plugin rules."""


@dataclass(frozen=True)
class Registry:
    exchange_types: Mapping[str, type[ExchangeType]]
    queue_types: Mapping[str, type[MessageStore]]
    auth_backends: Mapping[str, type[AuthBackend]]
    hooks: pluggy.HookRelay
    plugin_manager: pluggy.PluginManager


def load_registry(plugin_names: Sequence[str] = ()) -> Registry:
    plugin_manager = load_hook_plugins(plugin_names)
    return Registry(
        exchange_types=scan_group(EXCHANGE_GROUP, ExchangeType),  # type: ignore[type-abstract]
        queue_types=scan_group(QUEUE_GROUP, MessageStore),  # type: ignore[type-abstract]
        auth_backends=scan_group(AUTH_GROUP, AuthBackend),  # type: ignore[type-abstract]
        hooks=plugin_manager.hook,
        plugin_manager=plugin_manager,
    )


def distribution_name(entry_point: EntryPoint) -> str:
    """For error messages. stevedore's cached entry points lack `dist`, so look it up."""
    if entry_point.dist is not None:
        return entry_point.dist.name
    for candidate in entry_points(group=entry_point.group, name=entry_point.name):
        if candidate.value == entry_point.value and candidate.dist is not None:
            return candidate.dist.name
    return "an unknown distribution"


def _refuse_load_failure(
    _manager: ExtensionManager[Any], entry_point: EntryPoint, error: BaseException
) -> NoReturn:
    # stevedore only logs failures by default; a type that silently vanishes is worse.
    raise PluginError(
        f"plugin {entry_point.name!r} in group {entry_point.group} from "
        f"{distribution_name(entry_point)} failed to load: {error}"
    ) from error


def _refuse_conflict(namespace: str, name: str, extensions: Iterable[Extension[Any]]) -> NoReturn:
    owners = ", ".join(sorted(distribution_name(ext.entry_point) for ext in extensions))
    raise PluginError(f"more than one distribution provides {name!r} in {namespace}: {owners}")


def scan_group(group: str, base: type[PluginClass]) -> Mapping[str, type[PluginClass]]:
    """Load every entry point of a group into a read-only name -> class map."""
    manager: ExtensionManager[Any] = ExtensionManager(
        group,
        on_load_failure_callback=_refuse_load_failure,
        conflict_resolver=_refuse_conflict,
    )
    by_name: dict[str, list[Extension[Any]]] = {}
    for extension in manager.extensions:
        by_name.setdefault(extension.name, []).append(extension)
    classes: dict[str, type[PluginClass]] = {}
    for name, extensions in by_name.items():
        if len(extensions) > 1:
            # stevedore's own check only sees adjacent duplicates and only on lookup by name.
            _refuse_conflict(group, name, extensions)
        classes[name] = checked_class(extensions[0], base)
    return MappingProxyType(classes)


def checked_class(extension: Extension[Any], base: type[PluginClass]) -> type[PluginClass]:
    plugin = extension.plugin
    origin = f"{extension.entry_point.value} from {distribution_name(extension.entry_point)}"
    if not (isinstance(plugin, type) and issubclass(plugin, base)):
        raise PluginError(f"{origin} is not a subclass of lavin.api.{base.__name__}")
    declared = getattr(plugin, "name", None)
    if declared != extension.name:
        raise PluginError(
            f"{origin} is registered as {extension.name!r} but its name attribute is {declared!r}"
        )
    return plugin


def load_hook_plugins(plugin_names: Sequence[str]) -> pluggy.PluginManager:
    plugin_manager = pluggy.PluginManager("lavin")
    plugin_manager.add_hookspecs(hookspecs)
    by_entry_point = {
        extension.name: extension.plugin
        for extension in NamedExtensionManager(
            HOOK_PLUGIN_GROUP,
            names=list(plugin_names),
            on_load_failure_callback=_refuse_load_failure,
            on_missing_entrypoints_callback=lambda _names: None,  # dotted modules come next
            conflict_resolver=_refuse_conflict,
        ).extensions
    }
    for name in plugin_names:
        plugin = by_entry_point.get(name) or import_plugin_module(name)
        try:
            plugin_manager.register(plugin, name=name)
        except ValueError as exc:  # the same plugin given twice
            raise PluginError(f"plugin {name!r}: {exc}") from exc
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r} has an invalid hook: {exc}") from exc
    try:
        plugin_manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"unknown hook: {exc}") from exc
    return plugin_manager


def import_plugin_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise PluginError(
                f"unknown plugin {name!r}: no entry point of that name in group "
                f"{HOOK_PLUGIN_GROUP} and no importable module"
            ) from exc
        raise PluginError(f"plugin {name!r} failed to import: {exc}") from exc
    except Exception as exc:
        raise PluginError(f"plugin {name!r} failed to import: {exc}") from exc
