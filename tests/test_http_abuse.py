"""The HTTP abuse suite: what a client may do to the management listener with its sockets,
headers and bodies, each probe bounded in time. Idle and silent sockets and the
per-listener cap are in test_http_connection_limits.py, the WebSocket's pre-login bound in
test_websocket.py; this file adds the drips, the oversized requests and the file
descriptors the broker spends on them."""

from __future__ import annotations

import base64
import os
import time

import pika
import pytest
import requests
from broker_process import BrokerProcess
from control_helpers import ctl_ok
from socket_helpers import connect, held_sockets, seconds_until_closed

GUEST = ("guest", "guest")
IDLE_TIMEOUT = 1  # seconds, --http-idle-timeout of the broker below
CAP = 8
AUTHORIZATION = "Basic " + base64.b64encode(b"guest:guest").decode()


@pytest.fixture(scope="module")
def quick_broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("abuse"),
        extra_args=["--http-idle-timeout", str(IDLE_TIMEOUT), "--http-max-connections", str(CAP)],
    )
    broker.start()
    yield broker
    broker.stop()


def open_fds(broker: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{broker.pid}/fd"))


def still_serves(broker: BrokerProcess) -> None:
    """AMQP and the control socket work."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    assert connection.is_open
    connection.close()
    assert "guest" in ctl_ok(broker, "list_users")


def test_headers_dripped_a_byte_a_second_are_cut_off(quick_broker: BrokerProcess) -> None:
    """A slow-loris that keeps sending: the deadline is for the whole headers, not for a pause."""
    request = f"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nAuthorization: {AUTHORIZATION}\r\n".encode()
    started = time.monotonic()
    with connect(quick_broker.http_port) as sock:
        sock.settimeout(0.05)
        try:
            for byte in request:
                sock.sendall(bytes([byte]))
                time.sleep(0.3)
                assert time.monotonic() - started < IDLE_TIMEOUT + 3, "still reading dripped headers"
        except (BrokenPipeError, ConnectionResetError):
            pass
        seconds_until_closed(sock, limit=IDLE_TIMEOUT + 3)
    assert time.monotonic() - started < IDLE_TIMEOUT + 3


def test_a_body_dripped_after_its_headers_is_cut_off_with_408(quick_broker: BrokerProcess) -> None:
    body = b'{"description": "dripped"}'
    head = (
        f"PUT /api/vhosts/dripped HTTP/1.1\r\nHost: localhost\r\nAuthorization: {AUTHORIZATION}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    with connect(quick_broker.http_port) as sock:
        sock.sendall(head)
        sock.settimeout(0.3)
        answer = b""
        for byte in body:
            sock.sendall(bytes([byte]))
            try:
                answer = sock.recv(4096)
            except TimeoutError:
                continue
            break
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"error": "request_timeout"' in answer
        seconds_until_closed(sock, limit=3)
    assert time.monotonic() - started < IDLE_TIMEOUT + 2
    assert requests.get(f"{quick_broker.http_url}/api/vhosts/dripped", auth=GUEST, timeout=5).status_code == 404


def test_oversized_headers_are_refused_at_once(quick_broker: BrokerProcess) -> None:
    started = time.monotonic()
    response = requests.get(
        f"{quick_broker.http_url}/api/overview", auth=GUEST, headers={"X-Big": "x" * 100_000}, timeout=5
    )
    assert response.status_code in (400, 431), response.text
    assert time.monotonic() - started < 2
    logged = [line for line in quick_broker.output.splitlines() if "8190 bytes" in line or "Traceback" in line]
    assert len(logged) == 1, logged  # one warning line, no traceback


def test_an_oversized_body_is_400(quick_broker: BrokerProcess) -> None:
    started = time.monotonic()
    response = requests.put(
        f"{quick_broker.http_url}/api/vhosts/huge",
        auth=GUEST,
        data=b"x" * (21 * 1024 * 1024),
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 400, response.text
    assert response.json() == {"error": "bad_request", "reason": "Exceeded HTTP request body size limit"}
    assert time.monotonic() - started < 5


def test_idle_sockets_past_the_cap_cost_no_descriptors_and_amqp_still_works(quick_broker: BrokerProcess) -> None:
    before = open_fds(quick_broker)
    with held_sockets(quick_broker.http_port, CAP * 4):
        time.sleep(0.3)  # let the broker accept (and refuse) them all
        assert open_fds(quick_broker) - before <= CAP + 2  # the cap's sockets, and a little slack
        still_serves(quick_broker)
    time.sleep(IDLE_TIMEOUT + 0.5)
    assert open_fds(quick_broker) - before <= 2
