"""A private 3-node RabbitMQ cluster on loopback, for the clustered rows of `bench/compare`.

Each node is a `rabbitmq-server` of its own (as `lavin.bench.brokers` starts one): its own
mnesia and log directories, AMQP and distribution ports, no plugins, and one Erlang cookie
shared through a common HOME. Nodes 2.. join node 1 with `rabbitmqctl stop_app /
join_cluster / start_app`; the cluster is ready when `cluster_status` lists every node as
running. Every node is stopped at the end, on error too. When a cluster cannot be formed here,
`ClusterUnavailable` says why in one line, so a comparison row can show that instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from lavin.bench.brokers import (
    CTL_TIMEOUT,
    EPMD_PORT,
    RABBITMQ_SERVER,
    RABBITMQCTL,
    START_TIMEOUT,
    free_port,
    loopback_uri,
    port_accepts,
    rabbitmq_environment,
    stop_epmd_unless,
    stop_process,
    wait_until_listening,
)

COOKIE = "LAVINBENCHCLUSTERCOOKIE"
POLL = 0.5  # seconds between cluster_status checks


class ClusterUnavailable(RuntimeError):
    """A cluster cannot run on this machine; the message is one line saying why."""


@dataclass(frozen=True)
class RabbitNode:
    name: str  # the Erlang node name, rabbit-bench-1-<pid>@localhost
    uri: str
    pid: int  # the Erlang VM's


@dataclass(frozen=True)
class RabbitCluster:
    nodes: tuple[RabbitNode, ...]

    @property
    def uris(self) -> list[str]:
        return [node.uri for node in self.nodes]


def node_name(index: int) -> str:
    # The pid keeps two runs at once (a test beside `make compare`) apart in epmd.
    return f"rabbit-bench-{index}-{os.getpid()}@localhost"


def ctl(env: dict[str, str], *arguments: str) -> str:
    """`rabbitmqctl` against the node `env` names; its output, or ClusterUnavailable."""
    command = [str(RABBITMQCTL), *arguments]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CTL_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise ClusterUnavailable(f"rabbitmqctl {arguments[0]} took over {CTL_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        reason = " ".join((done.stderr or done.stdout).split())[:300]
        raise ClusterUnavailable(f"rabbitmqctl {arguments[0]} failed: {reason}")
    return done.stdout


def running_nodes(env: dict[str, str]) -> list[str]:
    status = json.loads(ctl(env, "cluster_status", "--formatter", "json"))
    return list(status.get("running_nodes", []))


@contextmanager
def start_node(workdir: Path, home: Path, index: int) -> Iterator[tuple[RabbitNode, dict[str, str]]]:
    """One node, listening; stopped (SIGTERM, then SIGKILL) when the block ends."""
    base = workdir / f"rabbit-bench-{index}"
    base.mkdir(parents=True)
    (base / "enabled_plugins").write_text("[].\n")  # management off
    (base / "rabbitmq.conf").write_text("")
    port = free_port()
    env = rabbitmq_environment(base, home, node_name(index), port)
    log = base / "rabbitmq.log"
    with open(log, "wb") as output:
        process = subprocess.Popen([str(RABBITMQ_SERVER)], stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        try:
            wait_until_listening((port,), process, f"RabbitMQ node {index}", log)
        except RuntimeError as exc:
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
            raise ClusterUnavailable(f"RabbitMQ node {index} did not start: {last[:300]}") from None
        pid = int((base / "pid").read_text().strip())
        yield RabbitNode(env["RABBITMQ_NODENAME"], loopback_uri(port), pid), env
    finally:
        stop_process(process, f"RabbitMQ node {index}")


@contextmanager
def rabbitmq_cluster(workdir: Path, size: int = 3) -> Iterator[RabbitCluster]:
    """`size` nodes clustered with the first; ClusterUnavailable when that cannot be done here."""
    if not RABBITMQ_SERVER.exists():
        raise ClusterUnavailable("rabbitmq-server is not installed")
    home = workdir / "rabbit-bench-home"
    home.mkdir(parents=True)
    cookie = home / ".erlang.cookie"
    cookie.write_text(COOKIE)
    cookie.chmod(0o400)  # Erlang refuses a cookie others can read
    epmd_was_running = port_accepts(EPMD_PORT)
    try:
        with ExitStack() as nodes_running:
            started = [nodes_running.enter_context(start_node(workdir, home, index)) for index in range(1, size + 1)]
            first = started[0][0].name
            for _, env in started[1:]:
                ctl(env, "stop_app")
                ctl(env, "join_cluster", first)
                ctl(env, "start_app")
            wait_until_clustered(started[0][1], size)
            yield RabbitCluster(tuple(node for node, _ in started))
    finally:
        stop_epmd_unless(epmd_was_running)


def wait_until_clustered(env: dict[str, str], size: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while len(running := running_nodes(env)) < size:
        if time.monotonic() > deadline:
            waited = f"after {START_TIMEOUT:.0f} s"
            raise ClusterUnavailable(f"only {len(running)} of {size} RabbitMQ nodes running {waited}")
        time.sleep(POLL)
