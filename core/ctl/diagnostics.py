"""`lavin ctl` for what rabbitmq-diagnostics answers and what Docker, Kubernetes and systemd
call: `ping`, the `check_*` health checks, `await_startup`, `listeners`,
`memory_breakdown`, `environment`, `log_tail` and `stop`. A check that fails exits 69
(EX_UNAVAILABLE) with the reason, as rabbitmq-diagnostics does; `--formatter json` prints
`{"result": "ok", ...}` or `{"result": "error", ...}` on stdout as well."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import click
from lavin.ctl.client import TIMEOUT, BrokerUnavailable, Session, cell, path
from lavin.ctl.group import ctl, json_option

# rabbitmq-diagnostics' default for await_startup, in seconds.
AWAIT_STARTUP_TIMEOUT: Final = 300
POLL_INTERVAL: Final = 0.2
PORT_CONNECT_TIMEOUT: Final = 5.0
# A listener bound to every address is reached on loopback.
ANY_ADDRESS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
PURPOSES: Final = {
    "amqp": "AMQP 0-9-1",
    "amqp/ssl": "AMQP 0-9-1 over TLS",
    "http": "HTTP API",
    "https": "HTTP API over TLS",
    "http/prometheus": "Prometheus exporter API over HTTP",
}
UNITS: Final = {"bytes": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3}


def _overview(s: Session) -> dict[str, Any]:
    overview: dict[str, Any] = s.client.expect(s.client.get(path("overview"))).json()
    return overview


def _verdict(s: Session, failure: str | None, ok_line: str, **details: Any) -> None:
    """The end of a check: the line that says it passed, or the reason and exit code 69."""
    if s.as_json:
        click.echo(json.dumps({"result": "ok" if failure is None else "error", **details}))
    if failure is not None:
        raise BrokerUnavailable(failure)
    if not s.as_json:
        click.echo(ok_line)


@ctl.command("ping")
@json_option
@click.pass_obj
def ping(s: Session) -> None:
    """Whether the broker answers on its control socket (69 if not)."""
    node = _overview(s).get("node", "")
    s.info(f"Will ping {node}. This only checks if the broker process answers on its control socket.")
    _verdict(s, None, "Ping succeeded")


@ctl.command("check_running")
@json_option
@click.pass_obj
def check_running(s: Session) -> None:
    """Whether the broker has started and serves: its AMQP listener is open."""
    overview = _overview(s)
    node = overview.get("node", "")
    s.info(f"Checking if the broker is running on node {node} ...")
    running = any(listener.get("protocol", "").startswith("amqp") for listener in overview.get("listeners", []))
    failure = None if running else f"The broker on node {node} is not running: no AMQP listener is open"
    _verdict(s, failure, f"The broker on node {node} is fully booted and running")


def _alarm_check(s: Session, api: str, scope: str, clear_line: str) -> None:
    node = _overview(s).get("node", "")
    s.info(f"Asking node {node} to report any {scope} resource alarms ...")
    response = s.client.get(path("health", "checks", api))
    if response.status not in (200, 503):
        s.client.expect(response)
    alarms = response.json().get("alarms", [])
    failure = None
    if alarms:
        raised = ", ".join(f"{alarm['resource']} on node {alarm['node']}" for alarm in alarms)
        failure = f"Node {node} reported alarms: {raised}"
    _verdict(s, failure, clear_line.format(node=node), alarms=alarms)


@ctl.command("check_local_alarms")
@json_option
@click.pass_obj
def check_local_alarms(s: Session) -> None:
    """Fails (69) while a memory or disk alarm is raised on this node."""
    _alarm_check(s, "local-alarms", "local", "Node {node} reported no local alarms")


@ctl.command("check_alarms")
@json_option
@click.pass_obj
def check_alarms(s: Session) -> None:
    """Fails (69) while a memory or disk alarm is raised (Lavin is a single node: as check_local_alarms)."""
    _alarm_check(s, "alarms", "known", "Node {node} reported no alarms, local or clusterwide")


@ctl.command("check_virtual_hosts")
@json_option
@click.pass_obj
def check_virtual_hosts(s: Session) -> None:
    """Fails (69) when a virtual host is not running."""
    node = _overview(s).get("node", "")
    s.info(f"Checking if all vhosts are running on node {node} ...")
    response = s.client.get(path("health", "checks", "virtual-hosts"))
    if response.status not in (200, 503):
        s.client.expect(response)
    down = response.json().get("virtual-hosts", [])
    failure = f"Some virtual hosts are down: {', '.join(down)}" if down else None
    _verdict(s, failure, f"Node {node} reported all vhosts as running", **{"virtual-hosts": down})


def _listener_rows(overview: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "node": overview.get("node", ""),
            "interface": listener.get("ip_address"),
            "port": listener.get("port"),
            "protocol": listener.get("protocol"),
            "purpose": PURPOSES.get(listener.get("protocol", ""), listener.get("protocol")),
        }
        for listener in overview.get("listeners", [])
    ]


@ctl.command("check_port_connectivity")
@json_option
@click.pass_obj
def check_port_connectivity(s: Session) -> None:
    """Connect to every TCP listener's port; fails (69) when one does not accept."""
    overview = _overview(s)
    node = overview.get("node", "")
    s.info(f"Testing TCP connections to all active listeners on node {node} ...")
    refused = []
    for listener in _listener_rows(overview):
        host = ANY_ADDRESS.get(str(listener["interface"]), str(listener["interface"]))
        try:
            socket.create_connection((host, int(listener["port"])), timeout=PORT_CONNECT_TIMEOUT).close()
        except OSError as exc:
            refused.append(f"{listener['protocol']} on {host}:{listener['port']} ({exc.strerror or exc})")
    failure = f"Connection to ports of listeners on node {node} failed: {'; '.join(refused)}" if refused else None
    _verdict(s, failure, f"Successfully connected to ports of all listeners on node {node}.", failed=refused)


