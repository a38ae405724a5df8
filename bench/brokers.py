"""Brokers for `bench/compare`: a Lavin and a private RabbitMQ node, each on free ports.

Neither touches anything outside its temporary directory: Lavin gets its own data dir,
RabbitMQ its own mnesia, log, cookie (HOME), plugin and config files, listens on loopback
only, runs only the plugins asked for (none by default), and ignores whatever /etc/rabbitmq
holds. An `instance` suffix lets a second broker of the same kind run beside the first. Given `Certificates`
(made at run time by `write_certificates`) both also listen for AMQPS with the same
certificate and ask clients for none.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
# The script itself, not Debian's /usr/sbin wrapper, which switches to the rabbitmq user.
RABBITMQCTL = RABBITMQ_SERVER.with_name("rabbitmqctl")
CTL_TIMEOUT = 60.0
EPMD_PORT = 4369
START_TIMEOUT = 90.0
STOP_TIMEOUT = 60.0
CERTIFICATE_DAYS = "2"
# The server's names: lavin-perf checks the certificate against the CA and 127.0.0.1.
SERVER_EXTENSIONS = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"


class Transport(enum.Enum):
    AMQP = "AMQP over TCP"
    AMQPS = "AMQPS"
    WEBSOCKET = "AMQP over WebSocket"


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


class Shovels(Protocol):
    """Defines and removes dynamic shovels (in the default vhost) on one broker."""

    def set(self, name: str, value: Mapping[str, Any]) -> None: ...

    def clear(self, name: str) -> None: ...


class LavinShovels:
    """Through the management API's parameters, as guest."""

    def __init__(self, http_url: str) -> None:
        self.http_url = http_url

    def _request(self, method: str, name: str, body: Mapping[str, Any] | None) -> None:
        url = f"{self.http_url}/api/parameters/shovel/%2F/{quote(name, safe='')}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
        request.add_unredirected_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")  # guest:guest
        with urllib.request.urlopen(request, timeout=CTL_TIMEOUT):  # raises HTTPError on a 4xx or 5xx
            pass

    def set(self, name: str, value: Mapping[str, Any]) -> None:
        self._request("PUT", name, {"value": value})

    def clear(self, name: str) -> None:
        self._request("DELETE", name, None)


class RabbitShovels:
    """With `rabbitmqctl` in the node's environment: its management plugin is not enabled."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)

    def _ctl(self, *arguments: str) -> None:
        command = [str(RABBITMQCTL), *arguments]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=CTL_TIMEOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {arguments[0]} failed: {(done.stderr or done.stdout).strip()}")

    def set(self, name: str, value: Mapping[str, Any]) -> None:
        self._ctl("set_parameter", "shovel", name, json.dumps(value))

    def clear(self, name: str) -> None:
        self._ctl("clear_parameter", "shovel", name)


@dataclass(frozen=True)
class Broker:
    name: str
    uri: str
    # The process whose /proc entry covers all of the broker's threads; None when unknown
    # (a broker someone else started): no CPU figures then.
    pid: int | None
    amqps_uri: str | None = None
    ca: Path | None = None  # what the AMQPS certificate is checked against
    websocket_url: str | None = None  # AMQP over WebSocket, for a broker that has it
    shovels: Shovels | None = None  # for a broker whose shovels the comparison knows how to set
    # The environment `rabbitmqctl` reaches this node with (its name and Erlang cookie).
    control_env: Mapping[str, str] | None = None

    def perf_arguments(self, transport: Transport) -> list[str] | None:
        """How lavin-perf reaches this broker over `transport`; None when it offers no such thing."""
        if transport is Transport.AMQPS:
            if self.amqps_uri is None:
                return None
            return ["--uri", self.amqps_uri, "--tls-ca-cert", str(self.ca)]
        if transport is Transport.WEBSOCKET:
            return None if self.websocket_url is None else ["--uri", self.uri, "--ws", self.websocket_url]
        return ["--uri", self.uri]


def write_certificates(directory: Path) -> Certificates:
    """A CA and a server certificate for localhost and 127.0.0.1 signed by it (EC P-256)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    cert, key, request = directory / "server.crt", directory / "server.key", directory / "server.csr"
    extensions = directory / "server.ext"
    extensions.write_text(SERVER_EXTENSIONS)
    new_key = ["-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    for command in (
        ["req", "-x509", *new_key, "-keyout", ca_key, "-out", ca, "-days", CERTIFICATE_DAYS,
         "-subj", "/CN=lavin-compare CA"],
        ["req", "-new", *new_key, "-keyout", key, "-out", request, "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", CERTIFICATE_DAYS,
         "-extfile", extensions, "-out", cert],
    ):  # fmt: skip
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    return Certificates(ca, cert, key)


