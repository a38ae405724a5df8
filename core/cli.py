"""The `lavin` command. The only module that imports click, with lavin.ctl (`lavin ctl`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from lavin import __version__
from lavin.config import (
    EVENT_LOOPS,
    LOG_LEVELS,
    Config,
    InstalledPlugin,
    StartupError,
    installed_plugins,
    resolve_config,
)
from lavin.ctl import config_file_option, ctl

# Values a user set on purpose; anything else may come from the config file.
EXPLICIT_SOURCES = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
DEFAULTS = Config()


@click.group(context_settings={"auto_envvar_prefix": "LAVIN", "show_default": True})
@click.version_option(__version__, prog_name="lavin")
def main() -> None:
    """Lavin, an AMQP 0-9-1 message broker."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="LAVIN_DATA_DIR",
    default=DEFAULTS.data_dir,
    show_envvar=True,
    help="Where messages and definitions are stored.",
)
@click.option(
    "--bind",
    envvar="LAVIN_BIND",
    default=DEFAULTS.bind,
    show_envvar=True,
    help="Address the AMQP listener binds to.",
)
@click.option(
    "--amqp-port",
    type=click.IntRange(0, 65535),
    envvar="LAVIN_AMQP_PORT",
    default=DEFAULTS.amqp_port,
    show_envvar=True,
    help="AMQP listener port.",
)
@click.option(
    "--http-bind",
    envvar="LAVIN_HTTP_BIND",
    default=DEFAULTS.http_bind,
    show_envvar=True,
    help="Address the management HTTP API and web UI bind to.",
)
@click.option(
    "--http-port",
    type=click.IntRange(-1, 65535),
    envvar="LAVIN_HTTP_PORT",
    default=DEFAULTS.http_port,
    show_envvar=True,
    help="Management HTTP API and web UI port; -1: none.",
)
@click.option(
    "--metrics-http-bind",
    envvar="LAVIN_METRICS_HTTP_BIND",
    default=DEFAULTS.metrics_http_bind,
    show_envvar=True,
    help="Address the Prometheus endpoint binds to.",
)
@click.option(
    "--metrics-http-port",
    type=click.IntRange(-1, 65535),
    envvar="LAVIN_METRICS_HTTP_PORT",
    default=DEFAULTS.metrics_http_port,
    show_envvar=True,
    help="Prometheus endpoint port (/metrics without authentication); -1: none.",
)
@click.option(
    "--amqps-port",
    type=click.IntRange(-1, 65535),
    envvar="LAVIN_AMQPS_PORT",
    default=DEFAULTS.amqps_port,
    show_envvar=True,
    help="AMQPS (AMQP over TLS) listener port, open when --tls-cert is set; -1: none.",
)
@click.option(
    "--https-port",
    type=click.IntRange(-1, 65535),
    envvar="LAVIN_HTTPS_PORT",
    default=DEFAULTS.https_port,
    show_envvar=True,
    help="Management API over HTTPS, open when --tls-cert is set; -1: none.",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAVIN_TLS_CERT",
    show_envvar=True,
    help="The server's certificate chain (PEM); turns on the AMQPS and HTTPS listeners.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAVIN_TLS_KEY",
    show_envvar=True,
    help="The certificate's private key (PEM), unless it is in the --tls-cert file.",
)
@click.option(
    "--tls-ca-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAVIN_TLS_CA_CERT",
    show_envvar=True,
    help="CA certificates that client certificates are verified against (PEM).",
)
@click.option(
    "--amqp-unix-path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAVIN_AMQP_UNIX_PATH",
    show_envvar=True,
    help="Also take AMQP connections on this unix domain socket.",
)
@click.option(
    "--http-unix-path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAVIN_HTTP_UNIX_PATH",
    show_envvar=True,
    help="Also serve the management API on this unix domain socket.",
)
@config_file_option("INI file with [main], [amqp], [mgmt] and [plugin.NAME] sections; flags and env vars override it.")
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    envvar="LAVIN_PLUGIN",
    show_envvar=True,
    help="Enable a plugin: any name `lavin plugins` lists (built-in types are always on), "
    "or a dotted module path of a lifecycle plugin. Repeatable; the env var takes a "
    "space-separated list.",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    envvar="LAVIN_LOG_LEVEL",
    default=DEFAULTS.log_level,
    show_envvar=True,
)
@click.option(
    "--loop",
    type=click.Choice(EVENT_LOOPS),
    envvar="LAVIN_LOOP",
    default=DEFAULTS.loop,
    show_envvar=True,
    help="Event loop; auto uses uvloop when it is installed.",
)
@click.pass_context
def serve(ctx: click.Context, /, config_file: Path | None, **options: Any) -> None:
    """Run the broker until SIGTERM or SIGINT."""
    explicit = {name: value for name, value in options.items() if ctx.get_parameter_source(name) in EXPLICIT_SOURCES}
    # Imported here so `lavin --version` and `lavin plugins` stay fast.
    from lavin.server import serve as run_server

    try:
        run_server(resolve_config(explicit, config_file))
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
