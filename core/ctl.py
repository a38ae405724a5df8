"""`lavin ctl`: rabbitmqctl's user, vhost, permission, limit and definitions commands,
sent to a running broker over its control socket.

The socket speaks the management API's HTTP; only the broker's own user (and root) can
open it, so no password is asked. Output and exit codes follow rabbitmqctl's: a line
saying what is done, tab-separated tables with a header, the reason on stderr and a
sysexits code when something fails.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
from click.core import ParameterSource
from click.decorators import FC
from lavin.config import StartupError, resolve_config

# sysexits.h, as rabbitmqctl uses them.
EX_DATAERR = 65
EX_NOUSER = 67
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_NOPERM = 77
EX_CONFIG = 78
TIMEOUT = 60.0


class CtlError(click.ClickException):
    """A failed command: rabbitmqctl's `Error:` and the reason on stderr, and its exit code."""

    exit_code = EX_DATAERR

    def show(self, file: Any = None) -> None:
        click.echo(f"Error:\n{self.format_message()}", err=True)


class BrokerUnavailable(CtlError):
    exit_code = EX_UNAVAILABLE


class NoPermission(CtlError):
    exit_code = EX_NOPERM


class BrokerFailed(CtlError):
    """The broker could not do it, or the object exists already."""

    exit_code = EX_SOFTWARE


class BadConfig(CtlError):
    exit_code = EX_CONFIG


class NoSuchUser(CtlError):
    exit_code = EX_NOUSER

    def __init__(self, name: str) -> None:
        super().__init__(f'User "{name}" does not exist')


class NoSuchVHost(CtlError):
    def __init__(self, name: str) -> None:
        super().__init__(f'Virtual host "{name}" does not exist')


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: Path) -> None:
        super().__init__("localhost", timeout=TIMEOUT)
        self.socket_path = socket_path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # closed by close(), also on failure
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


class Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def reason(self) -> str:
        try:
            return str(self.json().get("reason", self.body.decode(errors="replace")))
        except (ValueError, AttributeError):
            return self.body.decode(errors="replace") or f"HTTP {self.status}"


class ControlClient:
    """Requests to the broker's management API over its control socket."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path

    def request(self, method: str, path: str, body: Any = None, raw_body: bytes | None = None) -> Response:
        connection = _UnixHTTPConnection(self.socket_path)
        payload = raw_body if raw_body is not None else None if body is None else json.dumps(body).encode()
        try:
            connection.request(method, path, body=payload, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return Response(response.status, response.read())
        except (FileNotFoundError, ConnectionRefusedError):
            raise BrokerUnavailable(
                f"unable to connect to the broker at {self.socket_path}: no broker listens there. "
                "Is it running, and is this its data dir (--data-dir) or socket (--socket)?"
            ) from None
        except PermissionError:
            raise NoPermission(f"no permission to open {self.socket_path}: run as the broker's user or root") from None
        except OSError as exc:
            raise BrokerUnavailable(f"lost the broker at {self.socket_path}: {exc}") from None
        finally:
            connection.close()

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def expect(self, response: Response, not_found: CtlError | None = None) -> Response:
        """The response when it succeeded; `not_found` for a 404; CtlError with the reason otherwise."""
        if response.ok:
            return response
        if response.status == 404 and not_found is not None:
            raise not_found
        raise (CtlError if response.status < 500 else BrokerFailed)(response.reason)


def path(*parts: str) -> str:
    return "/api/" + "/".join(quote(part, safe="") for part in parts)


class Session:
    """What every `lavin ctl` command needs: the client and whether to be quiet."""

    def __init__(self, socket_path: Path, quiet: bool) -> None:
        self.client = ControlClient(socket_path)
        self.quiet = quiet

    def info(self, line: str) -> None:
        if not self.quiet:
            click.echo(line)

    def user(self, name: str) -> dict[str, Any]:
        response = self.client.expect(self.client.get(path("users", name)), NoSuchUser(name))
        user: dict[str, Any] = response.json()
        return user

    def check_vhost(self, name: str) -> None:
        self.client.expect(self.client.get(path("vhosts", name)), NoSuchVHost(name))

    def check_user_and_vhost(self, user: str, vhost: str) -> None:
        """The error RabbitMQ names the missing one in, rather than the API's vhost_or_user_not_found."""
        self.user(user)
        self.check_vhost(vhost)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    click.echo("\t".join(header))
    for row in rows:
        click.echo("\t".join(row))


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