def loopback_uri(port: int, scheme: str = "amqp") -> str:
    return f"{scheme}://guest:guest@127.0.0.1:{port}/%2F"


def amqps_reach(amqps_port: int | None, certificates: Certificates | None) -> tuple[str | None, Path | None]:
    """A loopback AMQPS listener's URI and the CA its certificate is checked against."""
    if amqps_port is None or certificates is None:
        return None, None
    return loopback_uri(amqps_port, "amqps"), certificates.ca


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until_listening(
    ports: Sequence[int],
    process: subprocess.Popen[bytes],
    name: str,
    log: Path,
    host: str = "127.0.0.1",
    timeout: float = START_TIMEOUT,
) -> None:
    deadline = time.monotonic() + timeout
    while not all(port_accepts(port, host) for port in ports):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{name} did not start listening on {', '.join(map(str, ports))}:\n{tail}")
        time.sleep(0.2)


def stop_process(process: subprocess.Popen[bytes], name: str) -> None:
    """SIGTERM (a graceful shutdown for both brokers), SIGKILL if that takes too long."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"{name} did not stop in {STOP_TIMEOUT:.0f} s; killing it", file=sys.stderr)
            process.kill()
            process.wait()


def environment_without_lavin() -> dict[str, str]:
    """This environment without LAVIN_* settings, which would override a broker's flags."""
    return {key: value for key, value in os.environ.items() if not key.startswith("LAVIN_")}


@contextmanager
def lavin(
    workdir: Path,
    extra_args: Sequence[str] = (),
    *,
    certificates: Certificates | None = None,
    instance: str = "",
    executable: Path | None = None,
    start_timeout: float = START_TIMEOUT,
) -> Iterator[Broker]:
    """`lavin serve` from the same environment as this interpreter (.venv/bin/lavin), or
    another build's `executable`, with AMQP over WebSocket on its HTTP port, AMQPS given
    `certificates`, and any further `lavin serve` flags. Started again with the same `workdir`
    and `instance`, it finds the data it left (and appends to its log)."""
    port, http_port = free_port(), free_port()
    amqps_port = free_port() if certificates is not None else None
    name = f"Lavin{instance}"
    log = workdir / f"lavin{instance}.log"
    data_dir = workdir / f"lavin{instance}-data"
    command = [str(executable or Path(sys.executable).parent / "lavin"), "serve", "--data-dir", str(data_dir),
               "--bind", "127.0.0.1", "--amqp-port", str(port), "--log-level", "warning",
               "--http-port", str(http_port), "--metrics-http-port", str(free_port())]  # fmt: skip
    if certificates is not None:
        command += ["--tls-cert", str(certificates.cert), "--tls-key", str(certificates.key),
                    "--amqps-port", str(amqps_port), "--https-port", "-1"]  # fmt: skip
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [*command, *extra_args], stdout=output, stderr=subprocess.STDOUT, env=environment_without_lavin()
        )
    try:
        ports = (port, http_port) if amqps_port is None else (port, http_port, amqps_port)
        wait_until_listening(ports, process, name, log, timeout=start_timeout)
        amqps_uri, ca = amqps_reach(amqps_port, certificates)
        http_url = f"http://127.0.0.1:{http_port}"
        yield Broker(name, loopback_uri(port), process.pid, amqps_uri, ca, f"ws://127.0.0.1:{http_port}/ws/amqp",
                     LavinShovels(http_url))  # fmt: skip
    finally:
        stop_process(process, name)