@ctl.command("await_startup")
@click.option(
    "-t", "--timeout", type=click.IntRange(min=0), default=AWAIT_STARTUP_TIMEOUT, show_default=True,
    help="Seconds to wait.",
)  # fmt: skip
@json_option
@click.pass_obj
def await_startup(s: Session, timeout: int) -> None:
    """Wait until the broker has started (its control socket answers), for at most --timeout seconds; 69 if not."""
    s.info(f"Waiting for the broker to start up, for up to {timeout} seconds ...")
    deadline = time.monotonic() + timeout
    node = None
    while node is None:
        try:
            node = _overview(s).get("node", "")
        except BrokerUnavailable as exc:
            if time.monotonic() >= deadline:
                raise BrokerUnavailable(f"the broker did not start within {timeout} seconds: {exc.message}") from None
            time.sleep(POLL_INTERVAL)
    _verdict(s, None, f"The broker on node {node} has started")


@ctl.command("listeners")
@json_option
@click.pass_obj
def listeners(s: Session) -> None:
    """The broker's listeners: interface, port, protocol and what it serves."""
    overview = _overview(s)
    rows = _listener_rows(overview)
    if s.as_json:
        click.echo(json.dumps(rows))
        return
    s.info(f"Asking node {overview.get('node', '')} to report its protocol listeners ...")
    for row in rows:
        click.echo(f"Interface: {row['interface']}, port: {row['port']}, protocol: {row['protocol']}, "
                   f"purpose: {row['purpose']}")  # fmt: skip


LAVIN_MEMORY_CATEGORIES: Final = ("queue_procs", "connection_readers", "connection_writers", "other_system")


def _memory_categories(s: Session) -> tuple[int, dict[str, int]]:
    """The process's resident memory, and what of it the broker attributes, in RabbitMQ's
    categories (those Lavin has no counterpart of, always 0, are left out)."""
    node = s.client.expect(s.client.get(path("nodes"))).json()[0]["name"]
    memory = s.client.expect(s.client.get(path("nodes", node, "memory"))).json()["memory"]
    total = int(memory["total"]["rss"])
    categories = {name: int(memory[name]) for name in LAVIN_MEMORY_CATEGORIES}
    return total, categories


@ctl.command("memory_breakdown")
@click.option("--unit", type=click.Choice(list(UNITS)), default="gb", show_default=True, help="The unit shown.")
@json_option
@click.pass_obj
def memory_breakdown(s: Session, unit: str) -> None:
    """What the broker's memory holds: its queues' records and decoded messages, bodies being
    received, socket write buffers, and the rest (the interpreter, indexes, other buffers)."""
    total, categories = _memory_categories(s)
    ordered = sorted(categories.items(), key=lambda item: -item[1])
    share = {name: round(100 * size / total, 2) if total else 0.0 for name, size in ordered}
    if s.as_json:
        click.echo(json.dumps({name: {"bytes": size, "percentage": share[name]} for name, size in ordered}
                              | {"total": {"rss": total}}))  # fmt: skip
        return
    s.info("Reporting memory breakdown ...")
    for name, size in ordered:
        amount = f"{size / UNITS[unit]:.4f} {unit}" if unit != "bytes" else f"{size} bytes"
        click.echo(f"{name}: {amount} ({share[name]} %)")


@ctl.command("environment")
@json_option
@click.pass_obj
def environment(s: Session) -> None:
    """The broker's effective configuration, every setting by name; passwords masked."""
    settings = s.client.expect(s.client.get(path("environment"))).json()
    if s.as_json:
        click.echo(json.dumps(settings))
        return
    s.info("Application environment of the broker ...")
    for name in sorted(settings):
        click.echo(f"{name}: {cell(settings[name])}")


@ctl.command("log_tail")
@click.option(
    "-N", "--number", type=click.IntRange(0, 1000), default=50, show_default=True, help="How many lines."
)  # fmt: skip
@json_option
@click.pass_obj
def log_tail(s: Session, number: int) -> None:
    """The broker's last log lines (it keeps the last 1000 in memory)."""
    lines = s.client.expect(s.client.get(path("log-tail", query={"lines": str(number)}))).json()
    if s.as_json:
        click.echo(json.dumps(lines))
        return
    for line in lines:
        click.echo(line)


@ctl.command("stop")
@click.pass_obj
def stop(s: Session) -> None:
    """Stop the broker gracefully, as SIGTERM does, and wait until its process has ended."""
    node = s.client.expect(s.client.get(path("nodes"))).json()[0]
    s.info(f"Stopping and halting node {node.get('name', '')} ...")
    s.client.expect(s.client.request("POST", path("stop")))
    deadline = time.monotonic() + TIMEOUT
    while _process_runs(int(node["os_pid"])):
        if time.monotonic() >= deadline:
            raise BrokerUnavailable(f"the broker (process {node['os_pid']}) has not stopped within {TIMEOUT:.0f} s")
        time.sleep(POLL_INTERVAL)


def _process_runs(pid: int) -> bool:
    """Whether the process is alive: not gone, and not a zombie its parent has yet to reap."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):  # no /proc: trust the signal
        return True
    return state != "Z"