vhost_option = click.option("-p", "--vhost", default="/", show_default=True, help="The vhost.")


def config_file_option(help_text: str) -> Callable[[FC], FC]:
    """`--config FILE` (env LAVIN_CONFIG): the broker's INI file, for `lavin serve` and `lavin ctl`."""
    return click.option(
        "--config",
        "config_file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        envvar="LAVIN_CONFIG",
        show_envvar=True,
        help=help_text,
    )


@click.group(name="ctl")
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
    """Manage users, vhosts, permissions, limits and definitions of a running broker, as rabbitmqctl does."""
    ctx.obj = Session(socket_path_of(ctx, socket_option, data_dir, config_file), quiet)


# ---- users -------------------------------------------------------------------------------


@ctl.command("add_user")
@click.argument("name")
@click.argument("password")
@click.pass_obj
def add_user(s: Session, name: str, password: str) -> None:
    """Add a user with a password."""
    s.info(f'Adding user "{name}" ...')
    if s.client.get(path("users", name)).ok:
        raise BrokerFailed(f'User "{name}" already exists')
    s.client.expect(s.client.request("PUT", path("users", name), {"password": password, "tags": []}))
    s.info("Done. Don't forget to grant the user permissions to some virtual hosts! "
           "See 'lavin ctl set_permissions --help' to learn more.")  # fmt: skip


@ctl.command("delete_user")
@click.argument("name")
@click.pass_obj
def delete_user(s: Session, name: str) -> None:
    """Delete a user."""
    s.info(f'Deleting user "{name}" ...')
    s.client.expect(s.client.request("DELETE", path("users", name)), NoSuchUser(name))


@ctl.command("change_password")
@click.argument("name")
@click.argument("password")
@click.pass_obj
def change_password(s: Session, name: str, password: str) -> None:
    """Set a user's password."""
    s.info(f'Changing password for user "{name}" ...')
    user = s.user(name)
    s.client.expect(s.client.request("PUT", path("users", name), {"password": password, "tags": user["tags"]}))


@ctl.command("clear_password")
@click.argument("name")
@click.pass_obj
def clear_password(s: Session, name: str) -> None:
    """Remove a user's password: the user can no longer log in with one."""
    s.info(f'Clearing password for user "{name}" ...')
    user = s.user(name)
    s.client.expect(s.client.request("PUT", path("users", name), {"tags": user["tags"]}))


@ctl.command("set_user_tags")
@click.argument("name")
@click.argument("tags", nargs=-1)
@click.pass_obj
def set_user_tags(s: Session, name: str, tags: tuple[str, ...]) -> None:
    """Set a user's tags (none: clear them)."""
    s.info(f'Setting tags for user "{name}" to [{", ".join(tags)}] ...')
    user = s.user(name)
    body = {"password_hash": user["password_hash"], "hashing_algorithm": user["hashing_algorithm"], "tags": list(tags)}
    s.client.expect(s.client.request("PUT", path("users", name), body))


@ctl.command("list_users")
@click.pass_obj
def list_users(s: Session) -> None:
    """List users and their tags."""
    s.info("Listing users ...")
    users = s.client.expect(s.client.get(path("users"))).json()
    table(("user", "tags"), ((user["name"], "[" + ", ".join(user["tags"]) + "]") for user in users))


@ctl.command("authenticate_user")
@click.argument("name")
@click.argument("password")
@click.pass_obj
def authenticate_user(s: Session, name: str, password: str) -> None:
    """Check a user's password through the configured auth backends."""
    s.info(f'Authenticating user "{name}" ...')
    response = s.client.request("POST", path("authenticate"), {"username": name, "password": password})
    if response.status == 403:
        raise CtlError(f'Error: failed to authenticate user "{name}"\n{response.reason}')
    s.client.expect(response)
    click.echo("Success")


# ---- vhosts ------------------------------------------------------------------------------


