"""`lavin ctl cluster_status`: the cluster as `rabbitmqctl cluster_status` shows it, in
sections, with Lavin's roles, in-sync replicas, replication lag and etcd health. It asks
`/api/cluster`, which a follower answers too; `--formatter json` prints that document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click
from lavin.ctl.client import Session, path
from lavin.ctl.group import ctl, json_option


@ctl.command("cluster_status")
@json_option
@click.pass_obj
def cluster_status(s: Session) -> None:
    """The cluster: its nodes and their roles, the leader, the in-sync replicas, each follower's replication lag
    and the health of the etcd endpoints (a single node is a cluster of one)."""
    status: dict[str, Any] = s.client.expect(s.client.get(path("cluster"))).json()
    if s.as_json:
        click.echo(json.dumps(status))
        return
    s.info(f"Cluster status of node {status['this_node']} ...")
    for title, lines in _sections(status):
        click.echo(f"{title}\n")
        for line in lines:
            click.echo(line)
        click.echo()


def _sections(status: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    nodes: list[dict[str, Any]] = status["nodes"]
    leader = status["leader"]
    yield "Basics", [f"Cluster name: {leader or status['this_node']}"]
    yield "Running Nodes", [f"{node['name']} ({_role(node)})" for node in nodes]
    yield "Leader", [leader or "none: no leader is elected"]
    yield "In-sync replicas", list(status["in_sync_replicas"]) or ["none"]
    followers = [node for node in nodes if node["role"] != "leader"]
    yield "Replication lag", [_lag(node) for node in followers] or ["none: no followers"]
    if not status["clustering"]:
        yield "etcd", ["none: clustering is not enabled"]
    else:
        yield "etcd", [_etcd(endpoint) for endpoint in status["etcd"]] or ["none"]


def _role(node: dict[str, Any]) -> str:
    if node["role"] == "leader":
        return "leader"
    return f"{node['role']}, {'in sync' if node['in_sync'] else 'not in sync'}"


def _lag(node: dict[str, Any]) -> str:
    size, age = node["lag_bytes"], node["lag_seconds"]
    if size is None and age is None:
        return f"{node['name']}: unknown"
    return f"{node['name']}: {'unknown' if size is None else size} bytes, {'unknown' if age is None else age} seconds"


def _etcd(endpoint: dict[str, Any]) -> str:
    health = "healthy" if endpoint["healthy"] else "unhealthy"
    return f"{endpoint['endpoint']}: {health} ({endpoint['detail']})"
