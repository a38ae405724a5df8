"""Telling whoever started the broker that it is ready: a ready file naming the ports it
bound (so a test or a script can ask for port 0 and learn which port it got, with no race
for a port picked in advance), and systemd's notify protocol (`Type=notify` units)."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def write_ready_file(path: Path, listeners: Sequence[tuple[str, str, int]]) -> None:
    """Write `{"pid": ..., "listeners": [{"protocol", "interface", "port"}, ...]}` to `path`,
    whole or not at all: a reader polling for the file never sees half of it."""
    report = {
        "pid": os.getpid(),
        "listeners": [
            {"protocol": protocol, "interface": interface, "port": port} for protocol, interface, port in listeners
        ],
    }
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report) + "\n")
    partial.replace(path)


def remove_ready_file(path: Path) -> None:
    """At shutdown: a ready file left behind would announce a broker that is gone."""
    path.unlink(missing_ok=True)


def notify_systemd(state: str) -> None:
    """Send `state` ("READY=1", "STOPPING=1") to systemd when it runs the broker as a
    `Type=notify` service; a no-op otherwise. The protocol is one datagram on a unix socket,
    so it needs no library."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):  # an abstract socket: its name starts with a NUL byte
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(state.encode(), address)
    except OSError as exc:
        log.warning("Could not notify systemd (%s) at NOTIFY_SOCKET: %s", state, exc)
