"""Brokers for `bench/compare`: a Lavin and a private RabbitMQ node, each on a free port.

Neither touches anything outside its temporary directory: Lavin gets its own data dir,
RabbitMQ its own mnesia, log, cookie (HOME) and plugin files, listens on loopback only,
runs no plugins, and ignores whatever /etc/rabbitmq holds.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
EPMD_PORT = 4369
START_TIMEOUT = 90.0
STOP_TIMEOUT = 60.0


@dataclass(frozen=True)
class Broker:
    name: str
    port: int
    pid: int  # the process whose /proc entry covers all of the broker's threads

    @property
    def uri(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until_listening(port: int, process: subprocess.Popen[bytes], name: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not port_accepts(port):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{name} did not start listening on {port}:\n{tail}")
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


@contextmanager
def lavin(workdir: Path, extra_args: Sequence[str] = ()) -> Iterator[Broker]:
    """`lavin serve` from the same environment as this interpreter (.venv/bin/lavin), with
    any further `lavin serve` flags."""
    port = free_port()
    log = workdir / "lavin.log"
    command = [str(Path(sys.executable).parent / "lavin"), "serve", "--data-dir", str(workdir / "lavin-data"),
               "--bind", "127.0.0.1", "--amqp-port", str(port), "--log-level", "warning",
               "--http-port", str(free_port()), "--metrics-http-port", str(free_port()), *extra_args]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAVIN_")}
    with open(log, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until_listening(port, process, "Lavin", log)
        yield Broker("Lavin", port, process.pid)
    finally:
        stop_process(process, "Lavin")


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


@contextmanager
def rabbitmq(workdir: Path) -> Iterator[Broker]:
    base = workdir / "rabbitmq"
    home = base / "home"  # the Erlang cookie goes here
    home.mkdir(parents=True)
    (base / "enabled_plugins").write_text("[].\n")  # management and every other plugin off
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        "RABBITMQ_NODENAME": f"lavin-compare-{os.getpid()}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_LOGS": "-",
        "RABBITMQ_PID_FILE": str(base / "pid"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        # Files that do not exist: defaults, rather than whatever /etc/rabbitmq holds.
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
    }
    epmd_was_running = port_accepts(EPMD_PORT)
    log = base / "rabbitmq.log"
    with open(log, "wb") as output:
        # The script traps SIGTERM and shuts the Erlang node down cleanly.
        process = subprocess.Popen([str(RABBITMQ_SERVER)], stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until_listening(port, process, "RabbitMQ", log)
        # The Erlang VM's own pid (the script's child), whose /proc entry covers every scheduler.
        yield Broker("RabbitMQ", port, int((base / "pid").read_text().strip()))
    finally:
        stop_process(process, "RabbitMQ")
        epmd = shutil.which("epmd")
        if not epmd_was_running and epmd is not None:  # the node started it; leave no daemon behind
            subprocess.run([epmd, "-kill"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