@ctl.command("add_vhost")
@click.argument("name")
@click.pass_obj
def add_vhost(s: Session, name: str) -> None:
    """Create a vhost."""
    s.info(f'Adding vhost "{name}" ...')
    s.client.expect(s.client.request("PUT", path("vhosts", name), {}))


@ctl.command("delete_vhost")
@click.argument("name")
@click.pass_obj
def delete_vhost(s: Session, name: str) -> None:
    """Delete a vhost with its queues, exchanges, messages and permissions."""
    s.info(f'Deleting vhost "{name}" ...')
    s.client.expect(s.client.request("DELETE", path("vhosts", name)), NoSuchVHost(name))


@ctl.command("list_vhosts")
@click.pass_obj
def list_vhosts(s: Session) -> None:
    """List vhosts."""
    s.info("Listing vhosts ...")
    table(("name",), ((vhost["name"],) for vhost in s.client.expect(s.client.get(path("vhosts"))).json()))


# ---- permissions -------------------------------------------------------------------------


@ctl.command("set_permissions")
@vhost_option
@click.argument("user")
@click.argument("configure")
@click.argument("write")
@click.argument("read")
@click.pass_obj
def set_permissions(s: Session, vhost: str, user: str, configure: str, write: str, read: str) -> None:
    """Set a user's configure, write and read patterns on a vhost."""
    s.info(f'Setting permissions for user "{user}" in vhost "{vhost}" ...')
    s.check_user_and_vhost(user, vhost)
    body = {"configure": configure, "write": write, "read": read}
    s.client.expect(s.client.request("PUT", path("permissions", vhost, user), body))


@ctl.command("clear_permissions")
@vhost_option
@click.argument("user")
@click.pass_obj
def clear_permissions(s: Session, vhost: str, user: str) -> None:
    """Remove a user's permissions on a vhost."""
    s.info(f'Clearing permissions for user "{user}" in vhost "{vhost}" ...')
    s.check_user_and_vhost(user, vhost)
    response = s.client.request("DELETE", path("permissions", vhost, user))
    if response.status != 404:  # none to clear: done, as rabbitmqctl says
        s.client.expect(response)


@ctl.command("list_permissions")
@vhost_option
@click.pass_obj
def list_permissions(s: Session, vhost: str) -> None:
    """List the users' permissions on a vhost."""
    s.info(f'Listing permissions for vhost "{vhost}" ...')
    response = s.client.expect(s.client.get(path("vhosts", vhost, "permissions")), NoSuchVHost(vhost))
    table(
        ("user", "configure", "write", "read"),
        ((entry["user"], entry["configure"], entry["write"], entry["read"]) for entry in response.json()),
    )


@ctl.command("set_topic_permissions")
@vhost_option
@click.argument("user")
@click.argument("exchange")
@click.argument("write")
@click.argument("read")
@click.pass_obj
def set_topic_permissions(s: Session, vhost: str, user: str, exchange: str, write: str, read: str) -> None:
    """Set a user's write and read patterns on the routing keys of a topic exchange."""
    s.info(f'Setting topic permissions on "{exchange}" for user "{user}" in vhost "{vhost}" ...')
    s.check_user_and_vhost(user, vhost)
    body = {"exchange": exchange, "write": write, "read": read}
    s.client.expect(s.client.request("PUT", path("topic-permissions", vhost, user), body))


@ctl.command("clear_topic_permissions")
@vhost_option
@click.argument("user")
@click.argument("exchange", required=False)
@click.pass_obj
def clear_topic_permissions(s: Session, vhost: str, user: str, exchange: str | None) -> None:
    """Remove a user's topic permissions on one exchange, or on all of the vhost's."""
    on = "" if exchange is None else f'on "{exchange}" '
    s.info(f'Clearing topic permissions {on}for user "{user}" in vhost "{vhost}" ...')
    s.check_user_and_vhost(user, vhost)
    parts = ("topic-permissions", vhost, user) if exchange is None else ("topic-permissions", vhost, user, exchange)
    response = s.client.request("DELETE", path(*parts))
    if response.status != 404:
        s.client.expect(response)


