"""`lavin ctl` for runtime parameters, global parameters, and closing many connections at once."""

from __future__ import annotations

import json
from typing import Any

import click
from lavin.ctl.client import CtlError, NoSuchVHost, Session, path
from lavin.ctl.group import ctl, table_options, vhost_option

NO_PARAMETER = "Parameter does not exist"


def _json_value(text: str) -> Any:
    """A parameter's value: any JSON, as rabbitmqctl takes it."""
    try:
        return json.loads(text)
    except ValueError:
        raise CtlError(f'the value must be JSON, such as \'{{"uri": "amqp://"}}\', not {text}') from None


@ctl.command("set_parameter")
@vhost_option
@click.argument("component")
@click.argument("name")
@click.argument("value")
@click.pass_obj
def set_parameter(s: Session, vhost: str, component: str, name: str, value: str) -> None:
    """Set the runtime parameter NAME of COMPONENT (shovel, federation-upstream, ...) to a JSON VALUE."""
    s.info(f'Setting runtime parameter "{name}" for component "{component}" to "{value}" in vhost "{vhost}" ...')
    body = {"component": component, "vhost": vhost, "name": name, "value": _json_value(value)}
    s.client.expect(s.client.request("PUT", path("parameters", component, vhost, name), body), NoSuchVHost(vhost))


@ctl.command("clear_parameter")
@vhost_option
@click.argument("component")
@click.argument("name")
@click.pass_obj
def clear_parameter(s: Session, vhost: str, component: str, name: str) -> None:
    """Remove the runtime parameter NAME of COMPONENT."""
    s.info(f'Clearing runtime parameter "{name}" for component "{component}" on vhost "{vhost}" ...')
    response = s.client.request("DELETE", path("parameters", component, vhost, name))
    s.client.expect(response, CtlError(NO_PARAMETER))


@ctl.command("list_parameters")
@vhost_option
@table_options
@click.pass_obj
def list_parameters(s: Session, vhost: str) -> None:
    """List a vhost's runtime parameters: component, name and value."""
    s.check_vhost(vhost)
    s.info(f'Listing runtime parameters for vhost "{vhost}" ...')
    parameters = s.client.expect(s.client.get(path("parameters"))).json()
    s.show(("component", "name", "value"), (item for item in parameters if item.get("vhost") == vhost))


@ctl.command("set_global_parameter")
@click.argument("name")
@click.argument("value")
@click.pass_obj
def set_global_parameter(s: Session, name: str, value: str) -> None:
    """Set the global runtime parameter NAME to a JSON VALUE."""
    s.info(f'Setting global runtime parameter "{name}" to "{value}" ...')
    body = {"name": name, "value": _json_value(value)}
    s.client.expect(s.client.request("PUT", path("global-parameters", name), body))


@ctl.command("clear_global_parameter")
@click.argument("name")
@click.pass_obj
def clear_global_parameter(s: Session, name: str) -> None:
    """Remove the global runtime parameter NAME."""
    s.info(f'Clearing global runtime parameter "{name}" ...')
    s.client.expect(s.client.request("DELETE", path("global-parameters", name)), CtlError(NO_PARAMETER))


@ctl.command("list_global_parameters")
@table_options
@click.pass_obj
def list_global_parameters(s: Session) -> None:
    """List the global runtime parameters: name and value."""
    s.info("Listing global runtime parameters ...")
    s.show(("name", "value"), s.client.expect(s.client.get(path("global-parameters"))).json())


@ctl.command("close_all_connections")
@vhost_option
@click.option("--global", "every_vhost", is_flag=True, help="Every vhost's connections, not only -p's.")
@click.option("--limit", type=click.IntRange(min=0), help="Close at most this many.")
@click.argument("reason")
@click.pass_obj
def close_all_connections(s: Session, vhost: str, every_vhost: bool, limit: int | None, reason: str) -> None:
    """Close a vhost's connections (every vhost's with --global); each client gets 320 CONNECTION_FORCED - REASON."""
    if every_vhost:
        s.info("Closing all connections to all vhosts ...")
        listed = s.client.get(path("connections", query={"columns": "name"}))
    else:
        s.info(f'Closing all connections in vhost "{vhost}" ...')
        listed = s.client.get(path("vhosts", vhost, "connections"))
    names = [item["name"] for item in s.client.expect(listed, NoSuchVHost(vhost)).json()][:limit]
    for name in names:
        response = s.client.request("DELETE", path("connections", name), headers={"X-Reason": reason})
        if response.status != 404:  # one that closed meanwhile is as good as closed
            s.client.expect(response)
    s.info(f"Closed {len(names)} connections")


@ctl.command("close_all_user_connections")
@click.argument("user")
@click.argument("reason")
@click.pass_obj
def close_all_user_connections(s: Session, user: str, reason: str) -> None:
    """Close every connection of USER; each client gets 320 CONNECTION_FORCED - REASON."""
    s.info(f'Closing connections of user "{user}", reason: {reason} ...')
    response = s.client.request("DELETE", path("connections", "username", user), headers={"X-Reason": reason})
    s.client.expect(response)
