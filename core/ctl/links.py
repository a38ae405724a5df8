"""`lavin ctl` for shovels and federation links (rabbitmqctl's `shovel_status` and
`federation_status`, from RabbitMQ's shovel and federation plugins)."""

from __future__ import annotations

import click
from lavin.ctl.client import Session, path
from lavin.ctl.group import ctl, table_options

SHOVEL_COLUMNS = ("name", "vhost", "type", "state", "src_uri", "dest_uri", "forwarded", "timestamp", "reason")


@ctl.command("shovel_status")
@table_options
@click.pass_obj
def shovel_status(s: Session) -> None:
    """List every shovel with its state, its ends (no passwords) and what it moved."""
    s.info("Shovel status on node ...")
    s.show(SHOVEL_COLUMNS, s.client.expect(s.client.get(path("shovels"))).json())


FEDERATION_COLUMNS = (
    "type",
    "vhost",
    "exchange",
    "queue",
    "upstream",
    "uri",
    "status",
    "forwarded",
    "timestamp",
    "error",
)


@ctl.command("federation_status")
@table_options
@click.pass_obj
def federation_status(s: Session) -> None:
    """List every federation link: what it federates, from which upstream, and its status."""
    s.info("Listing federation links on node ...")
    s.show(FEDERATION_COLUMNS, s.client.expect(s.client.get(path("federation-links"))).json())