@ctl.command("list_topic_permissions")
@vhost_option
@click.pass_obj
def list_topic_permissions(s: Session, vhost: str) -> None:
    """List the users' topic permissions on a vhost."""
    s.info(f'Listing topic permissions for vhost "{vhost}" ...')
    response = s.client.expect(s.client.get(path("vhosts", vhost, "topic-permissions")), NoSuchVHost(vhost))
    table(
        ("user", "exchange", "write", "read"),
        ((entry["user"], entry["exchange"], entry["write"], entry["read"]) for entry in response.json()),
    )


# ---- vhost limits ------------------------------------------------------------------------


@ctl.command("set_vhost_limits")
@vhost_option
@click.argument("definition")
@click.pass_obj
def set_vhost_limits(s: Session, vhost: str, definition: str) -> None:
    """Replace a vhost's limits with a JSON object: '{"max-connections": 100, "max-queues": 10}'."""
    s.info(f'Setting vhost limits to "{definition}" for vhost "{vhost}" ...')
    try:
        limits = json.loads(definition)
    except ValueError:
        limits = None
    if not isinstance(limits, dict):
        raise CtlError(f"the limits must be a JSON object, such as '{{\"max-connections\": 10}}', not {definition}")
    current = _limits(s, vhost)
    for name, value in limits.items():
        s.client.expect(s.client.request("PUT", path("vhost-limits", vhost, name), {"value": value}))
    for name in current.keys() - limits.keys():
        s.client.expect(s.client.request("DELETE", path("vhost-limits", vhost, name)))


@ctl.command("clear_vhost_limits")
@vhost_option
@click.pass_obj
def clear_vhost_limits(s: Session, vhost: str) -> None:
    """Remove every limit of a vhost."""
    s.info(f'Clearing vhost "{vhost}" limits ...')
    for name in _limits(s, vhost):
        s.client.expect(s.client.request("DELETE", path("vhost-limits", vhost, name)))


@ctl.command("list_vhost_limits")
@vhost_option
@click.option("--global", "all_vhosts", is_flag=True, help="Every vhost's limits, as a table.")
@click.pass_obj
def list_vhost_limits(s: Session, vhost: str, all_vhosts: bool) -> None:
    """Show a vhost's limits as JSON."""
    if not all_vhosts:
        s.info(f'Listing limits for vhost "{vhost}" ...')
        click.echo(json.dumps(_limits(s, vhost), separators=(",", ":")))
        return
    s.info("Listing limits for all vhosts ...")
    entries = s.client.expect(s.client.get(path("vhost-limits"))).json()
    table(
        ("vhost", "limits"), ((entry["vhost"], json.dumps(entry["value"], separators=(",", ":"))) for entry in entries)
    )


def _limits(s: Session, vhost: str) -> dict[str, int]:
    response = s.client.expect(s.client.get(path("vhost-limits", vhost)), NoSuchVHost(vhost))
    entries = response.json()
    return dict(entries[0]["value"]) if entries else {}


# ---- definitions -------------------------------------------------------------------------


@ctl.command("export_definitions")
@click.argument("destination")
@click.pass_obj
def export_definitions(s: Session, destination: str) -> None:
    """Write users, vhosts, permissions, limits, exchanges, queues and bindings as
    RabbitMQ's definitions JSON to a file, or to stdout for "-"."""
    response = s.client.expect(s.client.get(path("definitions")))
    if destination == "-":
        click.echo(response.body.decode())
        return
    s.info(f'Exporting definitions in JSON to a file at "{destination}" ...')
    try:
        Path(destination).write_bytes(response.body)
    except OSError as exc:
        raise CtlError(f"cannot write {destination}: {exc.strerror}") from None


@ctl.command("import_definitions")
@click.argument("source")
@click.pass_obj
def import_definitions(s: Session, source: str) -> None:
    """Import a definitions file (RabbitMQ's, LavinMQ's or Lavin's JSON), or stdin for "-"."""
    s.info(f'Importing definitions in JSON from a file at "{source}" ...')
    try:
        document = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise CtlError(f"cannot read {source}: {exc.strerror}") from None
    s.client.expect(s.client.request("POST", path("definitions"), raw_body=document))
    s.info("Successfully imported definitions.")
