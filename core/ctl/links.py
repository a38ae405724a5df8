"""`lavin ctl` for shovels (rabbitmqctl's `shovel_status`, from the shovel plugin)."""

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
