"""Further brokers for `bench/compare`: `--peer NAME=URI[,START_CMD]` and `--peer-pid NAME=PID`.

Without START_CMD the peer is a broker already running at URI. With it, the command (split
as a shell would, but run without one) is started in the peer's own directory under the
run's temporary directory, waited for until URI (and an AMQPS port, if it has one) accepts
connections, and stopped with SIGTERM afterwards. Placeholders in the URI and the command:

- `{data_dir}`: a directory for the peer's data, empty when it is first started;
- `{cert}`, `{key}`, `{ca}`: the run's server certificate, its key and the CA that signed it;
- `{NAME_port}`, any name ending in `_port` (`{amqp_port}`, `{http_port}`, `{mqtt_port}`):
  a free loopback port, the same one wherever the name appears. A command that uses
  `{amqps_port}` gives the peer AMQPS: lavin-perf reaches it there, checking the
  certificate against `{ca}`.

The started process is the one whose CPU time is read (so START_CMD should be the broker
itself, or `exec` it); `--peer-pid` names another one, or the pid of a peer that runs already.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lavin.bench.brokers import (
    START_TIMEOUT,
    Broker,
    Certificates,
    environment_without_lavin,
    free_port,
    port_accepts,
    stop_process,
    wait_until_listening,
)

PLACEHOLDER = re.compile(r"\{(\w+)\}")
PATH_PLACEHOLDERS = frozenset({"data_dir", "cert", "key", "ca"})
PORT_SUFFIX = "_port"
AMQPS_PORT = "amqps_port"
PEER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # it names the peer's directory too
DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}


@dataclass(frozen=True)
class PeerSpec:
    name: str
    uri: str  # placeholders not filled in yet
    start: tuple[str, ...] | None  # the command's words, placeholders not filled in yet

    @property
    def placeholders(self) -> frozenset[str]:
        words = (self.uri, *(self.start or ()))
        return frozenset(match for word in words for match in PLACEHOLDER.findall(word))


def parse_peer(text: str) -> PeerSpec:
    """`NAME=URI[,START_CMD]`, for argparse."""
    name, equals, rest = text.partition("=")
    uri, comma, command = rest.partition(",")
    if not equals or not PEER_NAME.fullmatch(name) or not uri:
        raise argparse.ArgumentTypeError(
            f"expected NAME=URI[,START_CMD] with a NAME of letters, digits, '.', '_' or '-', got {text!r}"
        )
    if urlsplit(uri).scheme not in DEFAULT_PORTS:
        raise argparse.ArgumentTypeError(f"{name}: the URI must start with amqp:// or amqps://, got {uri!r}")
    try:
        start = tuple(shlex.split(command)) if comma else None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{name}: cannot split START_CMD: {exc}") from None
    if start == ():
        raise argparse.ArgumentTypeError(f"{name}: START_CMD after the comma is empty")
    spec = PeerSpec(name, uri, start)
    unknown = sorted(p for p in spec.placeholders if p not in PATH_PLACEHOLDERS and not p.endswith(PORT_SUFFIX))
    if unknown:
        known = "{data_dir}, {cert}, {key}, {ca} and {NAME_port}"
        raise argparse.ArgumentTypeError(f"{name}: unknown placeholder {{{unknown[0]}}} (known: {known})")
    if start is None and spec.placeholders:
        raise argparse.ArgumentTypeError(f"{name}: placeholders need a START_CMD to fill them in")
    return spec


def parse_peer_pid(text: str) -> tuple[str, int]:
    """`NAME=PID`, for argparse."""
    name, equals, pid = text.partition("=")
    if not equals or not pid.isdigit() or int(pid) == 0:
        raise argparse.ArgumentTypeError(f"expected NAME=PID, got {text!r}")
    return name, int(pid)


def host_and_port(uri: str) -> tuple[str, int]:
    parts = urlsplit(uri)
    return parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS[parts.scheme]


def over_amqps(uri: str, port: int) -> str:
    """The same user, host and vhost over AMQPS on `port`."""
    parts = urlsplit(uri)
    credentials, at, _ = parts.netloc.rpartition("@")
    host, _ = host_and_port(uri)
    host = f"[{host}]" if ":" in host else host  # IPv6
    return parts._replace(scheme="amqps", netloc=f"{credentials}{at}{host}:{port}").geturl()


@contextmanager
def peer(
    spec: PeerSpec,
    workdir: Path,
    certificates: Certificates,
    pid: int | None = None,
    *,
    instance: str = "",
    start_timeout: float = START_TIMEOUT,
) -> Iterator[Broker]:
    """The peer as a `Broker`: started from its START_CMD, or found running at its URI.
    A started peer's directory is `workdir/peer-NAME{instance}`: started again with the same
    ones, it finds its data dir as it left it."""
    if spec.start is None:
        host, port = host_and_port(spec.uri)
        if not port_accepts(port, host):
            raise RuntimeError(f"{spec.name}: nothing accepts connections at {host}:{port} (and no START_CMD)")
        yield Broker(spec.name, spec.uri, pid)
        return
    name = f"{spec.name}{instance}"
    directory = workdir / f"peer-{name}"
    values = {"data_dir": str(directory / "data"), "cert": str(certificates.cert),
              "key": str(certificates.key), "ca": str(certificates.ca)}  # fmt: skip
    values |= {name: str(free_port()) for name in spec.placeholders if name.endswith(PORT_SUFFIX)}

    def fill(text: str) -> str:
        return PLACEHOLDER.sub(lambda match: values[match.group(1)], text)

    uri, command = fill(spec.uri), [fill(word) for word in spec.start]
    host, port = host_and_port(uri)
    amqps_port = int(values[AMQPS_PORT]) if AMQPS_PORT in values else None
    ports = [port] if amqps_port is None else [port, amqps_port]
    (directory / "data").mkdir(parents=True, exist_ok=True)
    log = directory / "output.log"
    with open(log, "ab") as output:
        process = subprocess.Popen(
            command, cwd=directory, stdout=output, stderr=subprocess.STDOUT, env=environment_without_lavin()
        )
    try:
        wait_until_listening(ports, process, name, log, host, start_timeout)
        print(f"{name}: pid {process.pid}: {shlex.join(command)}", file=sys.stderr)
        amqps_uri = None if amqps_port is None else over_amqps(uri, amqps_port)
        yield Broker(name, uri, pid if pid is not None else process.pid, amqps_uri, certificates.ca)
    finally:
        stop_process(process, name)
