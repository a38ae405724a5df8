"""Idle, silent and slow clients cannot hold the broker's sockets: HTTP connections that do
not send their request headers in time are closed, each HTTP listener caps its open
connections (AMQP and the control socket still work past the cap), and AMQP sockets that
never finish their protocol header are closed by the handshake deadline."""

from __future__ import annotations

import time

import pika
import pytest
import requests
from broker_process import BrokerProcess, stop_quietly
from control_helpers import ctl_ok
from socket_helpers import connect, held_sockets, seconds_until_closed

GUEST = ("guest", "guest")
IDLE_TIMEOUT = 1  # seconds, --http-idle-timeout of the brokers below
CAP = 3


@pytest.fixture
def quick_broker(broker_factory) -> BrokerProcess:
    return broker_factory(extra_args=["--http-idle-timeout", str(IDLE_TIMEOUT), "--http-max-connections", str(CAP)])


@pytest.mark.parametrize("listener", ["http_port", "metrics_port"])
@pytest.mark.parametrize(
    "sends",
    [
        b"",  # never sends
        b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nX-Slow: ",  # a slow-loris stalling mid-headers
        b"GET /api/ove",  # stalling mid request line
    ],
    ids=["silent", "partial-headers", "partial-request-line"],
)
def test_a_client_that_does_not_finish_its_headers_is_closed(
    quick_broker: BrokerProcess, listener: str, sends: bytes
) -> None:
    with connect(getattr(quick_broker, listener)) as sock:
        sock.sendall(sends)
        assert seconds_until_closed(sock, limit=IDLE_TIMEOUT + 5) >= IDLE_TIMEOUT - 0.1


def test_an_idle_keep_alive_connection_is_closed(quick_broker: BrokerProcess) -> None:
    with connect(quick_broker.http_port) as sock:
        sock.sendall(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n")
        assert sock.recv(12) == b"HTTP/1.1 200"
        seconds_until_closed(sock, limit=IDLE_TIMEOUT + 5)


def served_again(url: str, within: float) -> bool:
    """Whether `url` answers 200 within `within` seconds (a refused or reset try is retried)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if requests.get(url, auth=GUEST, timeout=5).status_code == 200:
                return True
        except requests.ConnectionError:
            time.sleep(0.1)
    return False


def test_connections_over_the_cap_are_closed_while_amqp_and_ctl_still_work(broker_factory) -> None:
    broker = broker_factory(extra_args=["--http-max-connections", str(CAP)])
    for port in (broker.http_port, broker.metrics_port):
        with held_sockets(port, CAP):
            time.sleep(0.2)  # let the broker accept them all
            for _ in range(3):
                with connect(port) as over:
                    over.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    assert seconds_until_closed(over, limit=5) < 2
            connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
            assert connection.is_open
            connection.close()
            assert "guest" in ctl_ok(broker, "list_users")
        # The places are given back when the broker has seen the held sockets close.
        url = f"http://127.0.0.1:{port}/{'api/overview' if port == broker.http_port else 'metrics'}"
        assert served_again(url, within=5.0)
    refusals = [line for line in broker.output.splitlines() if "Refused" in line]
    # Once per interval: the first refusal of each listener, not one line per socket.
    assert len(refusals) == 2, refusals
    assert "Traceback" not in broker.output


@pytest.mark.parametrize("sends", [b"", b"AMQP\x00"], ids=["silent", "half-header"])
def test_an_amqp_socket_that_never_finishes_its_protocol_header_is_closed(broker: BrokerProcess, sends: bytes) -> None:
    with connect(broker.port) as sock:
        sock.sendall(sends)
        assert 9 <= seconds_until_closed(sock, limit=15) <= 13


class LowFileLimitBroker(BrokerProcess):
    """A broker whose open-file limit is FILE_LIMIT, hard and soft."""

    @property
    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={FILE_LIMIT}:{FILE_LIMIT}", *super().command]


FILE_LIMIT = 256  # an eighth: 32 connections per HTTP listener


def test_the_cap_is_lowered_to_a_share_of_the_open_file_limit(tmp_path) -> None:
    broker = LowFileLimitBroker(tmp_path / "data")
    broker.start()
    try:
        share = FILE_LIMIT // 8
        with held_sockets(broker.http_port, share), held_sockets(broker.metrics_port, share):
            time.sleep(0.2)  # let the broker accept them all
            with connect(broker.http_port) as over:
                assert seconds_until_closed(over, limit=5) < 2
            connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
            assert connection.is_open
            connection.close()
            assert "guest" in ctl_ok(broker, "list_users")
        assert f"http_max_connections 1024 lowered to {share} per HTTP listener" in broker.output
    finally:
        stop_quietly(broker)
