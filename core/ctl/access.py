"""`lavin ctl` for users, vhosts, permissions, topic permissions, vhost limits and definitions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from lavin.ctl.client import BrokerFailed, CtlError, NoSuchUser, NoSuchVHost, Session, json_object, path
from lavin.ctl.group import ctl, table_options, vhost_option

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
@table_options
@click.pass_obj
def list_users(s: Session) -> None:
    """List users and their tags."""
    s.info("Listing users ...")
    users = s.client.expect(s.client.get(path("users"))).json()
    s.show(("user", "tags"), ({"user": user["name"], "tags": user["tags"]} for user in users))


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
@table_options
@click.pass_obj
def list_vhosts(s: Session) -> None:
    """List vhosts."""
    s.info("Listing vhosts ...")
    s.show(("name",), s.client.expect(s.client.get(path("vhosts"))).json())


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
@table_options
@click.pass_obj
def list_permissions(s: Session, vhost: str) -> None:
    """List the users' permissions on a vhost."""
    s.info(f'Listing permissions for vhost "{vhost}" ...')
    response = s.client.expect(s.client.get(path("vhosts", vhost, "permissions")), NoSuchVHost(vhost))
    s.show(("user", "configure", "write", "read"), response.json())


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
@table_options
@click.pass_obj
def list_topic_permissions(s: Session, vhost: str) -> None:
    """List the users' topic permissions on a vhost."""
    s.info(f'Listing topic permissions for vhost "{vhost}" ...')
    response = s.client.expect(s.client.get(path("vhosts", vhost, "topic-permissions")), NoSuchVHost(vhost))
    s.show(("user", "exchange", "write", "read"), response.json())


# ---- vhost limits ------------------------------------------------------------------------


@ctl.command("set_vhost_limits")
@vhost_option
@click.argument("definition")
@click.pass_obj
def set_vhost_limits(s: Session, vhost: str, definition: str) -> None:
    """Replace a vhost's limits with a JSON object: '{"max-connections": 100, "max-queues": 10}'."""
    s.info(f'Setting vhost limits to "{definition}" for vhost "{vhost}" ...')
    limits = json_object(definition, "the limits", '{"max-connections": 10}')
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
@table_options
@click.pass_obj
def list_vhost_limits(s: Session, vhost: str, all_vhosts: bool) -> None:
    """Show a vhost's limits as JSON."""
    if not all_vhosts:
        s.info(f'Listing limits for vhost "{vhost}" ...')
        click.echo(json.dumps(_limits(s, vhost), separators=(",", ":")))
        return
    s.info("Listing limits for all vhosts ...")
    entries = s.client.expect(s.client.get(path("vhost-limits"))).json()
    s.show(("vhost", "limits"), ({"vhost": entry["vhost"], "limits": entry["value"]} for entry in entries))


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
