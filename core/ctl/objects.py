"""`lavin ctl` for the broker's status and its queues, exchanges, bindings, connections,
channels and consumers: rabbitmqctl's list commands with their columns, and closing,
purging and deleting."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import click
from lavin.ctl.client import BadUsage, CtlError, NoSuchVHost, Session, cell, path
from lavin.ctl.group import ctl, json_option, table_options, vhost_option

# ---- status ------------------------------------------------------------------------------


@ctl.command("status")
@json_option
@click.pass_obj
def status(s: Session) -> None:
    """Show the broker's version, uptime, plugins, alarms, memory, disk, totals and listeners."""
    overview = s.client.expect(s.client.get(path("overview"))).json()
    nodes = s.client.expect(s.client.get(path("nodes"))).json()
    node: dict[str, Any] = nodes[0] if nodes else {}
    vhost_count = len(s.client.expect(s.client.get(path("vhosts"))).json())
    if s.as_json:
        click.echo(json.dumps({"overview": overview, "node": node, "vhost_count": vhost_count}))
        return
    s.info(f"Status of node {overview.get('node', node.get('name', ''))} ...")
    totals = overview.get("object_totals", {})
    sections: list[tuple[str, list[str]]] = [
        ("Runtime", _present(
            ("OS PID", node.get("os_pid")),
            ("Uptime (seconds)", None if node.get("uptime") is None else node["uptime"] // 1000),
            (f"{overview.get('product_name', 'Lavin')} version", overview.get("product_version")),
            ("RabbitMQ compatibility version", overview.get("rabbitmq_version")),
            ("Node name", overview.get("node")),
        )),
        ("Plugins", [f" * {name}" for name in node.get("enabled_plugins", [])] or ["(none)"]),
        ("Data directory", _present(("Node data directory", node.get("db_dir")))),
        ("Alarms", _alarms(node)),
        ("Memory", _present(
            ("Total memory used", _gigabytes(node.get("mem_used"))),
            ("Memory high watermark, computed to", _gigabytes(node.get("mem_limit"))),
        )),
        ("Free Disk Space", _present(
            ("Low free disk space watermark", _gigabytes(node.get("disk_free_limit"))),
            ("Free disk space", _gigabytes(node.get("disk_free"))),
        )),
        ("Totals", _present(
            ("Connection count", totals.get("connections")),
            ("Queue count", totals.get("queues")),
            ("Virtual host count", vhost_count),
        )),
        ("Listeners", [
            f"Interface: {listener.get('ip_address')}, port: {listener.get('port')}, "
            f"protocol: {listener.get('protocol')}"
            for listener in overview.get("listeners", [])
        ]),
    ]  # fmt: skip
    click.echo("\n\n".join("\n\n".join((title, "\n".join(lines))) for title, lines in sections if lines))


def _present(*pairs: tuple[str, Any]) -> list[str]:
    """`label: value` lines for the values the broker reported."""
    return [f"{label}: {cell(value)}" for label, value in pairs if value is not None]


def _gigabytes(size: Any) -> str | None:
    return None if size is None else f"{size / 1e9:.4f} gb"


def _alarms(node: Mapping[str, Any]) -> list[str]:
    raised = [
        alarm for key, alarm in (("mem_alarm", "memory"), ("disk_free_alarm", "free disk space")) if node.get(key)
    ]
    return [f"{alarm.capitalize()} alarm on node {node.get('name', '')}" for alarm in raised] or ["(none)"]


# ---- queues, exchanges, bindings, connections, channels, consumers -----------------------

# What a column shows: a dotted field of the API's JSON, or a value made from the whole item.
Field = str | Callable[[Mapping[str, Any]], Any]


class Listing(NamedTuple):
    """A rabbitmqctl `list_*` command read from a management API list: its info keys (the
    columns one may ask for, in rabbitmqctl's order), the JSON field each shows, and the
    columns shown when none are asked for. The API returns every rabbitmqctl key under the
    same name, except where `fields` says otherwise; Lavin has no Erlang pids, so a `pid`
    column shows the object's name (what `close_connection` takes)."""

    api: str
    per_vhost: bool
    keys: tuple[str, ...]
    defaults: tuple[str, ...]
    fields: Mapping[str, Field] = {}

    def field(self, key: str) -> Field:
        return self.fields.get(key, key)

    def columns(self, asked: Sequence[str]) -> list[str]:
        """The asked columns (also comma-separated, as rabbitmqctl takes them), checked."""
        columns = [column for argument in asked for column in argument.split(",") if column] or list(self.defaults)
        unknown = [column for column in columns if column not in self.keys]
        if unknown:
            raise BadUsage(
                f"Info key(s) {','.join(unknown)} are not supported. Supported keys: {', '.join(sorted(self.keys))}"
            )
        return columns

    def records(self, s: Session, vhost: str, columns: Sequence[str]) -> list[dict[str, Any]]:
        fields = {column: self.field(column) for column in columns}
        wanted = sorted({field for field in fields.values() if isinstance(field, str)})
        parts = (self.api, vhost) if self.per_vhost else (self.api,)
        query = {"columns": ",".join(wanted)} if wanted else None
        not_found = NoSuchVHost(vhost) if self.per_vhost else None
        items = s.client.expect(s.client.get(path(*parts, query=query)), not_found).json()
        return [{column: _value(item, field) for column, field in fields.items()} for item in items]


def _value(item: Mapping[str, Any], field: Field) -> Any:
    if not isinstance(field, str):
        return field(item)
    value: Any = item
    for part in field.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


QUEUES = Listing(
    "queues", True,
    ("name", "durable", "auto_delete", "arguments", "policy", "pid", "owner_pid", "exclusive",
     "exclusive_consumer_pid", "exclusive_consumer_tag", "messages_ready", "messages_unacknowledged", "messages",
     "messages_ready_ram", "messages_unacknowledged_ram", "messages_ram", "messages_persistent", "message_bytes",
     "message_bytes_ready", "message_bytes_unacknowledged", "message_bytes_ram", "message_bytes_persistent",
     "head_message_timestamp", "disk_reads", "disk_writes", "consumers", "consumer_utilisation",
     "consumer_capacity", "memory", "slave_pids", "synchronised_slave_pids", "state", "type", "leader", "members",
     "online"),
    ("name", "messages"),
    {"pid": "name", "owner_pid": "owner_pid_details.name", "exclusive_consumer_pid": "exclusive_consumer_details.name"},
)  # fmt: skip
EXCHANGES = Listing(
    "exchanges", True,
    ("name", "type", "durable", "auto_delete", "internal", "arguments", "policy"),
    ("name", "type"),
)  # fmt: skip
BINDINGS = Listing(
    "bindings", True,
    ("source_name", "source_kind", "destination_name", "destination_kind", "routing_key", "arguments"),
    ("source_name", "source_kind", "destination_name", "destination_kind", "routing_key", "arguments"),
    {"source_name": "source", "source_kind": lambda _: "exchange", "destination_name": "destination",
     "destination_kind": "destination_type"},
)  # fmt: skip
CONNECTIONS = Listing(
    "connections", False,
    ("pid", "name", "port", "host", "peer_port", "peer_host", "ssl", "ssl_protocol", "ssl_key_exchange", "ssl_cipher",
     "ssl_hash", "peer_cert_subject", "peer_cert_issuer", "peer_cert_validity", "state", "channels", "protocol",
     "auth_mechanism", "user", "vhost", "timeout", "frame_max", "channel_max", "client_properties", "recv_oct",
     "recv_cnt", "send_oct", "send_cnt", "send_pend", "connected_at"),
    ("user", "peer_host", "peer_port", "state"),
    {"pid": "name"},
)  # fmt: skip
CHANNELS = Listing(
    "channels", False,
    ("pid", "connection", "name", "number", "user", "vhost", "transactional", "confirm", "consumer_count",
     "messages_unacknowledged", "messages_uncommitted", "acks_uncommitted", "messages_unconfirmed", "prefetch_count",
     "global_prefetch_count"),
    ("pid", "user", "consumer_count", "messages_unacknowledged"),
    {"pid": "name", "connection": "connection_details.name"},
)  # fmt: skip
CONSUMERS = Listing(
    "consumers", True,
    ("queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count", "active", "activity_status",
     "arguments"),
    ("queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count", "active", "arguments"),
    {"queue_name": "queue.name", "channel_pid": "channel_details.name"},
)  # fmt: skip


def list_command(name: str, listing: Listing, banner: str) -> None:
    """Add `lavin ctl NAME [-p VHOST] [COLUMN ...]`; `banner` may name `{vhost}`."""

    def command(s: Session, columns: tuple[str, ...], vhost: str = "/") -> None:
        chosen = listing.columns(columns)
        s.info(banner.format(vhost=vhost))
        s.show(chosen, listing.records(s, vhost, chosen))

    decorated = click.pass_obj(table_options(click.argument("columns", nargs=-1)(command)))
    ctl.command(
        name,
        short_help=f"List {listing.api}, with the columns asked for.",
        help=f"List {listing.api}. COLUMN: {', '.join(listing.keys)} (default: {' '.join(listing.defaults)}).",
    )(vhost_option(decorated) if listing.per_vhost else decorated)


list_command("list_queues", QUEUES, "Listing queues for vhost {vhost} ...")
list_command("list_exchanges", EXCHANGES, "Listing exchanges for vhost {vhost} ...")
list_command("list_bindings", BINDINGS, "Listing bindings for vhost {vhost}...")
list_command("list_connections", CONNECTIONS, "Listing connections ...")
list_command("list_channels", CHANNELS, "Listing channels ...")
list_command("list_consumers", CONSUMERS, "Listing consumers in vhost {vhost} ...")


@ctl.command("close_connection")
@click.argument("name")
@click.argument("reason")
@click.pass_obj
def close_connection(s: Session, name: str, reason: str) -> None:
    """Close a connection (its name, as list_connections shows) and tell the client why."""
    s.info(f"Closing connection {name}, reason: {reason}...")
    response = s.client.request("DELETE", path("connections", name), headers={"X-Reason": reason})
    s.client.expect(response, CtlError(f'Connection "{name}" does not exist'))


@ctl.command("purge_queue")
@vhost_option
@click.argument("name")
@click.pass_obj
def purge_queue(s: Session, vhost: str, name: str) -> None:
    """Remove every ready message of a queue."""
    s.info(f"Purging queue '{name}' in vhost '{vhost}' ...")
    s.client.expect(s.client.request("DELETE", path("queues", vhost, name, "contents")), BadUsage("Queue not found"))


@ctl.command("delete_queue")
@vhost_option
@click.argument("name")
@click.option("-e", "--if-empty", is_flag=True, help="Only if the queue has no ready messages.")
@click.option("-u", "--if-unused", is_flag=True, help="Only if the queue has no consumers.")
@click.pass_obj
def delete_queue(s: Session, vhost: str, name: str, if_empty: bool, if_unused: bool) -> None:
    """Delete a queue with its messages."""
    conditions = [
        text for wanted, text in ((if_empty, "if queue is empty "), (if_unused, "if queue is unused ")) if wanted
    ]
    s.info(f"Deleting queue '{name}' on vhost '{vhost}' " + "and ".join(conditions) + "...")
    not_found = BadUsage("Queue not found")
    ready = s.client.expect(s.client.get(path("queues", vhost, name)), not_found).json().get("messages_ready", 0)
    query = {key: "true" for key, wanted in (("if-empty", if_empty), ("if-unused", if_unused)) if wanted}
    response = s.client.request("DELETE", path("queues", vhost, name, query=query))
    if response.status == 400 and "not empty" in response.reason:
        raise BadUsage("Queue is not empty")
    if response.status == 400 and "in use" in response.reason:
        raise BadUsage("Queue is in use")
    s.client.expect(response, not_found)
    click.echo(f"Queue was successfully deleted with {ready} ready messages")


@ctl.command("reload_tls")
@click.pass_obj
def reload_tls(s: Session) -> None:
    """Read the TLS certificate, key and CA files again (as SIGHUP does): new TLS connections
    get them, open ones keep theirs. On failure the current ones stay."""
    s.info("Reloading TLS certificates ...")
    s.client.expect(s.client.request("POST", path("tls", "reload")))