def ensure_rabbitmq_installed() -> None:
    if RABBITMQ_SERVER.exists():
        return
    if os.geteuid() != 0:
        sys.exit("rabbitmq-server is not installed; run: sudo apt-get install rabbitmq-server")
    print("installing rabbitmq-server with apt-get", file=sys.stderr)
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "rabbitmq-server"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True)
        subprocess.run(install, env=env, check=True)


def rabbitmq_tls_config(amqps_port: int, certificates: Certificates) -> str:
    """rabbitmq.conf for an AMQPS listener as Lavin's: TLS 1.2 and 1.3, no client certificate."""
    return (
        f"listeners.ssl.default = 127.0.0.1:{amqps_port}\n"
        f"ssl_options.cacertfile = {certificates.ca}\n"
        f"ssl_options.certfile = {certificates.cert}\n"
        f"ssl_options.keyfile = {certificates.key}\n"
        "ssl_options.verify = verify_none\n"
        "ssl_options.fail_if_no_peer_cert = false\n"
        "ssl_options.versions.1 = tlsv1.3\n"
        "ssl_options.versions.2 = tlsv1.2\n"
    )


def rabbitmq_environment(base: Path, home: Path, nodename: str, port: int) -> dict[str, str]:
    """How `rabbitmq-server` and `rabbitmqctl` reach a private node whose files are all under
    `base` and whose Erlang cookie is in `home`: loopback only, a free distribution port."""
    return {
        **os.environ,
        "HOME": str(home),
        "RABBITMQ_NODENAME": nodename,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_LOGS": "-",
        "RABBITMQ_PID_FILE": str(base / "pid"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        # Only this run's files, rather than whatever /etc/rabbitmq holds.
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
    }


@contextmanager
def rabbitmq(
    workdir: Path,
    *,
    certificates: Certificates | None = None,
    plugins: Sequence[str] = (),
    instance: str = "",
    start_timeout: float = START_TIMEOUT,
) -> Iterator[Broker]:
    """A private node running only `plugins`; AMQPS given `certificates`. RabbitMQ 3.10 has
    no AMQP over WebSocket (its Web-AMQP plugin came later), so the broker has no websocket_url.
    Started again with the same `workdir` and `instance`, it is the same node on the same
    mnesia directory."""
    name = f"RabbitMQ{instance}"
    base = workdir / f"rabbitmq{instance}"
    home = base / "home"  # the Erlang cookie goes here
    home.mkdir(parents=True, exist_ok=True)
    (base / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")  # management off unless asked for
    port = free_port()
    amqps_port = free_port() if certificates is not None else None
    config = "" if certificates is None else rabbitmq_tls_config(amqps_port or 0, certificates)
    (base / "rabbitmq.conf").write_text(config)
    env = rabbitmq_environment(base, home, f"lavin-compare-{os.getpid()}{instance}@localhost", port)
    epmd_was_running = port_accepts(EPMD_PORT)
    log = base / "rabbitmq.log"
    with open(log, "ab") as output:
        # The script traps SIGTERM and shuts the Erlang node down cleanly.
        process = subprocess.Popen([str(RABBITMQ_SERVER)], stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        ports = (port,) if amqps_port is None else (port, amqps_port)
        wait_until_listening(ports, process, name, log, timeout=start_timeout)
        # The Erlang VM's own pid (the script's child), whose /proc entry covers every scheduler.
        pid = int((base / "pid").read_text().strip())
        amqps_uri, ca = amqps_reach(amqps_port, certificates)
        shovels = RabbitShovels(env) if "rabbitmq_shovel" in plugins else None
        yield Broker(name, loopback_uri(port), pid, amqps_uri, ca, shovels=shovels, control_env=env)
    finally:
        stop_process(process, name)
        stop_epmd_unless(epmd_was_running)


def stop_epmd_unless(was_running: bool) -> None:
    """After the last node stops: the first node started epmd; leave no daemon behind."""
    epmd = shutil.which("epmd")
    if not was_running and epmd is not None:
        subprocess.run([epmd, "-kill"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
