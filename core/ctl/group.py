"""The `lavin ctl` group, which finds the control socket, and the options its commands share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from click.decorators import FC
from lavin.config import CONFIG_FILE_FLAG, StartupError, resolve_config
from lavin.ctl.client import EX_USAGE, BadConfig, Session


# The group makes the session before its command's options are parsed.
def _json_output(ctx: click.Context, _param: click.Parameter, given: bool) -> None:
    session = ctx.find_object(Session)
    if given and session is not None:
        session.as_json = True


def _no_table_headers(ctx: click.Context, _param: click.Parameter, given: bool) -> None:
    session = ctx.find_object(Session)
    if given and session is not None:
        session.table_headers = False


def socket_path_of(ctx: click.Context, socket_option: Path | None, data_dir: Path | None, config: Path | None) -> Path:
    """--socket; else the config's `control_unix_path`; else `<data dir>/control.sock`,
    the data dir taken as `lavin serve` takes it (flag or LAVIN_DATA_DIR, config file)."""
    if socket_option is not None:
        return socket_option
    explicit_sources = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    explicit = {"data_dir": data_dir} if ctx.get_parameter_source("data_dir") in explicit_sources else {}
    try:
        return resolve_config(explicit, config).control_socket_path
    except StartupError as exc:
        raise BadConfig(str(exc)) from None


def _formatter(ctx: click.Context, _param: click.Parameter, chosen: str | None) -> None:
    _json_output(ctx, _param, chosen == "json")


vhost_option = click.option("-p", "--vhost", default="/", show_default=True, help="The vhost.")
_json_flag = click.option(
    "--json",
    is_flag=True,
    expose_value=False,
    callback=_json_output,
    help="Print JSON for scripts, without the line that says what is done.",
)
_formatter_option = click.option(
    "--formatter",
    type=click.Choice(["table", "json"]),
    expose_value=False,
    callback=_formatter,
    help="rabbitmqctl's name for the output: `json` is --json.",
)


def json_option(command: FC) -> FC:
    """`--json`, or rabbitmqctl's `--formatter json`: a JSON document on stdout and nothing else."""
    return _json_flag(_formatter_option(command))


no_table_headers_option = click.option(
    "--no-table-headers", is_flag=True, expose_value=False, callback=_no_table_headers, help="Print the rows only."
)


def table_options(command: FC) -> FC:
    """`--json` and `--no-table-headers`, for the commands that print a table."""
    return json_option(no_table_headers_option(command))


def config_file_option(help_text: str | None) -> Callable[[FC], FC]:
    """`--config FILE` (env LAVIN_CONFIG): the broker's INI file, for `lavin serve` and `lavin ctl`."""
    return click.option(
        CONFIG_FILE_FLAG.name,
        "config_file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        envvar=CONFIG_FILE_FLAG.env_var,
        show_envvar=True,
        help=help_text,
    )


class CtlGroup(click.Group):
    """A group whose usage errors (an unknown command or option, a missing argument) exit
    with rabbitmqctl's 64 rather than click's 2."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        with _usage_exit_code():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _usage_exit_code():
            return super().invoke(ctx)


@contextmanager
def _usage_exit_code() -> Iterator[None]:
    try:
        yield
    except click.UsageError as exc:
        raise CtlUsageError(exc.message, exc.ctx) from None


class CtlUsageError(click.UsageError):
    exit_code = EX_USAGE


@click.group(name="ctl", cls=CtlGroup)
@click.option(
    "--socket",
    "socket_option",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The broker's control socket; by default `control_unix_path` of the config, or <data dir>/control.sock.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="LAVIN_DATA_DIR",
    show_envvar=True,
    help="The broker's data dir, where its control socket is.",
)
@config_file_option("The broker's config file, to find its data dir or control socket.")
@click.option("-q", "--quiet", is_flag=True, help="Print results only, not what is being done.")
@click.pass_context
def ctl(
    ctx: click.Context, socket_option: Path | None, data_dir: Path | None, config_file: Path | None, quiet: bool
) -> None:
    """Manage a running broker as rabbitmqctl does: its status, users, vhosts, permissions, limits,
    queues, exchanges, bindings, connections, channels, consumers, policies and definitions."""
    ctx.obj = Session(socket_path_of(ctx, socket_option, data_dir, config_file), quiet)
