"""The `lavin` command. The only module that imports click, with lavin.ctl (`lavin ctl`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from click.decorators import FC
from lavin import __version__
from lavin.config import (
    CONFIG_FILE_FLAG,
    READY_FILE_FLAG,
    SETTINGS,
    Flag,
    InstalledPlugin,
    OneOf,
    Setting,
    StartupError,
    Within,
    installed_plugins,
    resolve_config,
)
from lavin.ctl import config_file_option, ctl

# Values a user set on purpose; anything else may come from the config file.
EXPLICIT_SOURCES = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def setting_options(command: FC) -> FC:
    """An option of `lavin serve` for every setting with a flag, listed in declaration order."""
    options = [
        setting_option(name, declared, flag)
        for name, declared in SETTINGS.items()
        if (flag := declared.flag) is not None
    ]
    for option in reversed(options):  # click lists first the option added last
        command = option(command)
    return command


def setting_option(name: str, declared: Setting, flag: Flag) -> Callable[[FC], FC]:
    if isinstance(declared.default, bool):  # `--name/--no-name`
        return click.option(
            f"{flag.name}/--no-{flag.name.removeprefix('--')}",
            name,
            default=declared.default,
            envvar=flag.env_var,
            show_envvar=True,
            help=flag.help,
        )
    return click.option(
        flag.name,
        name,
        type=click_type(declared, flag),
        multiple=isinstance(declared.default, tuple),  # a list setting's flag is repeated
        envvar=flag.env_var,
        default=declared.default,
        show_envvar=True,
        help=flag.help,
    )


def click_type(declared: Setting, flag: Flag) -> click.ParamType[Any] | None:
    """The type that makes click refuse, before the broker starts, what the setting's check would."""
    check = declared.check
    if isinstance(check, OneOf):
        return click.Choice(check.choices, case_sensitive=not check.ignore_case)
    if isinstance(check, Within):
        return click.IntRange(check.low, check.high)
    if flag.path is not None:
        return click.Path(file_okay=flag.path == "file", dir_okay=flag.path == "directory", path_type=Path)
    return None


@click.group(context_settings={"auto_envvar_prefix": "LAVIN", "show_default": True})
@click.version_option(__version__, prog_name="lavin")
def main() -> None:
    """Lavin, an AMQP 0-9-1 message broker."""


@main.command()
@config_file_option(CONFIG_FILE_FLAG.help)
@click.option(
    READY_FILE_FLAG.name,
    "ready_file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=READY_FILE_FLAG.env_var,
    show_envvar=True,
    help=READY_FILE_FLAG.help,
)
@setting_options
@click.pass_context
def serve(ctx: click.Context, /, config_file: Path | None, ready_file: Path | None, **options: Any) -> None:
    """Run the broker until SIGTERM or SIGINT."""
    explicit = {name: value for name, value in options.items() if ctx.get_parameter_source(name) in EXPLICIT_SOURCES}
    # Imported here so `lavin --version` and `lavin plugins` stay fast.
    from lavin.server import serve as run_server

    try:
        run_server(resolve_config(explicit, config_file), ready_file)
    except StartupError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
def plugins() -> None:
    """List installed plugins, read from package metadata without importing them.

    ENABLED says whether a plugin is always on (built-in types) or needs `--plugin NAME`.
    """
    rows = [("GROUP", "NAME", "DISTRIBUTION", "VERSION", "ENABLED")]
    rows += [plugin_row(plugin) for plugin in installed_plugins()]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)]
        click.echo("  ".join([*cells, row[4]]))


main.add_command(ctl)


def plugin_row(plugin: InstalledPlugin) -> tuple[str, str, str, str, str]:
    enabled = "always" if plugin.always_on else "--plugin"
    return (plugin.group, plugin.name, plugin.distribution, plugin.version, enabled)
