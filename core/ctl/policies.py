"""`lavin ctl` for policies and operator policies."""

from __future__ import annotations

import click
from lavin.ctl.client import CtlError, NoSuchVHost, Session, json_object, path
from lavin.ctl.group import ctl, table_options, vhost_option

POLICY_COLUMNS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")


def policy_commands(kind: str, api: str, title: str, listed: str) -> None:
    """Add `set_KIND`, `clear_KIND` and `list_KINDs` for policies or operator policies, with
    rabbitmqctl's lines: `title` names one ("policy"), `listed` all ("policies")."""

    @ctl.command(
        f"set_{kind}",
        help=f"Set the {title} NAME: a JSON DEFINITION for the queues and exchanges whose name matches PATTERN.",
    )
    @vhost_option
    @click.option("--priority", type=int, default=0, show_default=True, help="The highest matching priority applies.")
    @click.option(
        "--apply-to",
        default="all",
        show_default=True,
        help="all, queues, classic_queues, quorum_queues, streams or exchanges.",
    )
    @click.argument("name")
    @click.argument("pattern")
    @click.argument("definition")
    @click.pass_obj
    def set_policy(
        s: Session, vhost: str, priority: int, apply_to: str, name: str, pattern: str, definition: str
    ) -> None:
        s.info(
            f'Setting {title} "{name}" for pattern "{pattern}" to "{definition}" '
            f'with priority "{priority}" for vhost "{vhost}" ...'
        )
        parsed = json_object(definition, "the definition", '{"max-length": 10}')
        body = {"pattern": pattern, "definition": parsed, "priority": priority, "apply-to": apply_to}
        s.client.expect(s.client.request("PUT", path(api, vhost, name), body), NoSuchVHost(vhost))

    @ctl.command(f"clear_{kind}", help=f"Remove the {title} NAME.")
    @vhost_option
    @click.argument("name")
    @click.pass_obj
    def clear_policy(s: Session, vhost: str, name: str) -> None:
        s.info(f'Clearing {title} "{name}" on vhost "{vhost}" ...')
        s.client.expect(s.client.request("DELETE", path(api, vhost, name)), CtlError("Parameter does not exist"))

    @ctl.command(f"list_{kind.removesuffix('y')}ies", help=f"List a vhost's {listed}.")
    @vhost_option
    @table_options
    @click.pass_obj
    def list_policies(s: Session, vhost: str) -> None:
        s.info(f'Listing {listed} for vhost "{vhost}" ...')
        s.show(POLICY_COLUMNS, s.client.expect(s.client.get(path(api, vhost)), NoSuchVHost(vhost)).json())


policy_commands("policy", "policies", "policy", "policies")
policy_commands("operator_policy", "operator-policies", "operator policy override", "operator policy overrides")
